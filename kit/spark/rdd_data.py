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

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.core.arguments import whole
from kit.data.dataset import DataSet
from kit.data.labels import class_indices
from kit.spark import executor as ex
from kit.spark.arrow_data import arrow_missing, dataframe_batches

__all__ = ["SPARK_NETWORK", "Caller", "as_rdd", "dataframe_columns", "features_ok", "rows_rdd", "to_rdd"]


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
    if isinstance(data, DataSet):  # the numbers first: -1 examples an element made an empty RDD, said at fit
        x, y = data.features.numpy(), data.labels.numpy()
    else:
        x, y = np.asarray(data[0]), data[1]
    y = class_indices(y, num_classes, where="to_rdd")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"to_rdd: {x.shape[0]} feature rows but {y.shape[0]} labels")
    n = whole("to_rdd", "examples_per_element", examples_per_element)  # features keep their dtype (cast where
    if num_slices is not None:  # they meet the network)
        num_slices = whole("to_rdd", "num_slices", num_slices, what=" (partitions), or None for Spark's default")
    pairs = [(x[i : i + n], y[i : i + n]) for i in range(0, x.shape[0], n)]
    return sc.parallelize(pairs, num_slices or sc.defaultParallelism)


NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")


def _column_kind(data: Any, name: str) -> str:
    return data.schema[name].dataType.simpleString()


def features_ok(kind: str) -> bool:
    """An ml/mllib Vector, or an array (of arrays ...) of numbers."""
    while kind.startswith("array<"):
        kind = kind[len("array<") : -1]
        if kind in NUMERIC or kind.startswith("decimal"):
            return True
    return kind == "vector"


def _label_ok(kind: str) -> bool:
    """A class number (or bool), or a one-hot Vector or array of numbers."""
    return kind in NUMERIC or kind.startswith("decimal") or features_ok(kind)


@dataclass(frozen=True)
class Caller:
    """Whose columns an error is about: the call named (`owner`, its two parameters) and the call that fixes it."""

    owner: str = "SparkNetwork"
    params: tuple[str, str] = ("features_col", "label_col")
    fix: str = "SparkNetwork(sc, net, tm, features_col={features}, label_col={label})"


SPARK_NETWORK = Caller()


def _remedy(
    columns: list[str], kinds: dict[str, str], features_col: str | None, label_col: str | None, caller: Caller
) -> str:
    """The call that names this DataFrame's columns: the names given where they fit, else the
    first column that could hold features (a Vector or array) and the first class-number column."""
    features = features_col if features_col in kinds and features_ok(kinds[features_col]) else None
    features = features or next((c for c in columns if features_ok(kinds[c])), None)
    label = label_col if label_col in kinds and label_col != features and _label_ok(kinds[label_col]) else None
    label = label or next(
        (c for c in columns if c != features and _label_ok(kinds[c]) and not features_ok(kinds[c])), None
    )
    if features is None or label is None:
        fix = caller.fix.format(features="...", label="...")
        return f"{fix}, naming a Vector or array column and a label column"
    return caller.fix.format(features=repr(features), label=repr(label))


def dataframe_columns(
    data: Any, features_col: str | None, label_col: str | None, caller: Caller = SPARK_NETWORK
) -> tuple[str, str]:
    """The (features, label) columns kit reads from a DataFrame, checked on the driver: the
    columns named, else MLlib's "features" and "label", else (neither of those names there) the
    first two columns by position, said in a warning. A column that is missing or holds the
    wrong type is refused naming the DataFrame's columns and the parameter to set (`caller`: in
    whose words, SparkNetwork's by default)."""
    columns = list(data.columns)
    kinds = {c: _column_kind(data, c) for c in columns}
    listed = ", ".join(f"{c!r} ({kinds[c]})" for c in columns) or "none"
    remedy = _remedy(columns, kinds, features_col, label_col, caller)
    owner, (features_param, label_param) = caller.owner, caller.params
    for param, given in ((features_param, features_col), (label_param, label_col)):
        if given is not None and not isinstance(given, str):
            raise TypeError(f"{owner}({param}={given!r}): a column name (a str), or None")
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
        (features_param, features_col, features_ok, "a Vector (pyspark.ml.linalg) or an array of numbers"),
        (label_param, label_col, _label_ok, "a class number, or a one-hot Vector or array"),
    ):
        if name not in columns:
            raise ValueError(
                f"{owner}({param}={name!r}): the DataFrame has no column {name!r}; its columns are {listed}. "
                f"Name the columns to read: {remedy}"
            )
        if not ok(kinds[name]):
            raise ValueError(
                f"{owner}({param}={name!r}): column {name!r} holds {kinds[name]}, and {param} needs {wanted}; "
                f"the DataFrame's columns are {listed}. Name the columns to read: {remedy}"
            )
    if features_col == label_col:
        raise ValueError(
            f"{owner}({features_param}={features_col!r}, {label_param}={label_col!r}): the same column twice; "
            f"the DataFrame's columns are {listed}. Name two columns: {remedy}"
        )
    return features_col, label_col


def rows_rdd(data: Any, features: str, label: str) -> Any:
    """The row-at-a-time path: one (features, label) pair per DataFrame row, converted in Python
    row by row (`row_to_pair`); used where pyarrow is missing, and measured against the Arrow path."""
    return data.select(features, label).rdd.map(ex.row_to_pair)


def as_rdd(data: Any, features_col: str | None = None, label_col: str | None = None, kept: Any = None) -> Any:
    """An RDD of pairs from an RDD (as is) or a DataFrame (its `features_col` and `label_col`
    columns, MLlib's "features" and "label" by default: `dataframe_columns`), read through Arrow
    into elements of many examples each (kit.spark.arrow_data.dataframe_batches). With `kept` (a
    master's kit.spark.prepared.PreparedCache), the RDD read from the same DataFrame before is
    given again, so that its prepared rounds are found."""
    if hasattr(data, "mapPartitionsWithIndex"):
        return data
    if hasattr(data, "rdd") and hasattr(data, "columns"):
        features, label = dataframe_columns(data, features_col, label_col)
        missing = arrow_missing()
        if missing is None:  # many examples per element, one Arrow batch at a time (kit.spark.arrow_data)
            make = functools.partial(dataframe_batches, data, features, label)
        else:
            warnings.warn(
                f"kit.spark reads this DataFrame one row at a time in Python: {missing}; with pyarrow installed "
                "(the `spark` extra has it) it reads whole Arrow batches",
                UserWarning,
                stacklevel=3,
            )
            make = functools.partial(rows_rdd, data, features, label)
        return make() if kept is None else kept.frame_rdd(data, (features, label, missing is None), make)
    raise TypeError(
        f"SparkNetwork needs an RDD of (features, labels) pairs or a DataFrame, got {type(data).__name__}; "
        "make one with kit.spark.to_rdd(sc, dataset)"
    )
