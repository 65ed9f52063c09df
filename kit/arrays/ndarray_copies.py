"""NDArray's copies: within its device (`dup`, `astype`), to another device (`to`, `assign`), and
between workspaces (ND4J's `detach`, `leverage_to`, `leverage`, `migrate`).

    >>> import kit
    >>> x = kit.ones((2,))
    >>> with kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), "DOC") as ws:
    ...     inside = x.migrate()           # a copy carved in the open workspace
    ...     kept = inside.detach()         # a copy on the heap, valid after the scope closes
    ...     inside.is_attached, kept.is_attached
    (True, False)
    >>> kept.tolist()
    [1.0, 1.0]

A mixin of kit.ndarray.NDArray. Every copy is allocated through kit.memory (the current
workspace, the cache or the heap), or carved in the target workspace; `to` and `assign` go
through the one transfer path between devices (kit.devices.transfer), which counts them.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np

from kit.arrays.checks import check_cast
from kit.core import backend
from kit.core.context import current_workspace, scope_out_of_workspaces
from kit.core.device_objects import DeviceMismatchError
from kit.core.devices import as_device, host_source, transfer
from kit.core.memory import allocate
from kit.core.shapes import ShapeError
from kit.workspaces.workspace import Workspace, leverage_target, parent_of_current_workspace

__all__ = ["Copies"]


class Copies:
    """Copies of an NDArray: on its device, to another, between workspaces."""

    __slots__ = ()

    def dup(self) -> Self:
        """A copy in the current allocation context (workspace or heap)."""
        a = self._check("dup")
        out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return self._wrap(out, self._device, owner)

    copy = dup

    def astype(self, dtype: Any) -> Self:
        a = self._check("astype")
        dt = backend.resolve_dtype(dtype)
        out, owner = allocate(a.shape, dt, self._device)
        self._device.xp.copyto(out, a, casting="unsafe")
        return self._wrap(out, self._device, owner)

    def to(self, device: Any) -> Self:
        """A copy on another device (this array when already there): the one transfer path,
        counted by kit.devices.transfer_stats(). The copy goes to the current allocation
        context of this thread (its workspace when that workspace is on the target device)."""
        a = self._check("to")
        dev = as_device(device)
        if dev is self._device:
            return self
        out, owner = allocate(a.shape, a.dtype, dev)
        transfer(out, dev, a, self._device)
        return self._wrap(out, dev, owner)

    def assign(self, source: Any) -> Self:
        """Copy `source` (a kit array on any device, or a host array) into this array in place."""
        a = self._check("assign")
        if source.__class__ is self.__class__:
            src, src_dev = source._check("assign"), source.device
        else:  # host memory: a copy on the host is no transfer; onto a GPU it is one
            src = np.asarray(source)
            src_dev = host_source(self._device)
        if tuple(src.shape) != a.shape:
            raise ShapeError(f"assign: a source of shape {tuple(src.shape)} does not fit this array of shape {a.shape}")
        if src.dtype != a.dtype:
            with np.errstate(over="ignore"):  # an overflow is named just below, never stored as inf
                cast = src.astype(a.dtype)
            if cast.dtype.kind == "f" and src.dtype.kind in "fiu":
                check_cast(src, cast, "assign", f": this array is {a.dtype}; scale the values, or use a wider dtype")
            src = cast
        transfer(a, self._device, src, src_dev)
        return self

    # ---- between arenas (ND4J INDArray: isAttached, detach, leverage...) -----------
    @property
    def is_attached(self) -> bool:
        """True when the memory lives in a workspace (ND4J isAttached)."""
        return self._owner.__class__ is Workspace

    @property
    def workspace(self) -> Workspace | None:
        return self._owner if self._owner.__class__ is Workspace else None

    def detach(self) -> Self:
        """A copy on the heap that outlives every workspace; `self` when not attached."""
        if not self.is_attached:
            return self
        a = self._check("detach")
        with scope_out_of_workspaces():
            out, owner = allocate(a.shape, a.dtype, self._device)
        self._device.xp.copyto(out, a)
        return self._wrap(out, self._device, owner)

    def leverage_to(self, name: str, enforce_existence: bool = False) -> Self:
        """Copy into the open workspace `name` of this thread (ND4J leverageTo). A detached
        array, or one already there, is returned unchanged, as in ND4J."""
        a = self._check("leverage_to")
        target = leverage_target(name, enforce_existence, self._device)
        if target is None or self._owner is target or not self.is_attached:
            return self
        out, owner = target.alloc(a.shape, a.dtype)
        self._device.xp.copyto(out, a)
        return self._wrap(out, self._device, owner)

    def leverage(self) -> Self:
        """Copy into the parent of the current workspace; detach() when there is none."""
        parent = parent_of_current_workspace()
        return self.detach() if parent is None else self.leverage_to(parent.name)

    def migrate(self, detach_on_no_ws: bool = False) -> Self:
        """Copy into the current workspace (ND4J migrate); a heap array is copied there too."""
        current = current_workspace()
        if current is None:
            return self.detach() if detach_on_no_ws else self
        if self._owner is current:
            return self
        a = self._check("migrate")
        if current.physical is not self._device.physical:
            raise DeviceMismatchError(
                f"migrate(): the current workspace {current.name!r} is on {current.device.name} and this array is on "
                f"{self._device.name}; a workspace holds arrays of its own device: .to({current.device.name!r}) "
                "copies the array there (made inside the workspace, the copy is in it)"
            )
        out, owner = current.alloc(a.shape, a.dtype)
        self._device.xp.copyto(out, a)
        return self._wrap(out, self._device, owner)
