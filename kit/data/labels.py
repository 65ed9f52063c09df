"""Class labels: the one rule every path that turns labels into classes follows.

    >>> import numpy as np
    >>> from kit.data.labels import class_indices
    >>> class_indices([2, 0, 1]), class_indices(np.array([[2], [0], [1]]))     # (N,) or an (N, 1) column
    (array([2, 0, 1]), array([2, 0, 1]))
    >>> class_indices([2.0, 0.0, 1.0]), class_indices([True, False, True])     # whole floats; bool: 0/1
    (array([2, 0, 1]), array([1, 0, 1]))
    >>> class_indices([[0, 0, 1], [1, 0, 0]])                                  # one-hot rows
    array([2, 0])
    >>> class_indices([0.4, 1.9, 0.6], 3, where="Evaluation")
    Traceback (most recent call last):
    ValueError: Evaluation: label 0.4 at index 0 is not a whole number: class labels must be integers 0..2 ...
    >>> class_indices([[0, 3, 0]], 3, where="Evaluation")
    Traceback (most recent call last):
    ValueError: Evaluation: label row 0 is [0 3 0]: not a one-hot row (one 1, the rest 0; 1 row(s) are not); ...

Everything else (non-whole or non-finite numbers, indices out of range, rows that are not one-hot,
more than two axes) is refused, naming the row and its value. Evaluation, ROC, kit.spark's to_rdd
and DataFrame rows take labels only by this rule; a DataSet takes it for (N,) labels and for an
(N, 1) column with num_classes, and also keeps soft labels (`probability_rows`) and, without
num_classes, any targets (regression, one sigmoid output) for training.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kit.arrays.ndarray import NDArray

__all__ = ["class_indices", "probability_rows"]


def _host(labels: ArrayLike | NDArray) -> np.ndarray:
    return labels.numpy() if isinstance(labels, NDArray) else np.asarray(labels)


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _remedy(num_classes: int | None) -> str:
    if num_classes is None:
        return "give class indices (N,) of whole numbers 0..C-1, or one-hot rows (N, C)"
    return f"give class indices (N,) of whole numbers 0..{num_classes - 1}, or one-hot rows (N, {num_classes})"


def _value(v: float | np.number) -> str:
    return str(float(v)) if isinstance(v, (float, np.floating)) else str(int(v))


def class_indices(
    labels: ArrayLike | NDArray, num_classes: int | None = None, where: str = "", hint: str = ""
) -> np.ndarray:
    """Labels (N,), (N, 1) or one-hot (N, C) as (N,) int64 class indices, checked: whole
    numbers in 0..num_classes-1 (num_classes None: >= 0) or exactly one-hot rows. `where`
    prefixes the message (the caller's name); `hint` is added to it (what else the caller takes)."""
    raw, p, more = _host(labels), _prefix(where), f"; {hint}" if hint else ""
    if raw.dtype.kind not in "biuf":
        raise TypeError(f"{p}labels must be numbers, got dtype {raw.dtype}; {_remedy(num_classes)}")
    if raw.ndim == 0:
        raise ValueError(f"{p}labels need one entry per example, got a scalar {raw!r}; {_remedy(num_classes)}")
    if raw.ndim > 2:
        raise ValueError(f"{p}labels of shape {raw.shape} have {raw.ndim} axes; {_remedy(num_classes)}")
    if raw.ndim == 2 and raw.shape[1] != 1:
        return _one_hot_rows(raw, num_classes, p, more)
    raw = raw.reshape(-1)  # (N, 1): one class index per row, as (N,)
    if raw.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw)))
        if bad.size:
            i = int(bad[0])
            top = "C-1" if num_classes is None else str(num_classes - 1)
            raise ValueError(
                f"{p}label {_value(raw[i])} at index {i} is not a whole number: class labels must be integers "
                f"0..{top} ({bad.size} label(s) are not); {_remedy(num_classes)}{more}"
            )
    idx = raw.astype(np.int64)
    bad = np.flatnonzero((idx < 0) | (idx >= num_classes)) if num_classes is not None else np.flatnonzero(idx < 0)
    if bad.size:
        i = int(bad[0])
        valid = "class indices start at 0" if num_classes is None else f"valid: 0..{num_classes - 1}"
        span = "" if num_classes is None else f" for {num_classes} classes"
        raise ValueError(
            f"{p}label {int(idx[i])} at index {i} is out of range{span} ({valid}); {bad.size} label(s) out of "
            f"range in all; {_remedy(num_classes)}{more}"
        )
    return idx


def _one_hot_rows(raw: np.ndarray, num_classes: int | None, p: str, more: str) -> np.ndarray:
    n, c = raw.shape
    if num_classes is not None and c != num_classes:
        raise ValueError(f"{p}labels have {c} columns but there are {num_classes} classes; {_remedy(num_classes)}")
    binary = (raw == 0) | (raw == 1)  # NaN is neither
    bad = np.flatnonzero(~binary.all(axis=1) | (np.count_nonzero(raw == 1, axis=1) != 1))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{p}label row {i} is {np.array2string(raw[i], threshold=12)}: not a one-hot row (one 1, the rest 0; "
            f"{bad.size} row(s) are not); {_remedy(c)}; for probabilities, labels.argmax(axis=1) gives the most "
            f"likely class{more}"
        )
    return raw.argmax(axis=1) if n else np.zeros(0, np.int64)


def probability_rows(labels: np.ndarray, where: str = "") -> None:
    """A classifier's training rows (N, C): one-hot or probabilities (values in [0, 1] summing
    to 1, within 1e-3, Network's tolerance). Raises ValueError naming the first bad row."""
    raw, p = _host(labels), _prefix(where)
    if raw.size == 0:
        return
    sums = raw.sum(axis=1, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (raw >= 0).all(axis=1) & (raw <= 1 + 1e-3).all(axis=1) & (np.abs(sums - 1) <= 1e-3)
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{p}label row {i} is {np.array2string(raw[i], threshold=12)}: a classifier's label rows are one-hot "
            f"or probabilities (values in [0, 1] summing to 1; {bad.size} row(s) are not); "
            f"{_remedy(raw.shape[1])}"
        )
