"""Issue 44 item C: MLlib's column conventions. A DataFrame is read by the columns SparkNetwork's
features_col and label_col name, MLlib's "features" and "label" by default (libsvm's order,
label first, works), pyspark.ml.linalg vectors included; the first two columns by position only
where neither name is there, said in a warning; a missing or wrong column is refused at the call,
on the driver, naming the DataFrame's columns and the call that fixes it (which runs)."""

import re
import warnings

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Sgd, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork


@pytest.fixture(scope="module")
def spark(sc):
    from pyspark.sql import SparkSession

    return SparkSession(sc)


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    x, y = train.features.numpy()[:120], train.labels.numpy()[:120].argmax(axis=1)
    return x, y


def _reference(x, y):
    ref = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    ref.fit(ArrayIterator(DataSet(x, np.eye(10, dtype=np.float32)[y]), 20))
    return ref.params().numpy()


def _fit(sc, df, **cols):
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT")
    spark_net = SparkNetwork(sc, net, tm, **cols)
    spark_net.fit(df.coalesce(1))
    return spark_net


def _frame(spark, x, y, layout):
    """The same examples as a DataFrame in each layout: (column names and kinds, rows)."""
    from pyspark.ml.linalg import Vectors

    dense = [Vectors.dense(r.tolist()) for r in x]
    sparse = [Vectors.sparse(64, {j: float(v) for j, v in enumerate(r) if v}) for r in x]
    arrays = [r.tolist() for r in x]
    labels = [int(v) for v in y]
    rows = {
        "features,label (arrays)": (["features", "label"], list(zip(arrays, labels))),
        "label,features (ml vectors)": (["label", "features"], [(float(lab), v) for lab, v in zip(labels, dense)]),
        "label,features (sparse)": (["label", "features"], [(float(lab), v) for lab, v in zip(labels, sparse)]),
        "id,label,features": (
            ["id", "label", "features"],
            [(i, lab, v) for i, (lab, v) in enumerate(zip(labels, dense))],
        ),
        "pixels,digit (named)": (["pixels", "digit"], list(zip(arrays, labels))),
        "digit,pixels (named)": (["digit", "pixels"], list(zip(labels, arrays))),
        "pixels,digit (positional)": (["pixels", "digit"], list(zip(arrays, labels))),
    }[layout]
    return spark.createDataFrame(rows[1], rows[0])


@pytest.mark.slow
def test_libsvm_order_trains(sc, spark, digits, tmp_path):
    """The regression: spark.read.format("libsvm") gives (label, features); kit took the label
    as the features and failed after four task retries."""
    x, y = digits
    path = tmp_path / "digits.libsvm"
    path.write_text(
        "".join(f"{lab} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(r) if v) + "\n" for r, lab in zip(x, y))
    )
    df = spark.read.format("libsvm").option("numFeatures", "64").load(str(path))
    assert df.columns == ["label", "features"]
    net = _fit(sc, df).network
    np.testing.assert_allclose(net.params().numpy(), _reference(x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("layout", "cols", "positional"),
    [
        # each row trains: the fast default runs arrays, named and positional; `-m slow` (CI) every row
        ("features,label (arrays)", {}, False),
        pytest.param("label,features (ml vectors)", {}, False, marks=pytest.mark.slow),
        pytest.param("label,features (sparse)", {}, False, marks=pytest.mark.slow),
        pytest.param("id,label,features", {}, False, marks=pytest.mark.slow),
        ("pixels,digit (named)", {"features_col": "pixels", "label_col": "digit"}, False),
        pytest.param(
            "digit,pixels (named)", {"features_col": "pixels", "label_col": "digit"}, False, marks=pytest.mark.slow
        ),
        ("pixels,digit (positional)", {}, True),
    ],
)
def test_every_column_layout_trains_the_same_network(sc, spark, digits, layout, cols, positional):
    x, y = digits
    df = _frame(spark, x, y, layout)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = _fit(sc, df, **cols).network
    said = [str(w.message) for w in caught if "by position" in str(w.message)]
    if positional:
        (message,) = said
        assert "features_col='pixels' and label_col='digit'" in message
    else:
        assert said == []
    np.testing.assert_allclose(net.params().numpy(), _reference(x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("columns", "cols", "said"),
    [
        (["pixels", "digit"], {"features_col": "features"}, r"features_col='features'\): the DataFrame has no column"),
        # each remedy trains: the fast default runs the first and the swapped columns; `-m slow` (CI) every row
        pytest.param(
            ["features", "digit"],
            {},
            r"label_col='label'\): the DataFrame has no column 'label'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["pixels", "label"],
            {},
            r"features_col='features'\): the DataFrame has no column 'features'",
            marks=pytest.mark.slow,
        ),
        (["label", "features"], {"features_col": "label", "label_col": "features"}, r"column 'label' holds double"),
        pytest.param(
            ["features", "label"],
            {"label_col": "name"},
            r"label_col='name'\): .*no column 'name'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["features", "name", "label"], {"label_col": "name"}, r"column 'name' holds string", marks=pytest.mark.slow
        ),
    ],
)
def test_a_missing_or_wrong_column_is_refused_at_the_call_and_the_remedy_runs(sc, spark, digits, columns, cols, said):
    from pyspark.ml.linalg import Vectors

    x, y = digits
    values = {"pixels": lambda i: x[i].tolist(), "features": lambda i: Vectors.dense(x[i].tolist())}
    values |= {"digit": lambda i: int(y[i]), "label": lambda i: float(y[i]), "name": lambda i: f"row {i}"}
    df = spark.createDataFrame([tuple(values[c](i) for c in columns) for i in range(len(y))], columns)
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    before = net.params().numpy().copy()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT")
    with pytest.raises(ValueError, match=said) as raised:
        SparkNetwork(sc, net, tm, **cols).fit(df)
    message = str(raised.value)
    for c in columns:
        assert repr(c) in message  # every column of the DataFrame named
    np.testing.assert_array_equal(net.params().numpy(), before)
    remedy = re.search(r"SparkNetwork\(sc, net, tm, features_col='(\w+)', label_col='(\w+)'\)", message)
    assert remedy, message
    fixed = {"features_col": remedy.group(1), "label_col": remedy.group(2)}
    net = _fit(sc, df, **fixed).network
    np.testing.assert_allclose(net.params().numpy(), _reference(x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [3, "", ["features"]])
def test_column_names_that_are_not_names_are_refused(sc, bad):
    net = mlp(64, hidden=(16,), n_out=10, seed=0)
    for param in ("features_col", "label_col"):
        with pytest.raises(TypeError, match=rf"SparkNetwork\({param}=.*a column name"):
            SparkNetwork(sc, net, ParameterAveragingTrainingMaster(), **{param: bad})
