"""NDArray: a thin wrapper over one NumPy/CuPy array that knows where its memory lives.

    >>> import kit
    >>> x = kit.randn((4, 3))          # (4, 3) float32 on the current device
    >>> y = (x @ x.T).sum(axis=1)      # every result comes from kit.memory.allocate(...)
    >>> y.numpy()                      # a plain NumPy array (host copy on a GPU)

Why a wrapper: every result is allocated through `kit.memory.allocate` and computed into it
with `out=`, so an open workspace (kit.workspace) receives *every* array an op makes, and
the array remembers its workspace and generation. Each op checks that generation first:
an array whose workspace moved on raises a WorkspaceError instead of returning stale data.

Errors name the values: both shapes for a mismatch, both devices for a cross-device op
(kit never copies between devices silently), the dtype that is unsupported.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from kit import backend
from kit.devices import AnyDevice, DeviceError, as_device
from kit.memory import _Lease, allocate

__all__ = ["DeviceMismatchError", "NDArray", "ShapeError", "concatenate", "maximum", "minimum", "stack", "where"]


class ShapeError(ValueError):
    """Shapes that do not fit together; the message names both."""


class DeviceMismatchError(DeviceError):
    """Arrays on different devices met in one op; the message names both devices."""


# ---------------------------------------------------------------------------------------
# small cached helpers: shape and dtype rules are computed once per distinct input

_bcast_cache: dict[tuple, tuple] = {}
_dtype_cache: dict[tuple, np.dtype] = {}
_SCALARS = (int, float, bool)


def _broadcast(s1: tuple, s2: tuple, op: str) -> tuple:
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


def _result_dtype(ufunc: np.ufunc, d1: np.dtype, d2: Any) -> np.dtype:
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


def _dname(d: Any) -> str:
    return d.__name__ if isinstance(d, type) else str(d)


def _norm_axis(axis: Any, ndim: int, op: str, shape: tuple) -> tuple[int, ...] | None:
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for ax in axes:
        if not isinstance(ax, (int, np.integer)) or not -ndim <= ax < ndim:
            raise ShapeError(f"{op}: axis {ax!r} is out of bounds for an array of shape {shape}")
        out.append(int(ax) % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(out)


def _reduced_shape(shape: tuple, axes: tuple | None, keepdims: bool) -> tuple:
    if axes is None:
        return (1,) * len(shape) if keepdims else ()
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _reduction_plan(op: str, a: Any, axis: Any, keepdims: bool) -> tuple:
    """(axes, result shape, result dtype, elements per result) for one reduction."""
    axes = _norm_axis(axis, a.ndim, op, a.shape)
    if a.size == 0 and op in ("max", "min"):
        raise ShapeError(f"{op}: an empty array of shape {a.shape} has no {op}")
    shape = _reduced_shape(a.shape, axes, keepdims)
    out_dtype = getattr(np, op)(np.zeros((1,), a.dtype)).dtype
    count = math.prod(a.shape) if axes is None else math.prod(a.shape[i] for i in axes)
    return axes, shape, out_dtype, count


_plan_cache: dict[tuple, tuple] = {}
_HALF = np.dtype(np.float16)


def _matmul_shape(s1: tuple, s2: tuple) -> tuple:
    if not s1 or not s2:
        raise ShapeError(f"matmul: scalars are not allowed (shapes {s1} and {s2}); use *")
    a = (1, *s1) if len(s1) == 1 else s1
    b = (*s2, 1) if len(s2) == 1 else s2
    if a[-1] != b[-2]:
        raise ShapeError(
            f"matmul: shapes {s1} and {s2} do not align: the last axis of the first ({a[-1]}) "
            f"must equal the second-to-last axis of the second ({b[-2]})"
        )
    batch = _broadcast(a[:-2], b[:-2], "matmul")
    out = (*batch, a[-2], b[-1])
    if len(s1) == 1:
        out = out[:-2] + out[-1:]
    if len(s2) == 1:
        out = out[:-1]
    return out


# ---------------------------------------------------------------------------------------


def _wrap(data: Any, device: AnyDevice, owner: Any) -> NDArray:
    arr = object.__new__(NDArray)
    arr._data = data
    arr._device = device
    arr._owner = owner
    arr._gen = owner._gen if owner is not None else 0
    return arr


def _mismatch(op: str, a: NDArray, b: NDArray) -> None:
    raise DeviceMismatchError(
        f"{op}: arrays on different devices {a._device.name} and {b._device.name}; kit never copies "
        f"between devices silently: move one with .to({a._device.name!r}) first"
    )


class NDArray:
    """An n-d array on one device, allocated by kit (heap, cache or workspace)."""

    __slots__ = ("__weakref__", "_data", "_device", "_gen", "_owner")
    __array_priority__ = 100  # numpy_array + NDArray goes to NDArray.__radd__

    def __del__(self) -> None:
        owner = self._owner
        if owner is not None and owner.__class__ is _Lease:  # a cached block goes back to the cache
            owner.release(self._data)

    # ---- validity ------------------------------------------------------------------
    def _check(self, op: str) -> Any:
        o = self._owner
        if o is not None and o._gen is not self._gen:
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
        o = self._owner
        if o is not None and o._gen is not self._gen:
            o._stale(self, op)
        a = self._data
        dev = self._device
        if other.__class__ is NDArray:
            oo = other._owner
            if oo is not None and oo._gen is not other._gen:
                oo._stale(other, op)
            if other._device is not dev:
                _mismatch(op, self, other)
            b = other._data
            shape = a.shape if a.shape == b.shape else _broadcast(a.shape, b.shape, op)
            dtype = (
                a.dtype if a.dtype == b.dtype and ufunc not in _FLOAT_RESULT else _result_dtype(ufunc, a.dtype, b.dtype)
            )
        elif other.__class__ in _SCALARS:
            b = other
            shape = a.shape
            dtype = _result_dtype(ufunc, a.dtype, other.__class__)
        else:
            return self._binary(self._coerce(other, op), ufunc, op, reflected)
        if ufunc in _BOOL_RESULT:
            dtype = _BOOL
        out, owner = allocate(shape, dtype, dev)
        if reflected:
            ufunc(b, a, out=out)
        else:
            ufunc(a, b, out=out)
        return _wrap(out, dev, owner)

    def _coerce(self, other: Any, op: str) -> NDArray:
        if isinstance(other, np.generic):
            other = other.item()
            if other.__class__ in _SCALARS:
                return other  # type: ignore[return-value]
        if self._device.kind == "gpu" and isinstance(other, np.ndarray):
            raise DeviceMismatchError(
                f"{op}: a NumPy array (host memory) met an array on {self._device.name}; kit never copies "
                f"silently: wrap it with kit.asarray(x, device={self._device.name!r})"
            )
        from kit.creation import asarray

        return asarray(other, device=self._device)

    def _inplace(self, other: Any, ufunc: np.ufunc, op: str) -> NDArray:
        a = self._check(op)
        if other.__class__ is NDArray:
            other._check(op)
            if other._device is not self._device:
                _mismatch(op, self, other)
            b = other._data
            if b.shape != a.shape and _broadcast(a.shape, b.shape, op) != a.shape:
                raise ShapeError(
                    f"{op}: cannot write a result of shape {_broadcast(a.shape, b.shape, op)} into {a.shape}"
                )
        elif other.__class__ in _SCALARS:
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
        out, owner = allocate(a.shape, _result_dtype(ufunc, a.dtype, None), self._device)
        ufunc(a, out=out)
        return _wrap(out, self._device, owner)

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
        return self._binary(other, np.maximum, "maximum")

    def minimum(self, other: Any) -> NDArray:
        return self._binary(other, np.minimum, "minimum")

    def clip(self, lo: float | None, hi: float | None) -> NDArray:
        a = self._check("clip")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"clip: lower bound {lo} is greater than upper bound {hi}")
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.clip(a, lo, hi, out=out)
        return _wrap(out, self._device, owner)

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
            _mismatch("matmul", self, other)
        shape = _matmul_shape(a.shape, b.shape)
        dtype = a.dtype if a.dtype == b.dtype else _result_dtype(np.matmul, a.dtype, b.dtype)
        out, owner = allocate(shape, dtype, self._device)
        self._device.xp.matmul(a, b, out=out)
        return _wrap(out, self._device, owner)

    # ---- reductions ----------------------------------------------------------------
    def _reduce(self, op: str, axis: Any, keepdims: bool) -> NDArray:
        a = self._check(op)
        key = (op, a.shape, a.dtype, tuple(axis) if isinstance(axis, list) else axis, keepdims)
        plan = _plan_cache.get(key)
        if plan is None:
            plan = _plan_cache[key] = _reduction_plan(op, a, axis, keepdims)
        axes, shape, out_dtype, count = plan
        out, owner = allocate(shape, out_dtype, self._device)
        xp = self._device.xp
        if xp is np and a.dtype != _HALF:  # ufunc.reduce: numpy's fast path, no wrapper layers
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
        else:  # CuPy, and float16 (numpy accumulates its mean/var in float32)
            getattr(xp, op)(a, axis=axes, out=out, keepdims=keepdims)
        return _wrap(out, self._device, owner)

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
            (ax,) = _norm_axis(axis, a.ndim, "argmax", a.shape)  # type: ignore[misc]
            out, owner = allocate(_reduced_shape(a.shape, (ax,), keepdims), np.dtype(np.intp), self._device)
            self._device.xp.argmax(a, axis=ax, out=out, keepdims=keepdims)
        return _wrap(out, self._device, owner)

    # ---- shape ---------------------------------------------------------------------
    def _view(self, data: Any) -> NDArray:
        """A view shares memory, so it shares the owner and generation of its base."""
        arr = object.__new__(NDArray)
        arr._data, arr._device, arr._owner, arr._gen = data, self._device, self._owner, self._gen
        return arr

    def reshape(self, *shape: Any) -> NDArray:
        a = self._check("reshape")
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        try:
            target = _resolve_reshape(a.shape, a.size, shape)
        except ValueError as exc:
            raise ShapeError(
                f"reshape: cannot reshape an array of shape {a.shape} ({a.size} elements) into {shape}: {exc}"
            ) from None
        if a.flags.c_contiguous:
            return self._view(a.reshape(target))
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return _wrap(out.reshape(target), self._device, owner)

    def ravel(self) -> NDArray:
        return self.reshape(-1)

    def transpose(self, *axes: int) -> NDArray:
        a = self._check("transpose")
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if axes and sorted(int(x) % max(a.ndim, 1) for x in axes) != list(range(a.ndim)):
            raise ShapeError(f"transpose: axes {axes} are not a permutation of the {a.ndim} axes of shape {a.shape}")
        return self._view(a.transpose(axes) if axes else a.T)

    def squeeze(self, axis: Any = None) -> NDArray:
        a = self._check("squeeze")
        axes = _norm_axis(axis, a.ndim, "squeeze", a.shape)
        if axes is not None and any(a.shape[i] != 1 for i in axes):
            raise ShapeError(f"squeeze: axis {axis} of shape {a.shape} does not have length 1")
        return self._view(a.squeeze(axes))

    def expand_dims(self, axis: int) -> NDArray:
        a = self._check("expand_dims")
        return self._view(self._device.xp.expand_dims(a, axis))

    def __getitem__(self, key: Any) -> NDArray:
        a = self._check("getitem")
        key = _unwrap_key(key, self)
        if _is_basic_index(key):
            return self._view(a[key])
        xp = self._device.xp
        if isinstance(key, xp.ndarray) and key.dtype.kind in "iu":
            _check_take_bounds(key, a.shape, xp)
            out, owner = allocate(tuple(key.shape) + a.shape[1:], a.dtype, self._device)
            xp.take(a, key, axis=0, out=out)
            return _wrap(out, self._device, owner)
        if isinstance(key, xp.ndarray) and key.dtype == bool:
            if key.shape != a.shape[: key.ndim]:
                raise ShapeError(f"getitem: boolean mask of shape {key.shape} does not match array shape {a.shape}")
            n = int(xp.count_nonzero(key))
            out, owner = allocate((n, *a.shape[key.ndim :]), a.dtype, self._device)
            out[...] = a[key]  # the mask gather makes a temporary; the result lives where kit put it
            return _wrap(out, self._device, owner)
        try:
            tmp = a[key]
        except IndexError as exc:
            raise IndexError(f"getitem: {exc} (array shape {a.shape})") from None
        out, owner = allocate(tmp.shape, tmp.dtype, self._device)
        xp.copyto(out, tmp)
        return _wrap(out, self._device, owner)

    def __setitem__(self, key: Any, value: Any) -> None:
        a = self._check("setitem")
        key = _unwrap_key(key, self)
        if value.__class__ is NDArray:
            if value._device is not self._device:
                _mismatch("setitem", self, value)
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

    # ---- copies, conversions -------------------------------------------------------
    def dup(self) -> NDArray:
        """A copy in the current allocation context (workspace or heap)."""
        a = self._check("dup")
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return _wrap(out, self._device, owner)

    copy = dup

    def astype(self, dtype: Any) -> NDArray:
        a = self._check("astype")
        dt = backend.resolve_dtype(dtype)
        out, owner = allocate(a.shape, dt, self._device)
        self._device.xp.copyto(out, a, casting="unsafe")
        return _wrap(out, self._device, owner)

    def to(self, device: Any) -> NDArray:
        """Copy to another device (a no-op when already there)."""
        a = self._check("to")
        dev = as_device(device)
        if dev is self._device:
            return self
        out, owner = allocate(a.shape, a.dtype, dev)
        if dev.kind == "cpu" and self._device.kind == "cpu":
            np.copyto(out, a)
        elif dev.kind == "cpu":
            a.get(out=out)
        elif self._device.kind == "cpu":
            with dev.activate():
                out.set(np.ascontiguousarray(a))
        elif dev.physical is self._device.physical:  # logical sibling: same memory space
            with dev.activate():
                dev.xp.copyto(out, a)
        else:
            src = self._device.xp.ascontiguousarray(a)
            with dev.activate():
                out.data.copy_from_device(src.data, src.nbytes)
        return _wrap(out, dev, owner)

    def numpy(self) -> np.ndarray:
        """The data as a NumPy array: the memory itself on the CPU, a host copy from a GPU.
        On the CPU it shares memory: from a workspace, detach() first to keep it."""
        a = self._check("numpy")
        return a if self._device.kind == "cpu" else a.get()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self) -> Any:
        return self._check("item").item()

    def tolist(self) -> Any:
        return self._check("tolist").tolist()

    def __float__(self) -> float:
        return float(self._check("float"))

    def __int__(self) -> int:
        return int(self._check("int"))

    def __bool__(self) -> bool:
        return bool(self._check("bool"))

    def __index__(self) -> int:
        return operator.index(self._check("index").item())

    def __repr__(self) -> str:
        d = self._data
        head = f"NDArray(shape={d.shape}, dtype={d.dtype}, device={self._device}, {_describe_owner(self)}"
        if not self.is_valid:
            return head + ", STALE: its workspace moved on)"
        body = np.array2string(self.numpy(), separator=", ", threshold=20, edgeitems=2, prefix="  ")
        return f"{head})\n  {body}"

    # ---- workspace methods (ND4J INDArray: isAttached, detach, leverage...) --------
    @property
    def is_attached(self) -> bool:
        """True when the memory lives in a workspace (ND4J isAttached)."""
        return self._owner is not None and self._owner.__class__.__name__ == "Workspace"

    @property
    def workspace(self) -> Any:
        return self._owner if self.is_attached else None

    def detach(self) -> NDArray:
        """A copy on the heap that outlives every workspace; `self` when not attached."""
        if not self.is_attached:
            return self
        a = self._check("detach")
        from kit.workspace import scope_out_of_workspaces

        with scope_out_of_workspaces():
            out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return _wrap(out, self._device, owner)

    def leverage_to(self, name: str, enforce_existence: bool = False) -> NDArray:
        """Copy into the open workspace `name` of this thread (ND4J leverageTo)."""
        from kit import workspace as wsp

        a = self._check("leverage_to")
        target = wsp.get_manager().get(name)
        if target is None or not target.is_scope_active:
            if enforce_existence:
                state = "does not exist" if target is None else "is not open"
                raise wsp.NoSuchWorkspaceError(f"leverage_to({name!r}): workspace {name!r} {state} on this thread")
            return self
        if self._owner is target:
            return self
        out, owner = target.alloc(a.shape, a.dtype)
        self._device.xp.copyto(out, a)
        return _wrap(out, self._device, owner)

    def leverage(self) -> NDArray:
        """Copy into the parent of the current workspace; detach() when there is none."""
        from kit import workspace as wsp

        current = wsp.current_workspace()
        parent = current.parent if current is not None else None
        if parent is None:
            return self.detach()
        return self.leverage_to(parent.name)

    def migrate(self, detach_on_no_ws: bool = False) -> NDArray:
        """Copy into the current workspace (ND4J migrate)."""
        from kit import workspace as wsp

        current = wsp.current_workspace()
        if current is None:
            return self.detach() if detach_on_no_ws else self
        return self.leverage_to(current.name)


# Operators: (dunder, ufunc, op name for messages). Each becomes a two-line method calling
# NDArray._binary / _inplace / _unary; reflected forms swap the operands.
_BINARY_OPS = [
    ("add", np.add, "add"),
    ("sub", np.subtract, "subtract"),
    ("mul", np.multiply, "multiply"),
    ("truediv", np.true_divide, "divide"),
    ("floordiv", np.floor_divide, "floor_divide"),
    ("mod", np.remainder, "remainder"),
    ("pow", np.power, "power"),
]
_COMPARISONS = [
    ("lt", np.less, "less"),
    ("le", np.less_equal, "less_equal"),
    ("gt", np.greater, "greater"),
    ("ge", np.greater_equal, "greater_equal"),
    ("eq", np.equal, "equal"),
    ("ne", np.not_equal, "not_equal"),
    ("and", np.logical_and, "logical_and"),
    ("or", np.logical_or, "logical_or"),
]


def _install_operators() -> None:
    def binary(ufunc: np.ufunc, name: str, reflected: bool) -> Any:
        def method(self: NDArray, other: Any) -> NDArray:
            return self._binary(other, ufunc, name, reflected)

        return method

    def inplace(ufunc: np.ufunc, name: str) -> Any:
        def method(self: NDArray, other: Any) -> NDArray:
            return self._inplace(other, ufunc, name + " (in place)")

        return method

    for short, ufunc, name in _BINARY_OPS:
        setattr(NDArray, f"__{short}__", binary(ufunc, name, False))
        setattr(NDArray, f"__r{short}__", binary(ufunc, name, True))
        if short in ("add", "sub", "mul", "truediv"):
            setattr(NDArray, f"__i{short}__", inplace(ufunc, name))
    for short, ufunc, name in _COMPARISONS:
        setattr(NDArray, f"__{short}__", binary(ufunc, name, False))
    NDArray.__neg__ = lambda self: self._unary(np.negative, "negative")  # type: ignore[method-assign]
    NDArray.__abs__ = lambda self: self._unary(np.absolute, "abs")  # type: ignore[method-assign]


_install_operators()


def _describe_owner(arr: NDArray) -> str:
    o = arr._owner
    if o is None:
        return "heap"
    if o.__class__ is _Lease:
        return "heap (cached block)"
    return f"workspace {o.name!r} cycle {getattr(o, 'cycle_of', lambda g: g)(arr._gen)}"


_BOOL = np.dtype(bool)
_BOOL_RESULT = frozenset(
    {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal, np.logical_and, np.logical_or}
)
_FLOAT_RESULT = frozenset({np.true_divide})


def _resolve_reshape(shape: tuple, size: int, new: tuple) -> tuple:
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


def _unwrap_key(key: Any, arr: NDArray) -> Any:
    if key.__class__ is NDArray:
        if key._device is not arr._device:
            _mismatch("index", arr, key)
        return key._check("index")
    if isinstance(key, tuple):
        return tuple(_unwrap_key(k, arr) for k in key)
    if isinstance(key, list):
        return arr._device.xp.asarray(key)
    return key


def _is_basic_index(key: Any) -> bool:
    if isinstance(key, tuple):
        return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in key)
    return key is None or key is Ellipsis or isinstance(key, (int, np.integer, slice))


def _check_take_bounds(idx: Any, shape: tuple, xp: Any) -> None:
    if not shape:
        raise IndexError("getitem: a 0-d array cannot be indexed with an integer array")
    if idx.size and (int(idx.max()) >= shape[0] or int(idx.min()) < -shape[0]):
        bad = int(idx.max()) if int(idx.max()) >= shape[0] else int(idx.min())
        raise IndexError(f"getitem: index {bad} is out of bounds for axis 0 with size {shape[0]} (array shape {shape})")


# ---------------------------------------------------------------------------------------
# functions of several arrays


def _same_device(op: str, arrays: list[NDArray]) -> AnyDevice:
    first = arrays[0]
    for other in arrays[1:]:
        if other._device is not first._device:
            _mismatch(op, first, other)
    return first._device


def _as_arrays(op: str, items: Any) -> list[NDArray]:
    items = list(items)
    if not items:
        raise ValueError(f"{op}: needs at least one array")
    if not all(x.__class__ is NDArray for x in items):
        from kit.creation import asarray

        dev = next((x._device for x in items if x.__class__ is NDArray), None)
        items = [x if x.__class__ is NDArray else asarray(x, device=dev) for x in items]
    return items


def concatenate(arrays: Any, axis: int = 0) -> NDArray:
    arrs = _as_arrays("concatenate", arrays)
    dev = _same_device("concatenate", arrs)
    datas = [a._check("concatenate") for a in arrs]
    nd = datas[0].ndim
    if any(d.ndim != nd for d in datas) or nd == 0:
        raise ShapeError(
            f"concatenate: arrays need the same number (>= 1) of dimensions, got shapes {[d.shape for d in datas]}"
        )
    (ax,) = _norm_axis(axis, nd, "concatenate", datas[0].shape)  # type: ignore[misc]
    for d in datas[1:]:
        if d.shape[:ax] + d.shape[ax + 1 :] != datas[0].shape[:ax] + datas[0].shape[ax + 1 :]:
            raise ShapeError(f"concatenate: shapes {datas[0].shape} and {d.shape} differ off axis {ax}")
    shape = (*datas[0].shape[:ax], sum(d.shape[ax] for d in datas), *datas[0].shape[ax + 1 :])
    dtype = np.result_type(*[d.dtype for d in datas])
    out, owner = allocate(shape, dtype, dev)
    dev.xp.concatenate(datas, axis=ax, out=out)
    return _wrap(out, dev, owner)


def stack(arrays: Any, axis: int = 0) -> NDArray:
    arrs = _as_arrays("stack", arrays)
    dev = _same_device("stack", arrs)
    datas = [a._check("stack") for a in arrs]
    if any(d.shape != datas[0].shape for d in datas):
        raise ShapeError(f"stack: all arrays need the same shape, got {[d.shape for d in datas]}")
    nd = datas[0].ndim + 1
    (ax,) = _norm_axis(axis, nd, "stack", datas[0].shape)  # type: ignore[misc]
    shape = (*datas[0].shape[:ax], len(datas), *datas[0].shape[ax:])
    out, owner = allocate(shape, np.result_type(*[d.dtype for d in datas]), dev)
    dev.xp.stack(datas, axis=ax, out=out)
    return _wrap(out, dev, owner)


def where(cond: NDArray, a: Any, b: Any) -> NDArray:
    """Elements of a where cond is true, else of b (broadcast)."""
    if cond.__class__ is not NDArray:
        raise TypeError(f"where: the condition must be an NDArray, got {type(cond).__name__}")
    c = cond._check("where")
    dev = cond._device
    parts = []
    for x in (a, b):
        if x.__class__ is NDArray:
            if x._device is not dev:
                _mismatch("where", cond, x)
            parts.append(x._check("where"))
        elif x.__class__ in _SCALARS:
            parts.append(x)
        else:
            parts.append(cond._coerce(x, "where")._data)
    shapes = [c.shape] + [p.shape for p in parts if not isinstance(p, _SCALARS)]
    shape = shapes[0]
    for s in shapes[1:]:
        shape = _broadcast(shape, s, "where")
    dtype = np.result_type(*[p if isinstance(p, _SCALARS) else p.dtype for p in parts])
    out, owner = allocate(shape, dtype, dev)
    dev.xp.copyto(out, parts[1])
    dev.xp.copyto(out, parts[0], where=c)
    return _wrap(out, dev, owner)


def maximum(a: NDArray, b: Any) -> NDArray:
    return a.maximum(b) if a.__class__ is NDArray else b.maximum(a)


def minimum(a: NDArray, b: Any) -> NDArray:
    return a.minimum(b) if a.__class__ is NDArray else b.minimum(a)
