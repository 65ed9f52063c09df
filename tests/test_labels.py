"""Labels into classes: one rule (kit.labels) on every path -- DataSet, Evaluation, ROC, kit.spark's
to_rdd and DataFrame rows. Regressions for the two defects (an (N, 1) column through to_rdd became
class 0 everywhere; Evaluation and ROC truncated 0.4/1.9/0.6 and took [0, 3, 0] as a one-hot row),
then a sweep: every good label form gives the same classes on every path, every bad form is refused
on every path with an error naming the row and the value, and the remedy the error gives works."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet, load_digits
from kit.data.labels import class_indices
from kit.nn import Sgd, mlp
from kit.nn.evaluation import ROC, Evaluation
from kit.spark import (
    ParameterAveragingTrainingMaster,
    SparkNetwork,
    SparkTrainingError,
    spark_missing,
    to_rdd,
)
from kit.spark import executor as ex

C = 3
Y = np.array([2, 0, 1, 1, 0, 2])  # the classes every good form below means
N = len(Y)
X = np.random.default_rng(0).random((N, 4)).astype(np.float32)
P = np.full((N, C), 1 / C)  # predictions: their values do not matter here


# ---- the two defects -------------------------------------------------------------------------


def test_an_n_by_1_column_through_to_rdd_keeps_its_classes(sc):
    """It argmaxed the (N, 1) column: every row became class 0."""
    column = Y[:, None]
    for data in ((X, column), (X, column.astype(np.float32)), DataSet(X, column)):  # a DataSet keeps the column
        pairs = to_rdd(sc, data, examples_per_element=2).collect()
        assert np.concatenate([y for _, y in pairs]).tolist() == Y.tolist()


def test_spark_trains_on_an_n_by_1_column_as_on_class_indices(sc):
    """The net learned a constant (every label class 0); now it learns what a local fit learns."""
    train, _ = load_digits()
    x, y = train.features.numpy()[:120], train.labels.numpy()[:120].argmax(axis=1)
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    ref = net.clone()
    # one worker: averaging every 6 mini-batches trains as every 1 does, in one Spark job, not six
    tm = ParameterAveragingTrainingMaster(20, 6, num_workers=1, rdd_training_approach="DIRECT")
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, (x, y[:, None]), num_slices=1))
    ref.fit(ArrayIterator(DataSet(x, y, num_classes=10), 20))
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", ["(N,)", "(N, 1)"])
def test_evaluation_and_roc_refuse_fractional_labels(shape):
    """0.4, 1.9, 0.6 were truncated to classes 0, 1, 0."""
    y = np.array([0.4, 1.9, 0.6])
    y = y if shape == "(N,)" else y[:, None]
    with pytest.raises(ValueError, match=r"Evaluation: label 0\.4 at index 0 is not a whole number"):
        Evaluation(3).eval(y, P[:3])
    with pytest.raises(ValueError, match=r"ROC: label 0\.4 at index 0 is not a whole number"):
        ROC().eval(y, P[:3])
    with pytest.raises(ValueError, match=r"ROC: label 0\.4 at index 0 is not a whole number"):
        ROC().eval(y, np.array([0.2, 0.7, 0.5]))  # one sigmoid output: classes 0/1


def test_evaluation_and_roc_refuse_a_row_that_is_not_one_hot():
    """[0, 3, 0] was argmaxed to class 1."""
    y = np.array([[1, 0, 0], [0, 3, 0]])
    for path in (Evaluation(3).eval, ROC().eval):
        with pytest.raises(ValueError, match=r"label row 1 is \[0 3 0\]: not a one-hot row"):
            path(y, P[:2])
    ev = Evaluation(3)
    with pytest.raises(ValueError):
        ev.eval(y, P[:2])
    assert ev.n == 0  # nothing recorded


# ---- the sweep: every form through every path ---------------------------------------------


def _onehot(y, dtype):
    return np.eye(C, dtype=dtype)[y]


GOOD = {  # name: labels meaning the classes Y (bool: classes 0/1)
    "(N,) int": Y,
    "(N,) uint8": Y.astype(np.uint8),
    "(N, 1) int": Y[:, None],
    "(N,) whole float": Y.astype(np.float64),
    "(N, 1) whole float32": Y[:, None].astype(np.float32),
    "(N,) bool": Y == 1,
    "(N, 1) bool": (Y == 1)[:, None],
    "one-hot float": _onehot(Y, np.float32),
    "one-hot int": _onehot(Y, np.int64),
    "one-hot bool": _onehot(Y, bool),
    "list": Y.tolist(),
    "NDArray (N,)": "ndarray",
}


def _good(name):
    labels = GOOD[name]
    if isinstance(labels, str):
        return kit.asarray(Y.astype(np.float32))
    return labels


def _expected(name):
    return (Y == 1).astype(int) if "bool" in name and "one-hot" not in name else Y


def _via_dataset(labels):
    return DataSet(X[: len(labels)], labels, num_classes=C).labels.numpy().argmax(axis=1)


def _via_evaluation(labels):
    """Row by row: each row's actual class is the row of the confusion matrix it lands in."""
    out = []
    for i in range(len(labels)):
        ev = Evaluation(C)
        ev.eval(labels[i : i + 1], P[i : i + 1])
        out.append(int(ev.confusion.sum(axis=1).argmax()))
    return np.array(out)


def _via_roc(labels):
    roc = ROC()
    roc.eval(labels, P[: len(labels)])
    return np.concatenate(roc._labels).argmax(axis=1)


def _dataframe_rows(labels):
    """What a DataFrame's rows become in an executor: row_to_pair per row, tagged with where it
    was (partition 0, element j); `labels` row by row as the label column."""
    from pyspark.sql import Row

    host = labels.numpy() if hasattr(labels, "numpy") else np.asarray(labels)
    rows = [Row(features=X[i].tolist(), label=_cell(host[i])) for i in range(len(host))]
    return [((0, j), ex.row_to_pair(row)) for j, row in enumerate(rows)]


def _via_dataframe_rows(labels):
    """The checks a round runs on those rows (batches_of), as classes."""
    tagged = _dataframe_rows(labels)
    (batch,) = ex.batches_of(tagged, len(tagged), C)
    return batch.labels.numpy().argmax(axis=1)


def _cell(value):
    """A label as a DataFrame cell holds it: a number, or a list (a one-hot row)."""
    value = np.asarray(value)
    if value.shape == (1,):
        value = value[0]
    return value.tolist()


PATHS = {
    "class_indices": lambda labels: class_indices(labels, C),
    "DataSet": _via_dataset,
    "Evaluation": _via_evaluation,
    "ROC": _via_roc,
    "DataFrame rows": _via_dataframe_rows,
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("form", sorted(GOOD))
def test_every_good_form_gives_the_same_classes_on_every_path(form, path):
    if path == "DataFrame rows" and spark_missing():
        pytest.skip(spark_missing())
    labels = _good(form)
    if path == "Evaluation" and isinstance(labels, list):
        labels = np.asarray(labels)  # the row-by-row helper slices
    np.testing.assert_array_equal(PATHS[path](labels), _expected(form))


@pytest.mark.parametrize("form", sorted(GOOD))
def test_every_good_form_gives_the_same_classes_through_to_rdd(sc, form):
    labels = _good(form)
    for data in ((X, labels), DataSet(X, labels, num_classes=C)):
        pairs = to_rdd(sc, data, examples_per_element=4).collect()
        np.testing.assert_array_equal(np.concatenate([y for _, y in pairs]), _expected(form))


# name: (labels, first bad row, its value as the message shows it, "index" or "row" (how the
# message names it), whether a DataSet for training refuses it too)
BAD = {
    "fractional (N,)": (np.array([0.4, 1.9, 0.6]), 0, r"0\.4", "index", True),
    "fractional (N, 1)": (np.array([[0.0], [1.9], [0.6]]), 1, r"1\.9", "index", True),
    "NaN": (np.array([0.0, np.nan, 1.0]), 1, "nan", "index", True),
    "infinity (N, 1)": (np.array([[0.0], [1.0], [np.inf]]), 2, "inf", "index", True),
    "negative": (np.array([0, -1, 2]), 1, "-1", "index", True),
    "index == num_classes": (np.array([0, 1, 3]), 2, "3", "index", True),
    "too big whole float (N, 1)": (np.array([[0.0], [7.0], [1.0]]), 1, "7", "index", True),
    "row [0, 3, 0]": (np.array([[1, 0, 0], [0, 3, 0]]), 1, r"\[0\.? 3\.? 0\.?\]", "row", True),
    "two-hot row": (np.array([[1, 0, 0], [0, 0, 1], [1, 1, 0]]), 2, r"\[1\.? 1\.? 0\.?\]", "row", True),
    "negative row": (np.array([[1.0, 0, 0], [-1, 1, 1]]), 1, r"\[-1\. +1\. +1\.\]", "row", True),
    "NaN row": (np.array([[1.0, 0, 0], [np.nan, 1, 0]]), 1, r"\[nan +1\. +0\.\]", "row", True),
    "soft row": (np.array([[1.0, 0, 0], [0.5, 0.25, 0.25]]), 1, r"\[0\.5 +0\.25 +0\.25\]", "row", False),
}


def _names(kind, row, value):
    """The words that name the bad label: its row and its value."""
    return rf"label {value} at index {row}\b" if kind == "index" else rf"label row {row} is {value}"


SHAPES = {  # refused for their shape, named in the message
    "(N, 1, 1)": (np.zeros((3, 1, 1), np.int64), r"\(3, 1, 1\)"),
    "(N, 2) for 3 classes": (np.eye(2)[[0, 1, 0]], r"2 columns"),
}


def _bad_paths(sc):
    return {
        "class_indices": lambda labels: class_indices(labels, C),
        "DataSet": lambda labels: DataSet(X[: len(labels)], labels, num_classes=C),
        "Evaluation": lambda labels: Evaluation(C).eval(labels, P[: len(labels)]),
        "ROC": lambda labels: ROC().eval(labels, P[: len(labels)]),
        "to_rdd (features, labels)": lambda labels: to_rdd(sc, (X[: len(labels)], labels), num_classes=C),
    }


def _remedy_runs(message, path):
    """The remedy the message gives: class indices 0..C-1, or one-hot rows (N, C), accepted by
    the path that refused; and labels.argmax(axis=1) where it offers that."""
    found = re.search(r"give class indices \(N,\) of whole numbers 0\.\.(\d+), or one-hot rows \(N, (\d+)\)", message)
    assert found, message
    top, columns = int(found[1]), int(found[2])
    assert top + 1 == columns == C
    path(np.arange(N) % C)
    path(np.eye(C)[np.arange(N) % C])


@pytest.mark.parametrize("form", sorted(BAD))
def test_every_bad_form_is_refused_on_every_path_naming_row_and_value(sc, form):
    labels, row, value, kind, training_refuses = BAD[form]
    paths = _bad_paths(sc)
    if not training_refuses:  # soft labels: a DataSet keeps them for training a classifier
        assert DataSet(X[: len(labels)], labels, num_classes=C).labels.numpy().tolist() == labels.tolist()
        del paths["DataSet"]
    for name, path in paths.items():
        with pytest.raises(ValueError) as info:
            path(labels)
        message = str(info.value)
        assert re.search(_names(kind, row, value), message), (name, message)
        _remedy_runs(message, path)
        if "labels.argmax(axis=1)" in message:  # the remedy offered for rows: it runs and gives classes
            path(labels.argmax(axis=1))


@pytest.mark.parametrize("form", sorted(BAD))
def test_a_bad_dataframe_label_is_refused_naming_its_row_and_value(form):
    """A DataFrame's label column, row by row, through the executor's checks: the error names the
    element (the DataFrame row) and shows the value."""
    if spark_missing():
        pytest.skip(spark_missing())
    labels, row, value, kind, training_refuses = BAD[form]
    tagged = _dataframe_rows(labels)
    if not training_refuses:
        ex.batches_of(tagged, len(tagged), C)  # soft rows train
        return
    with pytest.raises(ex.BadElementError) as info:
        ex.batches_of(tagged, len(tagged), C)
    assert info.value.source == (0, row)  # the element: the DataFrame's row
    assert re.search(_names(kind, 0, value), str(info.value)), str(info.value)  # row 0 of a one-row element
    _remedy_runs(str(info.value), lambda y: ex.batches_of(_dataframe_rows(y), len(y), C))


@pytest.mark.parametrize("form", sorted(SHAPES))
def test_labels_of_a_wrong_shape_are_refused_naming_the_shape(sc, form):
    labels, shown = SHAPES[form]
    for name, path in _bad_paths(sc).items():
        with pytest.raises(ValueError, match=shown):
            path(labels)
        if name != "DataSet":
            with pytest.raises(ValueError, match=r"give class indices \(N,\)"):
                path(labels)


def test_a_dataframe_label_of_1_9_fails_the_spark_job_naming_its_row(sc):
    """End to end on Spark: DataFrame labels were cast with astype(int64) (1.9 -> class 1)."""
    from pyspark.sql import SparkSession

    spark = SparkSession(sc)
    values = [0.0, 1.0, 2.0, 1.9, 0.0, 2.0]
    df = spark.createDataFrame([(X[i].tolist(), values[i]) for i in range(N)], ["features", "label"]).coalesce(1)
    net = mlp(4, hidden=(5,), n_out=C, updater=Sgd(0.1), seed=0)
    tm = ParameterAveragingTrainingMaster(2, 1, num_workers=1, repartition="NEVER", rdd_training_approach="DIRECT")
    with pytest.raises(SparkTrainingError, match=r"partition 0 \(element 3, .*label 1\.9 .*not a whole number"):
        SparkNetwork(sc, net, tm).fit(df)
    good = spark.createDataFrame([(X[i].tolist(), float(Y[i])) for i in range(N)], ["features", "label"])
    ev = SparkNetwork(sc, net, tm).evaluate(good)  # whole floats (Spark's DoubleType labels) are classes
    local = net.evaluate(DataSet(X, Y, num_classes=C))
    np.testing.assert_array_equal(ev.confusion, local.confusion)


def test_soft_labels_train_but_are_scored_only_after_argmax():
    """Probability rows are legitimate training labels (a DataSet keeps them; the network checks
    them); Evaluation and ROC refuse them instead of argmaxing silently, and say how to get classes."""
    soft = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]], np.float32)
    data = DataSet(X[:3], soft, num_classes=C)
    net = mlp(4, hidden=(5,), n_out=C, seed=0)
    assert np.isfinite(net.fit_batch(data))
    with pytest.raises(ValueError, match=r"labels\.argmax\(axis=1\) gives the most likely class"):
        net.evaluate(data)
    ev = Evaluation(C)
    ev.eval(soft.argmax(axis=1), net.output(data.features))
    assert ev.n == 3


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


def test_fractional_class_labels_are_refused_not_truncated():
    with pytest.raises(ValueError, match=r"label 0\.4 at index 0 is not a whole number: .*\(2 label\(s\) are not\)"):
        DataSet(np.zeros((3, 4)), [0.4, 1.9, 1.0])
