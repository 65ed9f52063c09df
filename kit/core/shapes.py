"""Shape and dtype rules for kit's ops: broadcasting, result dtypes, axes, reductions, matmul,
reshape and indexing checks. Pure functions, cached per distinct input, so the op fast path in
kit.ndarray pays one dictionary lookup for each."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kit.core.backend import RawArray, Xp

__all__ = ["ShapeError", "accumulator", "as_axis", "as_shape"]


class ShapeError(ValueError):
    """Shapes that do not fit together; the message names both."""


def as_shape(shape: object, op: str) -> tuple[int, ...]:
    """A shape as a tuple of whole numbers >= 0: an int, or a sequence of ints (NumPy's integers
    too). A float (2.5, even 2.0), a string ("3") or a bool is refused naming it, never truncated
    or read character by character."""
    if isinstance(shape, str | bytes | bool | float | np.floating):
        raise ShapeError(f"{op}: a shape is an int or a tuple of ints, got {shape!r}")
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{op}: a shape is an int or a tuple of ints, got {shape!r}") from None
    out = []
    for n in dims:
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise ShapeError(
                f"{op}: a shape is an int or a tuple of ints, got {shape!r} (the dimension {n!r} is a "
                f"{type(n).__name__}); give whole numbers"
            )
        out.append(int(n))
    if any(n < 0 for n in out):
        raise ShapeError(f"{op}: negative dimensions are not allowed, got shape {tuple(out)}")
    return tuple(out)


# ---------------------------------------------------------------------------------------
# small cached helpers: shape and dtype rules are computed once per distinct input

_bcast_cache: dict[tuple, tuple] = {}
_dtype_cache: dict[tuple, np.dtype] = {}
SCALARS = (int, float, bool)


def broadcast_shape(s1: tuple, s2: tuple, op: str) -> tuple:
    key = (s1, s2)
    shape = _bcast_cache.get(key)
    if shape is None:
        try:
            shape = np.broadcast_shapes(s1, s2)
        except ValueError:
            raise ShapeError(f"{op}: shapes {s1} and {s2} cannot be broadcast together") from None
        if len(_bcast_cache) > 4096:
            _bcast_cache.clear()
        _bcast_cache[key] = shape
    return shape


def result_dtype(ufunc: np.ufunc, d1: np.dtype, d2: np.dtype | type | None) -> np.dtype:
    key = (ufunc, d1, d2)
    dt = _dtype_cache.get(key)
    if dt is None:
        other = np.dtype(bool) if d2 is bool else d2
        try:
            if ufunc.nin == 1:
                dt = ufunc.resolve_dtypes((d1, None))[-1]
            else:
                dt = ufunc.resolve_dtypes((d1, other, None))[-1]
        except TypeError as exc:
            raise TypeError(f"{ufunc.__name__}: no loop for dtypes {d1} and {_dname(d2)} ({exc})") from None
        _dtype_cache[key] = dt
    return dt


def _dname(d: np.dtype | type | None) -> str:
    return d.__name__ if isinstance(d, type) else str(d)


def norm_axis(axis: int | Iterable[int] | None, ndim: int, op: str, shape: tuple) -> tuple[int, ...] | None:
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        axes = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise ShapeError(f"{op}: axis {axis!r} must be an int, a tuple of ints or None (for every axis)")
    out = [as_axis(ax, ndim, op, shape) for ax in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(out)


def as_axis(axis: object, ndim: int, op: str, shape: tuple) -> int:
    """One axis of `ndim` as a whole number in [0, ndim): -1 counts from the end; a bool, a float
    or a string is refused naming it (True is no axis 1)."""
    if isinstance(axis, bool | np.bool_) or not isinstance(axis, int | np.integer):
        raise ShapeError(f"{op}: an axis is a whole number, got {axis!r} ({type(axis).__name__})")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis!r} is out of bounds for an array of shape {shape}")
    return int(axis) % ndim


def reduced_shape(shape: tuple, axes: tuple | None, keepdims: bool) -> tuple:
    if axes is None:
        return (1,) * len(shape) if keepdims else ()
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def reduction_plan(op: str, a: RawArray, axis: int | Iterable[int] | None, keepdims: bool) -> tuple:
    """(axes, result shape, result dtype, elements per result, reducer) for one reduction;
    reducer is the NumPy ufunc's `reduce` for the ops that have one (not float16: NumPy's own
    float16 loops), which kit calls directly on the host heap."""
    axes = norm_axis(axis, a.ndim, op, a.shape)
    if a.size == 0 and op in ("max", "min"):
        raise ShapeError(f"{op}: an empty array of shape {a.shape} has no {op}")
    shape = reduced_shape(a.shape, axes, keepdims)
    out_dtype = getattr(np, op)(np.zeros((1,), a.dtype)).dtype
    count = math.prod(a.shape) if axes is None else math.prod(a.shape[i] for i in axes)
    reducer = _REDUCERS.get(op) if a.dtype != FLOAT16_DTYPE else None
    return axes, shape, out_dtype, count, reducer


_REDUCERS = {"sum": np.add.reduce, "mean": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}


reduction_plans: dict[tuple, tuple] = {}
FLOAT16_DTYPE = np.dtype(np.float16)


def matmul_shape(s1: tuple, s2: tuple) -> tuple:
    if not s1 or not s2:
        raise ShapeError(f"matmul: scalars are not allowed (shapes {s1} and {s2}); use *")
    a = (1, *s1) if len(s1) == 1 else s1
    b = (*s2, 1) if len(s2) == 1 else s2
    if a[-1] != b[-2]:
        raise ShapeError(
            f"matmul: shapes {s1} and {s2} do not align: the last axis of the first ({a[-1]}) "
            f"must equal the second-to-last axis of the second ({b[-2]})"
        )
    batch = broadcast_shape(a[:-2], b[:-2], "matmul")
    out = (*batch, a[-2], b[-1])
    if len(s1) == 1:
        out = out[:-2] + out[-1:]
    if len(s2) == 1:
        out = out[:-1]
    return out


BOOL_DTYPE = np.dtype(bool)


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype sums, means, variances, losses and normalisation statistics add in: float32 for
    float16 data (as NumPy's mean and PyTorch do: a float16 sum passes 65,504 after a few thousand
    terms), else the data's own."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


BOOL_RESULT_UFUNCS = frozenset(
    {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal, np.logical_and, np.logical_or}
)
FLOAT_RESULT_UFUNCS = frozenset({np.true_divide})


def resolve_reshape(shape: tuple, size: int, new: tuple) -> tuple:
    bad = [n for n in new if isinstance(n, bool | np.bool_) or not isinstance(n, int | np.integer)]
    if bad:
        raise ValueError(f"the size {bad[0]!r} is a {type(bad[0]).__name__}: give whole numbers (and one -1 at most)")
    new = tuple(int(n) for n in new)
    unknown = [i for i, n in enumerate(new) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in new):
        raise ValueError("at most one -1 and no other negative sizes")
    known = math.prod(n for n in new if n != -1)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"{size} is not a multiple of {known}")
        new = tuple(size // known if n == -1 else n for n in new)
    elif known != size:
        raise ValueError(f"{known} elements != {size}")
    return new


def is_basic_index(key: object) -> bool:
    if isinstance(key, tuple):
        return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in key)
    return key is None or key is Ellipsis or isinstance(key, (int, np.integer, slice))


def check_take_bounds(idx: RawArray, shape: tuple, xp: Xp) -> None:
    if not shape:
        raise IndexError("getitem: a 0-d array cannot be indexed with an integer array")
    if idx.size and (int(idx.max()) >= shape[0] or int(idx.min()) < -shape[0]):
        bad = int(idx.max()) if int(idx.max()) >= shape[0] else int(idx.min())
        raise IndexError(f"getitem: index {bad} is out of bounds for axis 0 with size {shape[0]} (array shape {shape})")
