"""Data for SparkNetwork: an RDD of (features, labels) NumPy pairs, from a kit DataSet (`to_rdd`)
or from what the user gives fit() and evaluate() (`as_rdd`: an RDD as is, a DataFrame's first
two columns).

    >>> from kit.spark.rdd_data import as_rdd
    >>> as_rdd([1, 2])
    Traceback (most recent call last):
    TypeError: SparkNetwork needs an RDD of (features, labels) pairs or a DataFrame, got list; ...

Labels become class indices by kit.labels' rule where they enter (`to_rdd`). Re-exported by
kit.spark.network and kit.spark.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.data.dataset import DataSet
from kit.labels import class_indices
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


def as_rdd(data: Any) -> Any:
    """An RDD of pairs from an RDD (as is) or a DataFrame (first two columns: features, label)."""
    if hasattr(data, "mapPartitionsWithIndex"):
        return data
    if hasattr(data, "rdd") and hasattr(data, "columns"):
        if len(data.columns) < 2:
            raise ValueError(f"a DataFrame for kit.spark needs features and label columns, got {data.columns}")
        return data.select(data.columns[0], data.columns[1]).rdd.map(ex.row_to_pair)
    raise TypeError(
        f"SparkNetwork needs an RDD of (features, labels) pairs or a DataFrame, got {type(data).__name__}; "
        "make one with kit.spark.to_rdd(sc, dataset)"
    )
