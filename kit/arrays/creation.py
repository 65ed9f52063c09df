"""Array creation: every function allocates through kit.memory.allocate.

>>> import numpy as np, kit
>>> kit.zeros((2, 3))
NDArray(shape=(2, 3), dtype=float32, device=..., heap)
  [[0., 0., 0.],
   [0., 0., 0.]]
>>> kit.full((2,), 7.0, dtype="float64")
NDArray(shape=(2,), dtype=float64, device=..., heap)
  [7., 7.]
>>> kit.arange(5)
NDArray(shape=(5,), dtype=int64, device=..., heap)
  [0, 1, 2, 3, 4]
>>> kit.seed(42); kit.randn((3, 3))         # one seeded generator per device
NDArray(shape=(3, 3), dtype=float32, device=..., heap)
  [[...]]
>>> np_array = np.arange(6.0).reshape(2, 3)
>>> kit.asarray(np_array)                   # zero-copy on the CPU when possible
NDArray(shape=(2, 3), dtype=float64, device=..., heap)
  [[0., 1., 2.],
   [3., 4., 5.]]
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from kit.arrays.ndarray import NDArray, ShapeError, wrap
from kit.core import backend
from kit.core.arguments import real
from kit.core.backend import RawArray
from kit.core.devices import AnyDevice, as_device, host_source, transfer
from kit.core.memory import allocate, allocate_aligned
from kit.core.shapes import as_shape

__all__ = [
    "aligned_zeros",
    "arange",
    "array",
    "asarray",
    "empty",
    "empty_like",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "zeros",
    "zeros_like",
]

Shape = int | tuple[int, ...] | list[int]


def empty(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    dev = as_device(device)
    out, owner = allocate(as_shape(shape, "empty"), backend.resolve_dtype(dtype), dev)
    return wrap(out, dev, owner)


def _filled(op: str, shape: Shape, value: float, dtype: DTypeLike, device: str | AnyDevice | None) -> NDArray:
    dev = as_device(device)
    out, owner = allocate(as_shape(shape, op), backend.resolve_dtype(dtype), dev)
    out.fill(value)
    return wrap(out, dev, owner)


def full(shape: Shape, value: float, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    if isinstance(value, str | bytes) or value is None:  # NumPy fills NaN for None and 3.0 for "3"
        raise TypeError(f"full(value={value!r}): the fill value is a number (or a bool)")
    return _filled("full", shape, value, dtype, device)


def zeros(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    return _filled("zeros", shape, 0, dtype, device)


def aligned_zeros(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    """Zeros on the heap, whatever workspace is open, starting on a cache line on the host
    (kit.memory.allocate_aligned): for the long-lived buffers BLAS reads and writes.

        >>> x = aligned_zeros((1000,), "float32", "cpu:0")
        >>> x.data.__array_interface__["data"][0] % 64, x.sum().item()
        (0, 0.0)
    """
    dev = as_device(device)
    out, owner = allocate_aligned(as_shape(shape, "aligned_zeros"), backend.resolve_dtype(dtype), dev)
    out.fill(0)
    return wrap(out, dev, owner)


def ones(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    return _filled("ones", shape, 1, dtype, device)


def empty_like(x: NDArray, dtype: DTypeLike = None) -> NDArray:
    return empty(x.shape, dtype or x.dtype, x.device)


def zeros_like(x: NDArray, dtype: DTypeLike = None) -> NDArray:
    return full(x.shape, 0, dtype or x.dtype, x.device)


def ones_like(x: NDArray, dtype: DTypeLike = None) -> NDArray:
    return full(x.shape, 1, dtype or x.dtype, x.device)


def full_like(x: NDArray, value: float, dtype: DTypeLike = None) -> NDArray:
    return full(x.shape, value, dtype or x.dtype, x.device)


def arange(
    start: float,
    stop: float | None = None,
    step: float = 1,
    dtype: DTypeLike = None,
    device: str | AnyDevice | None = None,
) -> NDArray:
    if stop is None:
        start, stop = 0, start
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        real("arange", name, value)  # checked, kept as given: whole numbers give int64
    if step == 0:
        raise ValueError("arange(step=0): the step must not be 0")
    n = max(0, int(np.ceil((stop - start) / step)))
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dt = np.dtype(np.int64) if ints else backend.get_default_dtype()
    else:
        dt = backend.resolve_dtype(dtype)
    dev = as_device(device)
    out, owner = allocate((n,), dt, dev)
    # 0..n-1 by a cumulative sum in a wide scratch array (exact to 2**53), then scaled into out
    wide, _ = allocate((n,), np.dtype(np.float64 if dt.kind == "f" else np.int64), dev)
    xp = dev.xp
    wide.fill(1)
    if n:
        wide[0] = 0
        xp.cumsum(wide, out=wide)
    xp.multiply(wide, step, out=wide, casting="unsafe")
    xp.add(wide, start, out=wide, casting="unsafe")
    xp.copyto(out, wide, casting="unsafe")
    return wrap(out, dev, owner)


def array(
    obj: ArrayLike | NDArray | RawArray, dtype: DTypeLike = None, device: str | AnyDevice | None = None
) -> NDArray:
    """A new array holding a copy of `obj` (nested lists, NumPy/CuPy arrays, scalars, NDArrays)."""
    dev = as_device(device)
    if isinstance(obj, NDArray):
        src = obj.to(dev) if obj.device is not dev else obj
        return src.astype(dtype) if dtype is not None else src.dup()
    host = _to_host_or_device(obj, dev)
    dt = _infer_dtype(obj, host, dtype)
    out, owner = allocate(tuple(host.shape), dt, dev)
    if isinstance(host, np.ndarray):  # host values: onto a GPU through the transfer path
        transfer(out, dev, np.asarray(host, dtype=dt), host_source(dev))
    else:  # already on this device
        dev.xp.copyto(out, host, casting="unsafe")
    return wrap(out, dev, owner)


def asarray(
    obj: ArrayLike | NDArray | RawArray, dtype: DTypeLike = None, device: str | AnyDevice | None = None
) -> NDArray:
    """Wrap without copying where possible (a NumPy array on the CPU, a CuPy array on its GPU);
    otherwise copy as `array` does. A wrapped array is heap memory kit did not allocate."""
    if isinstance(obj, NDArray):
        dev = as_device(device) if device is not None else obj.device
        out = obj if obj.device is dev else obj.to(dev)
        return out if dtype is None or out.dtype == backend.resolve_dtype(dtype) else out.astype(dtype)
    dev = as_device(device)
    xp = dev.xp
    if isinstance(obj, xp.ndarray) and (dev.kind == "cpu" or _device_of_raw(obj) == dev.index):
        dt = backend.resolve_dtype(dtype) if dtype is not None else obj.dtype
        if dt == obj.dtype:
            backend.resolve_dtype(obj.dtype)  # refuse unsupported dtypes (complex, object, ...)
            return wrap(obj, dev, None)
    return array(obj, dtype=dtype, device=dev)


def _device_of_raw(obj: RawArray) -> int:
    dev = getattr(obj, "device", None)
    return getattr(dev, "id", 0) if dev is not None and not isinstance(dev, str) else 0


def _to_host_or_device(obj: ArrayLike | RawArray, dev: AnyDevice) -> RawArray:
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__cuda_array_interface__") and dev.kind == "gpu":
        return dev.xp.asarray(obj)
    if hasattr(obj, "get") and hasattr(obj, "__cuda_array_interface__"):
        return obj.get()
    try:
        return np.asarray(obj)
    except ValueError as exc:
        raise ShapeError(f"array: cannot make a rectangular array from the input ({exc})") from None


def _infer_dtype(obj: ArrayLike | RawArray, host: RawArray, dtype: DTypeLike) -> np.dtype:
    """NumPy/CuPy inputs keep their dtype; Python floats take the default floating dtype."""
    if dtype is not None:
        return backend.resolve_dtype(dtype)
    if host.dtype.kind == "f" and not hasattr(obj, "dtype"):
        return backend.get_default_dtype()
    return backend.resolve_dtype(host.dtype)


def _random(kind: str, shape: Shape, dtype: DTypeLike, device: str | AnyDevice | None) -> NDArray:
    dev = as_device(device)
    dt = backend.resolve_dtype(dtype)
    if dt.kind != "f" and dt != backend.resolve_dtype(None):
        raise TypeError(f"{kind}: random values need a floating dtype, got {dt.name}")
    shp = as_shape(shape, kind)
    out, owner = allocate(shp, dt, dev)
    gen = dev.rng()
    draw = gen.random if kind == "rand" else gen.standard_normal
    if dt in (np.float32, np.float64):
        with dev.activate():
            draw(out=out, dtype=dt)
    else:  # float16/bfloat16: draw in float32 (the generators have no half loops), then cast
        tmp, _tmp_owner = allocate(shp, np.dtype(np.float32), dev)
        with dev.activate():
            draw(out=tmp, dtype=np.float32)
        dev.xp.copyto(out, tmp, casting="unsafe")
    return wrap(out, dev, owner)


def rand(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    """Uniform [0, 1) from the device's seeded generator."""
    return _random("rand", shape, dtype, device)


def randn(shape: Shape, dtype: DTypeLike = None, device: str | AnyDevice | None = None) -> NDArray:
    """Standard normal from the device's seeded generator."""
    return _random("randn", shape, dtype, device)
