"""Functions of several arrays: concatenate, stack, where, maximum, minimum.

>>> import kit
>>> a = kit.ones((2, 2)); b = kit.zeros((2, 1))
>>> kit.concatenate([a, b], axis=1)
NDArray(shape=(2, 3), dtype=float32, device=..., heap)
  [[1., 1., 0.],
   [1., 1., 0.]]
>>> x = kit.asarray([-2.0, -1.0, 0.0, 1.0, 2.0])
>>> kit.where(x > 0, x, 0.0)
NDArray(shape=(5,), dtype=float32, device=..., heap)
  [0., 0., 0., 1., 2.]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

from kit.arrays.creation import asarray
from kit.arrays.ndarray import NDArray, mismatch_error, wrap
from kit.core.devices import AnyDevice
from kit.core.memory import allocate
from kit.core.shapes import SCALARS, ShapeError, as_axis, broadcast_shape

__all__ = ["concatenate", "maximum", "minimum", "stack", "where"]


def _same_device(op: str, arrays: list[NDArray]) -> AnyDevice:
    first = arrays[0]
    for other in arrays[1:]:
        if other._device is not first._device:
            mismatch_error(op, first, other)
    return first._device


def _as_arrays(op: str, items: Iterable[ArrayLike | NDArray]) -> list[NDArray]:
    items = list(items)
    if not items:
        raise ValueError(f"{op}: needs at least one array")
    if not all(x.__class__ is NDArray for x in items):
        dev = next((x._device for x in items if x.__class__ is NDArray), None)
        items = [x if x.__class__ is NDArray else asarray(x, device=dev) for x in items]
    return items


def concatenate(arrays: Iterable[ArrayLike | NDArray], axis: int = 0) -> NDArray:
    arrs = _as_arrays("concatenate", arrays)
    dev = _same_device("concatenate", arrs)
    datas = [a._check("concatenate") for a in arrs]
    nd = datas[0].ndim
    if any(d.ndim != nd for d in datas) or nd == 0:
        raise ShapeError(
            f"concatenate: arrays need the same number (>= 1) of dimensions, got shapes {[d.shape for d in datas]}"
        )
    ax = as_axis(axis, nd, "concatenate", datas[0].shape)  # None is no axis here (NumPy's flattening is not kit's)
    for d in datas[1:]:
        if d.shape[:ax] + d.shape[ax + 1 :] != datas[0].shape[:ax] + datas[0].shape[ax + 1 :]:
            raise ShapeError(f"concatenate: shapes {datas[0].shape} and {d.shape} differ off axis {ax}")
    shape = (*datas[0].shape[:ax], sum(d.shape[ax] for d in datas), *datas[0].shape[ax + 1 :])
    dtype = np.result_type(*[d.dtype for d in datas])
    out, owner = allocate(shape, dtype, dev)
    dev.xp.concatenate(datas, axis=ax, out=out)
    return wrap(out, dev, owner)


def stack(arrays: Iterable[ArrayLike | NDArray], axis: int = 0) -> NDArray:
    arrs = _as_arrays("stack", arrays)
    dev = _same_device("stack", arrs)
    datas = [a._check("stack") for a in arrs]
    if any(d.shape != datas[0].shape for d in datas):
        raise ShapeError(f"stack: all arrays need the same shape, got {[d.shape for d in datas]}")
    nd = datas[0].ndim + 1
    ax = as_axis(axis, nd, "stack", datas[0].shape)
    shape = (*datas[0].shape[:ax], len(datas), *datas[0].shape[ax:])
    out, owner = allocate(shape, np.result_type(*[d.dtype for d in datas]), dev)
    dev.xp.stack(datas, axis=ax, out=out)
    return wrap(out, dev, owner)


def where(cond: NDArray, a: ArrayLike | NDArray, b: ArrayLike | NDArray) -> NDArray:
    """Elements of a where cond is true, else of b (broadcast)."""
    if cond.__class__ is not NDArray:
        raise TypeError(f"where: the condition must be an NDArray, got {type(cond).__name__}")
    c = cond._check("where")
    dev = cond._device
    parts = []
    for x in (a, b):
        if x.__class__ is NDArray:
            if x._device is not dev:
                mismatch_error("where", cond, x)
            parts.append(x._check("where"))
        elif x.__class__ in SCALARS:
            parts.append(x)
        else:
            parts.append(cond._coerce(x, "where")._data)
    shapes = [c.shape] + [p.shape for p in parts if not isinstance(p, SCALARS)]
    shape = shapes[0]
    for s in shapes[1:]:
        shape = broadcast_shape(shape, s, "where")
    dtype = np.result_type(*[p if isinstance(p, SCALARS) else p.dtype for p in parts])
    out, owner = allocate(shape, dtype, dev)
    dev.xp.copyto(out, parts[1])
    dev.xp.copyto(out, parts[0], where=c)
    return wrap(out, dev, owner)


def maximum(a: NDArray, b: ArrayLike | NDArray) -> NDArray:
    return a.maximum(b) if a.__class__ is NDArray else b.maximum(a)


def minimum(a: NDArray, b: ArrayLike | NDArray) -> NDArray:
    return a.minimum(b) if a.__class__ is NDArray else b.minimum(a)
