"""NDArray's reads to the host and to Python: `numpy()`, `item()`, `tolist()`, `float(x)`, `repr`.

    >>> import kit
    >>> x = kit.ones((2,))
    >>> x.numpy().tolist(), x.sum().item(), float(x[0])
    ([1.0, 1.0], 2.0, 1.0)

A mixin of kit.ndarray.NDArray, opening with what it needs from it (the state these read). Heap
memory on the CPU is shared with the NumPy array `numpy()` gives; an array in a workspace is copied
(the arena holds other data after its cycle); GPU data is read on the array's own stream, counted
as a transfer.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.core.devices import AnyDevice, scalar, to_host
from kit.core.memory import Lease
from kit.workspaces.workspace import Generation, Workspace

__all__ = ["HostReads"]


class HostReads:
    """The conversions of an NDArray to NumPy and Python values, and its repr."""

    __slots__ = ()

    # needs from its host (kit.ndarray.NDArray):
    _data: np.ndarray  # the raw array (a CuPy array on a GPU)
    _device: AnyDevice
    _owner: Workspace | Lease | None  # where the memory lives: a workspace, a cached block, the heap
    _gen: Generation | int  # the generation it was carved in (0 off a workspace)
    _check: Callable[[str], np.ndarray]  # the staleness check: the raw array, if it may still be used
    is_valid: bool

    def numpy(self) -> np.ndarray:
        """The data as a NumPy array. Heap memory on the CPU is shared (no copy); an array that
        lives in a workspace is copied, because the arena will hold other data after its cycle;
        GPU memory is copied to the host. (`.data` is the raw view, for kernels: unsafe to keep.)"""
        a = self._check("numpy")
        if self._device.kind != "cpu":
            return to_host(a, self._device)  # on the array's stream, counted as a transfer
        return a.copy() if self._owner.__class__ is Workspace else a

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy and a is self._data else a

    # host reads of GPU data happen on the array's own stream (devices.scalar / to_host), so they
    # wait for what is queued there: a logical device's stream does not wait for the default one
    def item(self) -> Any:
        return scalar(self._check("item"), self._device)

    def tolist(self) -> Any:
        a = self._check("tolist")
        return (to_host(a, self._device) if self._device.kind == "gpu" else a).tolist()

    def __float__(self) -> float:
        return float(self._on_host("float"))

    def __int__(self) -> int:
        return int(self._on_host("int"))

    def __bool__(self) -> bool:
        return bool(self._on_host("bool"))

    def __index__(self) -> int:
        return operator.index(self.item())

    def _on_host(self, what: str) -> Any:
        """The raw data for a Python conversion; one GPU element is read on the array's stream
        (more than one is left to CuPy, which refuses them as NumPy does)."""
        a = self._check(what)
        if self._device.kind == "gpu" and a.size == 1:
            return scalar(a, self._device)
        return a

    def __repr__(self) -> str:
        d = self._data
        head = f"NDArray(shape={d.shape}, dtype={d.dtype}, device={self._device}, {self._owner_words()}"
        if not self.is_valid:
            return head + ", STALE: its workspace moved on)"
        body = np.array2string(self.numpy(), separator=", ", threshold=20, edgeitems=2, prefix="  ")
        return f"{head})\n  {body}"

    def _owner_words(self) -> str:
        """Where the memory lives, as the repr says it: heap, a cached block, or a workspace's cycle."""
        o = self._owner
        if o is None:
            return "heap"
        if o.__class__ is Lease:
            return "heap (cached block)"
        return f"workspace {o.name!r} cycle {o.cycle_of(self._gen)}"
