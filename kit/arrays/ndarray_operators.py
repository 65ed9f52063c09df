"""NDArray's operators: `a + b`, `a < b`, `a += b`, `-a` ... built from one table and installed on the class.

    >>> import kit
    >>> x = kit.ones((2, 2))
    >>> (x + 1).sum().item(), (2 * x - x).sum().item(), (x < 2).sum().item()
    (8.0, 4.0, 4)

Each operator is a small method made by `binary_method`: heap arrays on a CPU with no workspace or
cache let NumPy allocate inside the ufunc, in this one frame; two heap arrays of one dtype on a GPU
go to CuPy's ufunc; everything else (workspaces, staleness, errors, mixed devices) goes to
`NDArray._binary`. kit.ndarray calls `install_operators(NDArray, heap_result)` once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kit.core import backend
from kit.core.shapes import BOOL_DTYPE, FLOAT_RESULT_UFUNCS
from kit.state import STATE

__all__ = ["binary_method", "install_operators"]

_thread = STATE.thread  # this thread's slots: .ws, the current workspace


_CUPY_UFUNCS: dict[np.ufunc, Any] = {}


def _cupy_ufunc(ufunc: np.ufunc) -> Any:
    """CuPy's own ufunc for a NumPy one: called directly, not through NumPy's dispatch."""
    f = _CUPY_UFUNCS.get(ufunc)
    if f is None:
        f = _CUPY_UFUNCS[ufunc] = getattr(backend.cupy(), ufunc.__name__)
    return f


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


def binary_method(array_class: type, heap_result: Callable, ufunc: np.ufunc, name: str, reflected: bool) -> Any:
    """`a + b` and friends, a method of `array_class` (kit.ndarray.NDArray); `heap_result` wraps what
    NumPy or CuPy allocated (both kit.ndarray's, handed in: this module sits below it). Two heap
    arrays (or a heap array and a Python number) on a CPU device, with no workspace open and no
    cache: NumPy allocates the result inside the ufunc, as the raw op does, in this one frame.
    Everything else (workspaces, checks, errors, GPUs): _binary."""

    def method(self: Any, other: Any) -> Any:
        dev = self._device
        if self._owner is None and _thread.ws is None and not STATE.cache.on and dev.kind == "cpu":
            cls = other.__class__
            if cls is array_class:
                if other._owner is None and other._device is dev:
                    try:
                        # order="C": a result laid out as `allocate` lays it out (NumPy would follow a
                        # transposed input), so reshape stays a view
                        if reflected:
                            out = ufunc(other._data, self._data, order="C")
                        else:
                            out = ufunc(self._data, other._data, order="C")
                    except (ValueError, TypeError):  # _binary says which shapes or dtypes
                        return self._binary(other, ufunc, name, reflected)
                    return heap_result(out, dev)
            elif cls is float or cls is int or cls is bool:
                try:
                    out = ufunc(other, self._data, order="C") if reflected else ufunc(self._data, other, order="C")
                except TypeError:
                    return self._binary(other, ufunc, name, reflected)
                return heap_result(out, dev)
        elif (
            dev.kind == "gpu"
            and self._owner is None
            and _thread.ws is None
            and not STATE.cache.on
            and other.__class__ is array_class
            and other._owner is None
            and other._device is dev
            and other._data.dtype == self._data.dtype
            and self._data.dtype is not BOOL_DTYPE
            and ufunc not in FLOAT_RESULT_UFUNCS
        ):
            # two heap arrays of one dtype on a GPU: CuPy's ufunc allocates from its pool, as the raw
            # op does (an empty() first and out= cost ~7 us more per op on an H100)
            try:
                f = _cupy_ufunc(ufunc)
                out = f(other._data, self._data) if reflected else f(self._data, other._data)
            except (ValueError, TypeError):
                return self._binary(other, ufunc, name, reflected)
            return heap_result(out, dev)
        return self._binary(other, ufunc, name, reflected)

    return method


def install_operators(array_class: type, heap_result: Callable) -> None:
    """Give `array_class` (kit.ndarray.NDArray) its operators: + - * / // % ** (reflected too, and in
    place for + - * /), the comparisons, & |, unary - and abs()."""

    def binary(ufunc: np.ufunc, name: str, reflected: bool) -> Any:
        return binary_method(array_class, heap_result, ufunc, name, reflected)

    def inplace(ufunc: np.ufunc, name: str) -> Any:
        def method(self: Any, other: Any) -> Any:
            return self._inplace(other, ufunc, name + " (in place)")

        return method

    for short, ufunc, name in _BINARY_OPS:
        setattr(array_class, f"__{short}__", binary(ufunc, name, False))
        setattr(array_class, f"__r{short}__", binary(ufunc, name, True))
        if short in ("add", "sub", "mul", "truediv"):
            setattr(array_class, f"__i{short}__", inplace(ufunc, name))
    for short, ufunc, name in _COMPARISONS:
        setattr(array_class, f"__{short}__", binary(ufunc, name, False))
    array_class.__neg__ = lambda self: self._unary(np.negative, "negative")  # type: ignore[method-assign]
    array_class.__abs__ = lambda self: self._unary(np.absolute, "abs")  # type: ignore[method-assign]
