"""NDArray: a thin wrapper over one NumPy/CuPy array that knows where its memory lives.

    >>> import kit
    >>> x = kit.randn((4, 3))          # (4, 3) float32 on the current device
    >>> y = (x @ x.T).sum(axis=1)      # every result is counted by kit.memory.count
    >>> y
    NDArray(shape=(4,), dtype=float32, device=..., heap)
      [...]
    >>> y.numpy()                      # a plain NumPy array (host copy on a GPU)
    array([...], dtype=float32)

Why a wrapper: inside an open workspace (kit.workspace), every result is allocated through
`kit.memory.allocate` and computed into it with `out=`, so the workspace receives *every* array
an op makes, and the array remembers its workspace and generation. Each op checks that generation first:
an array whose workspace moved on raises a WorkspaceError instead of returning stale data.
On the plain host heap (no workspace open, no cache, a CPU device) there is nothing to carve
or check: NumPy allocates the result inside the ufunc, as the raw op does, and kit counts it
and wraps it (C-ordered, like allocate's), one Python frame per operator.

Errors name the values: both shapes for a mismatch, both devices for a cross-device op
(kit never copies between devices silently), the dtype that is unsupported.
"""

from __future__ import annotations

from threading import get_ident as _get_ident
from typing import Any

import numpy as np

from kit.arrays.ndarray_copies import Copies
from kit.arrays.ndarray_host import HostReads
from kit.arrays.ndarray_operators import binary_method, install_operators
from kit.arrays.ndarray_views import Views
from kit.core import backend
from kit.core.device_objects import DeviceMismatchError, mismatch_error
from kit.core.devices import AnyDevice, host_source, transfer
from kit.core.memory import allocate, count
from kit.core.shapes import (
    BOOL_DTYPE,
    BOOL_RESULT_UFUNCS,
    FLOAT16_DTYPE,
    FLOAT_RESULT_UFUNCS,
    SCALARS,
    ShapeError,
    broadcast_shape,
    matmul_shape,
    norm_axis,
    reduced_shape,
    reduction_plan,
    reduction_plans,
    result_dtype,
)
from kit.state import STATE

__all__ = ["DeviceMismatchError", "NDArray", "ShapeError", "from_raw", "heap_result", "mismatch_error", "wrap"]


# ---------------------------------------------------------------------------------------


_NDARRAY = np.ndarray
_new = object.__new__
_thread = STATE.thread  # this thread's slots: .ws, the current workspace


def wrap(data: Any, device: AnyDevice, owner: Any) -> NDArray:
    """The one function that builds an NDArray: `data` (a NumPy/CuPy array) on `device`, owned by
    `owner` (the workspace it was carved from, the cache's lease, or None for the heap), of the
    owner's current generation. Every array kit hands out, views included, is made here."""
    arr = _new(NDArray)
    arr._data = data
    arr._device = device
    arr._owner = owner
    arr._gen = owner._gen if owner is not None else 0
    return arr


def heap_result(out: Any, dev: AnyDevice) -> NDArray:
    """Wrap an array NumPy (or CuPy, from its pool) allocated itself for a heap result, counted as
    `allocate` counts."""
    if out.__class__ is not _NDARRAY and dev.kind == "cpu":  # a ufunc over 0-d operands returns a NumPy scalar
        out = np.asarray(out)
    count(dev, out.nbytes)
    return wrap(out, dev, None)


def _numpy_allocates(dev: AnyDevice) -> bool:
    """True where a result goes to the plain host heap: no workspace open, no cache, a CPU
    device. There kit lets NumPy allocate the result inside the ufunc, as a raw op does."""
    return _thread.ws is None and not STATE.cache.on and dev.kind == "cpu"


class NDArray(HostReads, Views, Copies):
    """An n-d array on one device, allocated by kit (heap, cache or workspace).

    Here: its state, the staleness check, attributes, elementwise ops, matmul and reductions (the
    operators: kit.ndarray_operators). Its rooms: reads to the host and Python (HostReads,
    kit.ndarray_host), reshaping and indexing (Views, kit.ndarray_views), and copies on a device,
    between devices and between workspaces (Copies, kit.ndarray_copies)."""

    __slots__ = ("__weakref__", "_data", "_device", "_gen", "_owner")
    __array_priority__ = 100  # numpy_array + NDArray goes to NDArray.__radd__
    _wrap = staticmethod(wrap)  # the rooms build their results with `wrap` too: self._wrap(data, device, owner)

    # ---- validity ------------------------------------------------------------------
    def _check(self, op: str) -> Any:
        """The one staleness check: this array's memory, if it may still be used here. Raises (the
        owner words why) when its workspace has moved past the cycle that made it, or when another
        thread's workspace owns it. Heap arrays (owner None) and cached blocks always pass."""
        o = self._owner
        if o is not None and (o._gen is not self._gen or (o._tid is not None and o._tid != _get_ident())):
            o._stale(self, op)
        return self._data

    @property
    def is_valid(self) -> bool:
        """False once the workspace this array lives in has moved on."""
        o = self._owner
        return o is None or o._gen is self._gen or o._still_valid(self)

    # ---- attributes ----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    @property
    def device(self) -> AnyDevice:
        return self._device

    @property
    def data(self) -> Any:
        """The underlying NumPy/CuPy array (checked for staleness; shares memory)."""
        return self._check("data")

    @data.setter
    def data(self, value: Any) -> None:
        # `x.data += y` updates in place and then assigns the same array back: allow exactly that
        if value is not self._data:
            raise AttributeError("NDArray.data cannot be rebound; write elements with x[...] = value")

    @property
    def T(self) -> NDArray:
        return self.transpose()

    def __len__(self) -> int:
        if not self._data.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._data.shape[0]

    # ---- elementwise binary --------------------------------------------------------
    def _binary(self, other: Any, ufunc: np.ufunc, op: str, reflected: bool = False) -> NDArray:
        """Every binary op (the operators take a shortcut first, see kit.ndarray_operators)."""
        a = self._check(op)
        dev = self._device
        if other.__class__ is NDArray:
            b = other._check(op)
            if other._device is not dev:
                mismatch_error(op, self, other)
            shape = a.shape if a.shape == b.shape else broadcast_shape(a.shape, b.shape, op)
            same = (
                a.dtype == b.dtype and a.dtype is not BOOL_DTYPE and ufunc not in FLOAT_RESULT_UFUNCS
            )  # bool // bool is int8
            dtype = a.dtype if same else result_dtype(ufunc, a.dtype, b.dtype)
        elif other.__class__ in SCALARS:
            b = other
            shape = a.shape
            dtype = result_dtype(ufunc, a.dtype, other.__class__)
        else:
            return self._binary(self._coerce(other, op), ufunc, op, reflected)
        if ufunc in BOOL_RESULT_UFUNCS:
            dtype = BOOL_DTYPE
        out, owner = allocate(shape, dtype, dev)
        if reflected:
            ufunc(b, a, out=out)
        else:
            ufunc(a, b, out=out)
        return wrap(out, dev, owner)

    def _coerce(self, other: Any, op: str) -> NDArray:
        if isinstance(other, np.generic):
            other = other.item()
            if other.__class__ in SCALARS:
                return other  # type: ignore[return-value]
        if self._device.kind == "gpu" and isinstance(other, np.ndarray):
            raise DeviceMismatchError(
                f"{op}: a NumPy array (host memory) met an array on {self._device.name}; kit never copies "
                f"silently: wrap it with kit.asarray(x, device={self._device.name!r})"
            )
        return from_raw(other, self._device)

    def _inplace(self, other: Any, ufunc: np.ufunc, op: str) -> NDArray:
        a = self._check(op)
        if other.__class__ is NDArray:
            other._check(op)
            if other._device is not self._device:
                mismatch_error(op, self, other)
            b = other._data
            if b.shape != a.shape and broadcast_shape(a.shape, b.shape, op) != a.shape:
                raise ShapeError(
                    f"{op}: cannot write a result of shape {broadcast_shape(a.shape, b.shape, op)} into {a.shape}"
                )
        elif other.__class__ in SCALARS:
            b = other
        else:
            return self._inplace(self._coerce(other, op), ufunc, op)
        try:
            ufunc(a, b, out=a)
        except TypeError as exc:  # numpy's UFuncTypeError (e.g. int array += float)
            raise TypeError(f"{op}: cannot store the result in this {a.dtype} array in place ({exc})") from None
        return self

    __hash__ = None  # type: ignore[assignment]  # == is elementwise, so arrays are unhashable

    # ---- elementwise unary ---------------------------------------------------------
    def _unary(self, ufunc: np.ufunc, op: str) -> NDArray:
        a = self._check(op)
        dev = self._device
        if _thread.ws is None and not STATE.cache.on and dev.kind == "cpu":  # _numpy_allocates, inlined
            try:
                return heap_result(ufunc(a, order="C"), dev)
            except TypeError:
                pass  # below: kit's message naming the dtype
        out, owner = allocate(a.shape, result_dtype(ufunc, a.dtype, None), dev)
        ufunc(a, out=out)
        return wrap(out, dev, owner)

    def exp(self) -> NDArray:
        return self._unary(np.exp, "exp")

    def log(self) -> NDArray:
        return self._unary(np.log, "log")

    def tanh(self) -> NDArray:
        return self._unary(np.tanh, "tanh")

    def sqrt(self) -> NDArray:
        return self._unary(np.sqrt, "sqrt")

    def abs(self) -> NDArray:
        return self._unary(np.absolute, "abs")

    def maximum(self, other: Any) -> NDArray:
        return _MAXIMUM(self, other)

    def minimum(self, other: Any) -> NDArray:
        return _MINIMUM(self, other)

    def clip(self, lo: float | None, hi: float | None) -> NDArray:
        a = self._check("clip")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"clip: lower bound {lo} is greater than upper bound {hi}")
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.clip(a, lo, hi, out=out)
        return wrap(out, self._device, owner)

    # ---- matmul --------------------------------------------------------------------
    def __matmul__(self, other: NDArray) -> NDArray:
        return self.matmul(other)

    def __rmatmul__(self, other: Any) -> NDArray:
        return self._coerce(other, "matmul").matmul(self)

    def matmul(self, other: Any) -> NDArray:
        a = self._check("matmul")
        if other.__class__ is not NDArray:
            other = self._coerce(other, "matmul")
        b = other._check("matmul")
        if other._device is not self._device:
            mismatch_error("matmul", self, other)
        if _numpy_allocates(self._device):
            try:
                return heap_result(np.matmul(a, b), self._device)
            except (ValueError, TypeError):
                pass  # below: kit's message naming both shapes
        shape = matmul_shape(a.shape, b.shape)
        dtype = a.dtype if a.dtype == b.dtype else result_dtype(np.matmul, a.dtype, b.dtype)
        out, owner = allocate(shape, dtype, self._device)
        self._device.xp.matmul(a, b, out=out)
        return wrap(out, self._device, owner)

    # ---- reductions ----------------------------------------------------------------
    def _reduce(self, op: str, axis: Any, keepdims: bool) -> NDArray:
        a = self._check(op)
        key = (op, a.shape, a.dtype, axis if axis.__class__ is not list else tuple(axis), keepdims)
        plan = reduction_plans.get(key)
        if plan is None:
            plan = reduction_plans[key] = reduction_plan(op, a, axis, keepdims)
        axes, shape, out_dtype, count, reducer = plan
        dev = self._device
        if reducer is not None and _thread.ws is None and not STATE.cache.on and dev.kind == "cpu":
            r = reducer(a, axes, out_dtype, None, keepdims)  # NumPy allocates, as a raw reduction does
            if op == "mean":
                r = np.true_divide(r, count, out=r) if r.__class__ is _NDARRAY else r / count
            return heap_result(r, dev)
        if dev.kind == "gpu" and _thread.ws is None and not STATE.cache.on and a.dtype != FLOAT16_DTYPE:
            # CuPy allocates from its pool inside the reduction, as the raw call does: a reduction
            # into `out=` ran a second kernel (kit's sum of 100 floats took 36 us, CuPy's 12 on an H100)
            r = getattr(a, op)(axis=axes, keepdims=keepdims)
            if r.dtype != out_dtype:
                r = r.astype(out_dtype)
            return heap_result(r, dev)
        out, owner = allocate(shape, out_dtype, dev)
        xp = dev.xp
        if xp is np and a.dtype != FLOAT16_DTYPE:  # ufunc.reduce: numpy's fast path, no wrapper layers
            if op == "sum" or op == "mean":
                np.add.reduce(a, axis=axes, dtype=out_dtype, out=out, keepdims=keepdims)
                if op == "mean":
                    np.true_divide(out, count, out=out)
            elif op == "max":
                np.maximum.reduce(a, axis=axes, out=out, keepdims=keepdims)
            elif op == "min":
                np.minimum.reduce(a, axis=axes, out=out, keepdims=keepdims)
            else:
                np.var(a, axis=axes, out=out, keepdims=keepdims)
        elif a.dtype == FLOAT16_DTYPE and op != "max" and op != "min":
            # float16 sum, mean and var accumulate in float32 on both backends (NumPy's mean does;
            # its var and sum, and CuPy's var, add in float16: the var of 100,000 ones came out inf
            # on the CPU and NaN on an H100, where the answer, 0, is a float16)
            out[...] = getattr(xp, op)(a.astype(np.float32), axis=axes, keepdims=keepdims)
        elif xp is np:  # float16 max/min (exact in any precision)
            getattr(xp, op)(a, axis=axes, out=out, keepdims=keepdims)
        else:  # CuPy reduces into its pool and the result is copied into `out`: with out= a CUB
            # reduction refused a float32 min on an H100 (CuPy 14.2 beside NumPy 2.5: "operand
            # type(s) all returned NotImplemented ... Float32DType")
            out[...] = getattr(a, op)(axis=axes, keepdims=keepdims)
        return wrap(out, dev, owner)

    def sum(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        return self._reduce("sum", axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        return self._reduce("mean", axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        return self._reduce("max", axis, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        return self._reduce("min", axis, keepdims)

    def var(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        return self._reduce("var", axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> NDArray:
        a = self._check("argmax")
        if a.size == 0:
            raise ShapeError(f"argmax: an empty array of shape {a.shape} has no argmax")
        if axis is None:
            out, owner = allocate((1,) * a.ndim if keepdims else (), np.dtype(np.intp), self._device)
            self._device.xp.argmax(a, out=out.reshape(()) if keepdims else out)
        else:
            (ax,) = norm_axis(axis, a.ndim, "argmax", a.shape)  # type: ignore[misc]
            out, owner = allocate(reduced_shape(a.shape, (ax,), keepdims), np.dtype(np.intp), self._device)
            self._device.xp.argmax(a, axis=ax, out=out, keepdims=keepdims)
        return wrap(out, self._device, owner)

    # ---- views (reshape, indexing: kit.ndarray_views) ------------------------------
    def _view(self, data: Any) -> NDArray:
        """A view shares memory, so it shares the owner and generation of its base."""
        view = wrap(data, self._device, self._owner)
        view._gen = self._gen  # the base's generation, not the owner's now: a circular workspace's array
        return view  # of the last lap stays valid until overwritten, and so must its view stop then


def from_raw(obj: Any, device: AnyDevice) -> NDArray:
    """Wrap a host value (NumPy array, list, scalar) as a kit array on a CPU device without a
    copy where possible; copies to a GPU through the transfer path."""
    host = np.asarray(obj)
    backend.resolve_dtype(host.dtype)  # refuse complex, object, ... with kit's message
    if device.kind == "cpu":
        return wrap(host, device, None)
    out, owner = allocate(host.shape, host.dtype, device)
    transfer(out, device, host, host_source(device))
    return wrap(out, device, owner)


# the operators: one table and one factory (kit.ndarray_operators), installed once; maximum and
# minimum are methods from the same factory
install_operators(NDArray, heap_result)
_MAXIMUM = binary_method(NDArray, heap_result, np.maximum, "maximum", False)
_MINIMUM = binary_method(NDArray, heap_result, np.minimum, "minimum", False)
