"""NDArray's shapes and indexing: `reshape`, `transpose`, `squeeze`, `expand_dims`, `a[key]`, `a[key] = v`.

    >>> import kit
    >>> x = kit.arange(6).reshape(2, 3)
    >>> x.T.shape, x[1].tolist(), x[:, 1:].shape
    ((3, 2), [3, 4, 5], (2, 2))

A mixin of kit.ndarray.NDArray, opening with what it needs from it. A view (basic indexing, a
reshape of contiguous data, a transpose) shares its base's memory, owner and generation
(`NDArray._view`); advanced indexing gathers into a new array allocated through kit.memory, as
every op's result is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

import numpy as np

from kit.core.device_objects import DeviceMismatchError, mismatch_error
from kit.core.devices import AnyDevice
from kit.core.memory import allocate
from kit.core.shapes import ShapeError, as_axis, check_take_bounds, is_basic_index, norm_axis, resolve_reshape

__all__ = ["Views"]


class Views:
    """Reshaping and indexing an NDArray."""

    __slots__ = ()

    # needs from its host (kit.ndarray.NDArray):
    _device: AnyDevice
    _check: Callable[[str], np.ndarray]  # the staleness check: the raw array, if it may still be used
    _view: Callable[[np.ndarray], Self]  # an array sharing this one's memory, owner and generation
    _wrap: Callable[[np.ndarray, AnyDevice, Any], Self]  # kit.ndarray.wrap: (data, device, owner) -> array

    def reshape(self, *shape: Any) -> Self:
        a = self._check("reshape")
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        try:
            target = resolve_reshape(a.shape, a.size, shape)
        except ValueError as exc:
            raise ShapeError(
                f"reshape: cannot reshape an array of shape {a.shape} ({a.size} elements) into {shape}: {exc}"
            ) from None
        if a.flags.c_contiguous:
            return self._view(a.reshape(target))
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return self._wrap(out.reshape(target), self._device, owner)

    def ravel(self) -> Self:
        return self.reshape(-1)

    def transpose(self, *axes: int) -> Self:
        a = self._check("transpose")
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        if axes and sorted(as_axis(x, a.ndim, "transpose", a.shape) for x in axes) != list(range(a.ndim)):
            raise ShapeError(f"transpose: axes {axes} are not a permutation of the {a.ndim} axes of shape {a.shape}")
        return self._view(a.transpose(axes) if axes else a.T)

    def squeeze(self, axis: Any = None) -> Self:
        a = self._check("squeeze")
        axes = norm_axis(axis, a.ndim, "squeeze", a.shape)
        if axes is not None and any(a.shape[i] != 1 for i in axes):
            raise ShapeError(f"squeeze: axis {axis} of shape {a.shape} does not have length 1")
        return self._view(a.squeeze(axes))

    def expand_dims(self, axis: int) -> Self:
        a = self._check("expand_dims")
        return self._view(self._device.xp.expand_dims(a, as_axis(axis, a.ndim + 1, "expand_dims", a.shape)))

    def __getitem__(self, key: Any) -> Self:
        a = self._check("getitem")
        key = _unwrap_key(key, self)
        if is_basic_index(key):
            return self._view(a[key])
        xp = self._device.xp
        if isinstance(key, xp.ndarray) and key.dtype.kind in "iu":
            check_take_bounds(key, a.shape, xp)
            out, owner = allocate(tuple(key.shape) + a.shape[1:], a.dtype, self._device)
            xp.take(a, key, axis=0, out=out)
            return self._wrap(out, self._device, owner)
        if isinstance(key, xp.ndarray) and key.dtype == bool:
            if key.shape != a.shape[: key.ndim]:
                raise ShapeError(f"getitem: boolean mask of shape {key.shape} does not match array shape {a.shape}")
            n = int(xp.count_nonzero(key))
            out, owner = allocate((n, *a.shape[key.ndim :]), a.dtype, self._device)
            out[...] = a[key]  # the mask gather makes a temporary; the result lives where kit put it
            return self._wrap(out, self._device, owner)
        try:
            tmp = a[key]
        except IndexError as exc:
            raise IndexError(f"getitem: {exc} (array shape {a.shape})") from None
        out, owner = allocate(tmp.shape, tmp.dtype, self._device)
        xp.copyto(out, tmp)
        return self._wrap(out, self._device, owner)

    def __setitem__(self, key: Any, value: Any) -> None:
        a = self._check("setitem")
        key = _unwrap_key(key, self)
        if value.__class__ is self.__class__:
            if value.device is not self._device:
                mismatch_error("setitem", self, value)
            value = value._check("setitem")
        elif self._device.kind == "gpu" and isinstance(value, np.ndarray):
            raise DeviceMismatchError(f"setitem: a NumPy array cannot be written into an array on {self._device.name}")
        try:
            a[key] = value
        except ValueError as exc:
            raise ShapeError(f"setitem: {exc} (target shape {a.shape})") from None

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


def _unwrap_key(key: Any, arr: Any) -> Any:
    if key.__class__ is arr.__class__:
        if key.device is not arr.device:
            mismatch_error("index", arr, key)
        return key._check("index")
    if isinstance(key, tuple):
        return tuple(_unwrap_key(k, arr) for k in key)
    if isinstance(key, list):
        return arr.device.xp.asarray(key)
    return key
