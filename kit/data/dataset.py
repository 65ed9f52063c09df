"""DataSet and ArrayIterator: features and one-hot labels, in mini-batches.

    >>> import numpy as np
    >>> from kit.data import ArrayIterator, DataSet
    >>> rng = np.random.default_rng(0)
    >>> features, labels = rng.normal(size=(100, 8)).astype(np.float32), rng.integers(0, 3, size=100)
    >>> ds = DataSet(features, labels, num_classes=3)    # int labels become one-hot, checked
    >>> ds, ds.labels.shape
    (DataSet(100 examples, features (8,), 3 classes), (100, 3))
    >>> it = ArrayIterator(ds, batch_size=32, shuffle=True, seed=0)
    >>> [batch.num_examples for batch in it]              # an epoch; it resets itself
    [32, 32, 32, 4]
    >>> DataSet(features[:3], [0, 1, 5], num_classes=3)
    Traceback (most recent call last):
    ValueError: label 5 at index 2 is out of range for 3 classes (valid: 0..2); 1 label(s) out of range in all; ...

Batches are views into one contiguous (per-epoch shuffled) copy, so iterating allocates one
array per epoch, not one per batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from kit.arrays.checks import check_cast, check_finite, narrow_remedy
from kit.arrays.creation import asarray
from kit.arrays.ndarray import NDArray
from kit.core import backend
from kit.core.arguments import real, whole
from kit.core.context import scope_out_of_workspaces
from kit.core.devices import AnyDevice, as_device
from kit.data.labels import class_indices, probability_rows

__all__ = ["ArrayIterator", "DataSet", "DataSetIterator"]


class DataSet:
    """Features (N, ...) and labels (N, C), both NDArrays on one device. Class labels follow
    kit.labels' rule (class indices (N,) or one-hot rows; see _as_labels for what else training takes)."""

    def __init__(
        self,
        features: ArrayLike | NDArray,
        labels: ArrayLike | NDArray,
        num_classes: int | None = None,
        device: str | AnyDevice | None = None,
    ) -> None:
        if num_classes is not None:
            num_classes = whole("DataSet", "num_classes", num_classes, 1)
        dev = as_device(device) if device is not None else getattr(features, "device", None)
        dev = dev if dev is not None and not isinstance(dev, str) else as_device(None)
        self.features = _as_features(features, dev)
        # the labels take the features' dtype: one data set, one dtype (a float16 network gets float16 both)
        self.labels = _as_labels(labels, self.features.shape[0], num_classes, dev, self.features.dtype)

    @property
    def num_examples(self) -> int:
        return self.features.shape[0]

    @property
    def num_classes(self) -> int:
        return self.labels.shape[1]

    def __len__(self) -> int:
        return self.num_examples

    def detach(self) -> DataSet:
        return dataset_of(self.features.detach(), self.labels.detach())

    def migrate(self) -> DataSet:
        return dataset_of(self.features.migrate(), self.labels.migrate())

    @property
    def device(self) -> Any:
        return self.features.device

    def to(self, device: str | AnyDevice) -> DataSet:
        """This batch on `device` (itself when already there), through the one transfer path."""
        dev = as_device(device)
        if self.features.device is dev and self.labels.device is dev:
            return self
        return dataset_of(self.features.to(dev), self.labels.to(dev))

    def split(self, fraction: float, seed: int = 0) -> tuple[DataSet, DataSet]:
        """A seeded random split into (first, rest), `fraction` of the examples first."""
        fraction = real("DataSet.split", "fraction", fraction, 0, 1, low_open=True, high_open=True)
        seed = whole("DataSet.split", "seed", seed, 0)
        n = round(self.num_examples * fraction)
        if self.num_examples < 2:
            raise ValueError(f"DataSet.split: {self.num_examples} example(s) cannot be split into two parts")
        if not 0 < n < self.num_examples:
            raise ValueError(
                f"DataSet.split(fraction={fraction!r}) of {self.num_examples} examples leaves {n} in the first part "
                f"and {self.num_examples - n} in the rest: give a fraction from {1 / self.num_examples:.3g} to "
                f"{1 - 1 / self.num_examples:.3g}, so that each part has an example"
            )
        order = np.random.default_rng(seed).permutation(self.num_examples)
        return self.take(order[:n]), self.take(order[n:])

    def take(self, index: np.ndarray) -> DataSet:
        idx = asarray(np.asarray(index, dtype=np.int64), device=self.features.device)
        with scope_out_of_workspaces():
            return dataset_of(self.features[idx], self.labels[idx])

    def __repr__(self) -> str:
        return f"DataSet({self.num_examples} examples, features {self.features.shape[1:]}, {self.num_classes} classes)"


def dataset_of(features: NDArray, labels: NDArray) -> DataSet:
    ds = object.__new__(DataSet)
    ds.features, ds.labels = features, labels
    return ds


def _as_features(x: ArrayLike | NDArray, dev: AnyDevice) -> NDArray:
    if isinstance(x, NDArray):
        if x.dtype.kind != "f":
            raise TypeError(f"features must be floating point, got dtype {x.dtype}; convert with .astype('float32')")
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"features must be numbers, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"features need a batch axis: shape (N, ...), got {arr.shape}")
    # floating data keeps the dtype it was given (a float16 network trains on float16 data);
    # whole numbers and booleans become the default floating dtype
    dtype = arr.dtype if arr.dtype.kind == "f" else backend.get_default_dtype()
    return asarray(arr.astype(dtype, copy=False), device=dev)


def _as_labels(
    y: ArrayLike | NDArray, n: int, num_classes: int | None, dev: AnyDevice, dtype: DTypeLike = None
) -> NDArray:
    """Class labels by kit.labels' rule, made one-hot: (N,) class indices, and an (N, 1) column
    of them when num_classes (> 1) is given. Rows (N, C) are used as they are: with num_classes,
    a classifier's one-hot rows or probabilities (soft labels, for training; Evaluation and ROC
    take only one-hot rows); without it, any targets (regression). So is an (N, 1) column without
    num_classes: one target per example, e.g. one sigmoid output's 0/1."""
    raw = y.numpy() if isinstance(y, NDArray) else np.asarray(y)
    if raw.ndim == 0:
        raise ValueError(f"labels need one entry per example: (N,) or (N, C), got a scalar {raw!r}")
    if raw.shape[0] != n:
        raise ValueError(f"{n} feature rows but {raw.shape[0]} labels (labels of shape {raw.shape})")
    if raw.dtype.kind not in "fiub":
        raise TypeError(f"labels must be numbers, got dtype {raw.dtype}")
    dtype = backend.get_default_dtype() if dtype is None else dtype
    if raw.ndim == 1 or (raw.ndim == 2 and raw.shape[1] == 1 and num_classes is not None and num_classes > 1):
        idx = class_indices(raw, num_classes, hint="for soft or regression targets give rows (N, C)")
        if num_classes is None:
            num_classes = int(idx.max()) + 1 if idx.size else 0
        onehot = np.zeros((n, num_classes), dtype=dtype)
        onehot[np.arange(n), idx] = 1
        return asarray(onehot, device=dev)
    if raw.ndim != 2:
        raise ValueError(f"labels must be class indices (N,) or rows (N, C), got shape {raw.shape}")
    if num_classes is not None and raw.shape[1] != num_classes:
        raise ValueError(f"labels have {raw.shape[1]} columns but num_classes={num_classes}")
    if num_classes is not None and num_classes > 1:
        probability_rows(raw)  # a classifier's rows: one-hot or probabilities (NaN is neither)
    check_finite(raw, "labels", then="; drop or fix those rows")
    with np.errstate(over="ignore"):  # an overflow is found and named just below
        cast = raw.astype(dtype, copy=False)
    check_cast(raw, cast, "labels", narrow_remedy(dtype, "targets").replace("train a network", "give features"))
    return asarray(cast, device=dev)


class DataSetIterator:
    """The iterator protocol kit's loops use: iterate for one epoch; `reset()`; `batch_size`."""

    batch_size: int = 0
    async_supported = True

    def __iter__(self) -> Iterator[DataSet]:
        raise NotImplementedError

    def reset(self) -> None:
        pass


class ArrayIterator(DataSetIterator):
    def __init__(
        self,
        data: DataSet | tuple[ArrayLike | NDArray, ArrayLike | NDArray],
        batch_size: int = 32,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.data = data if isinstance(data, DataSet) else DataSet(*data)
        batch_size = whole("ArrayIterator", "batch_size", batch_size, 1)
        seed = whole("ArrayIterator", "seed", seed, 0)
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.epoch = 0

    def __len__(self) -> int:
        n = self.data.num_examples
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _epoch_data(self) -> DataSet:
        if not self.shuffle:
            return self.data
        order = np.random.default_rng((self.seed, self.epoch)).permutation(self.data.num_examples)
        return self.data.take(order)

    def __iter__(self) -> Iterator[DataSet]:
        data = self._epoch_data()
        self.epoch += 1
        n, b = data.num_examples, self.batch_size
        stop = n - n % b if self.drop_last else n
        for start in range(0, stop, b):
            yield dataset_of(data.features[start : start + b], data.labels[start : start + b])

    def reset(self) -> None:
        """Nothing to do: each iteration is a fresh epoch (with a new seeded shuffle)."""
