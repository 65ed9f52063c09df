"""Data for SparkNetwork: an RDD of (features, labels) NumPy pairs, from a kit DataSet (`to_rdd`)
or from what the user gives fit() and evaluate() (`as_rdd`: an RDD as is, a DataFrame's
`features` and `label` columns, or those SparkNetwork's features_col and label_col name).

    >>> from kit.spark.rdd_data import as_rdd
    >>> as_rdd([1, 2])
    Traceback (most recent call last):
    TypeError: SparkNetwork needs an RDD of (features, labels) pairs or a DataFrame, got list; ...

Labels become class indices by kit.labels' rule where they enter (`to_rdd`). Re-exported by
kit.spark.network and kit.spark.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kit.data.dataset import DataSet
from kit.data.labels import class_indices
from kit.spark import executor as ex

__all__ = ["as_rdd", "to_rdd"]


def to_rdd(
    sc: Any,
    data: DataSet | tuple[Any, Any],
    examples_per_element: int = 1,
    num_slices: int | None = None,
    num_classes: int | None = None,
) -> Any:
    """An RDD of (features, labels) NumPy pairs from a DataSet or a (features, labels) pair;
    labels become class indices by kit.labels' rule ((N,) or (N, 1) whole numbers or bools, or
    one-hot rows; soft or fractional labels are refused, naming the row; with `num_classes`,
    indices past it too, else the workers refuse them); `examples_per_element` examples per
    element (how the data is cut for Spark; training re-batches to the master's
    batch_size_per_worker examples)."""
    if isinstance(data, DataSet):
        x, y = data.features.numpy(), data.labels.numpy()
    else:
        x, y = np.asarray(data[0]), data[1]
    y = class_indices(y, num_classes, where="to_rdd")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"to_rdd: {x.shape[0]} feature rows but {y.shape[0]} labels")
    n = examples_per_element  # features keep their dtype: the network casts them where they meet it
    pairs = [(x[i : i + n], y[i : i + n]) for i in range(0, x.shape[0], n)]
    return sc.parallelize(pairs, num_slices or sc.defaultParallelism)


NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")


def _column_kind(data: Any, name: str) -> str:
    return data.schema[name].dataType.simpleString()


def _features_ok(kind: str) -> bool:
    """An ml/mllib Vector, or an array (of arrays ...) of numbers."""
    while kind.startswith("array<"):
        kind = kind[len("array<") : -1]
        if kind in NUMERIC or kind.startswith("decimal"):
            return True
    return kind == "vector"


def _label_ok(kind: str) -> bool:
    """A class number (or bool), or a one-hot Vector or array of numbers."""
    return kind in NUMERIC or kind.startswith("decimal") or _features_ok(kind)


def _remedy(columns: list[str], kinds: dict[str, str], features_col: str | None, label_col: str | None) -> str:
    """The call that names this DataFrame's columns: the names given where they fit, else the
    first column that could hold features (a Vector or array) and the first class-number column."""
    features = features_col if features_col in kinds and _features_ok(kinds[features_col]) else None
    features = features or next((c for c in columns if _features_ok(kinds[c])), None)
    label = label_col if label_col in kinds and label_col != features and _label_ok(kinds[label_col]) else None
    label = label or next(
        (c for c in columns if c != features and _label_ok(kinds[c]) and not _features_ok(kinds[c])), None
    )
    if features is None or label is None:
        return (
            "SparkNetwork(sc, net, tm, features_col=..., label_col=...), "
            "naming a Vector or array column and a label column"
        )
    return f"SparkNetwork(sc, net, tm, features_col={features!r}, label_col={label!r})"


def dataframe_columns(data: Any, features_col: str | None, label_col: str | None) -> tuple[str, str]:
    """The (features, label) columns kit reads from a DataFrame, checked on the driver: the
    columns named, else MLlib's "features" and "label", else (neither of those names there) the
    first two columns by position, said in a warning. A column that is missing or holds the
    wrong type is refused naming the DataFrame's columns and the parameter to set."""
    columns = list(data.columns)
    kinds = {c: _column_kind(data, c) for c in columns}
    listed = ", ".join(f"{c!r} ({kinds[c]})" for c in columns) or "none"
    remedy = _remedy(columns, kinds, features_col, label_col)
    for param, given in (("features_col", features_col), ("label_col", label_col)):
        if given is not None and not isinstance(given, str):
            raise TypeError(f"SparkNetwork({param}={given!r}): a column name (a str), or None")
    if features_col is None and label_col is None and "features" not in columns and "label" not in columns:
        if len(columns) < 2:
            raise ValueError(
                f"a DataFrame for kit.spark needs a features column and a label column; this one has {listed}"
            )
        features_col, label_col = columns[0], columns[1]
        warnings.warn(
            f"the DataFrame has no 'features' or 'label' column (it has {listed}): kit takes the first two "
            f"by position, features_col={features_col!r} and label_col={label_col!r}; name them with "
            f"SparkNetwork(sc, net, tm, features_col={features_col!r}, label_col={label_col!r}) to say so",
            UserWarning,
            stacklevel=4,
        )
    features_col = "features" if features_col is None else features_col
    label_col = "label" if label_col is None else label_col
    for param, name, ok, wanted in (
        ("features_col", features_col, _features_ok, "a Vector (pyspark.ml.linalg) or an array of numbers"),
        ("label_col", label_col, _label_ok, "a class number, or a one-hot Vector or array"),
    ):
        if name not in columns:
            raise ValueError(
                f"SparkNetwork({param}={name!r}): the DataFrame has no column {name!r}; its columns are {listed}. "
                f"Name the columns to read: {remedy}"
            )
        if not ok(kinds[name]):
            raise ValueError(
                f"SparkNetwork({param}={name!r}): column {name!r} holds {kinds[name]}, and {param} needs {wanted}; "
                f"the DataFrame's columns are {listed}. Name the columns to read: {remedy}"
            )
    if features_col == label_col:
        raise ValueError(
            f"SparkNetwork(features_col={features_col!r}, label_col={label_col!r}): the same column twice; "
            f"the DataFrame's columns are {listed}. Name two columns: {remedy}"
        )
    return features_col, label_col


def as_rdd(data: Any, features_col: str | None = None, label_col: str | None = None) -> Any:
    """An RDD of pairs from an RDD (as is) or a DataFrame (its `features_col` and `label_col`
    columns, MLlib's "features" and "label" by default: `dataframe_columns`)."""
    if hasattr(data, "mapPartitionsWithIndex"):
        return data
    if hasattr(data, "rdd") and hasattr(data, "columns"):
        features, label = dataframe_columns(data, features_col, label_col)
        return data.select(features, label).rdd.map(ex.row_to_pair)
    raise TypeError(
        f"SparkNetwork needs an RDD of (features, labels) pairs or a DataFrame, got {type(data).__name__}; "
        "make one with kit.spark.to_rdd(sc, dataset)"
    )
