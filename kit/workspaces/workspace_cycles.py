"""A workspace's arrays after their cycle: whether an array of an earlier cycle may still be used
and, when not, the error that says why; and a scope closed out of order.

    >>> import kit
    >>> ws = kit.get_workspace_for_current_thread(name="CYCLES")
    >>> with ws:
    ...     x = kit.ones((3,))
    >>> x.is_valid, ws.cycles
    (False, 1)
    >>> ws.destroy()

Each cycle (or lap of a circular workspace) is one `Generation` object; an array holds the one it
was carved in, and every op compares it with its owner's by identity (one attribute load). Only
when they differ does the workspace look closer (`_still_valid`) and word the error (`_stale`,
with the carving file:line under `kit.workspace.track_allocation_sites(True)`). `Cycles` is a mixin
of `Workspace` that declares what it needs from it; a training step never enters this file.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from kit.core.context import suspended_between
from kit.core.devices import AnyDevice
from kit.core.memory import data_address
from kit.state import STATE
from kit.workspaces.workspace_arena import Arena
from kit.workspaces.workspace_config import WorkspaceConfig
from kit.workspaces.workspace_errors import (
    ArrayFromClosedScopeError,
    ArrayFromDestroyedWorkspaceError,
    ArrayFromOldCycleError,
    ArrayOverwrittenError,
    WorkspaceScopeError,
    WorkspaceThreadError,
)

__all__ = ["Cycles"]


def _caller_site() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("kit"):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Cycles:
    """Validity and its errors, mixed into `Workspace` (which holds the state these methods read)."""

    # needs from its host (Workspace, kit.workspaces.workspace, sets each in __init__):
    name: str
    device: AnyDevice
    config: WorkspaceConfig
    thread_name: str
    arena: Arena  # owned by the host
    destroyed: bool
    _tid: int | None  # the thread that may use its arrays (None: any, a circular workspace)
    parent: Any  # the workspace current when this one opened (None, a Workspace, a kit.context marker)
    _open: bool
    cycles: int  # completed cycles
    _entered: int  # started cycles
    _lap: int  # a circular workspace's laps of its write pointer
    _gen: Any  # the Generation arrays carved now get (kit.workspaces.workspace)
    _close_cycle: Callable[[], None]  # ends the cycle: the counters, the generation, the learning

    def _remember_site(self, address: int, nbytes: int) -> None:
        if self._gen.sites is None:
            self._gen.sites = []
        self._gen.sites.append((address, address + max(nbytes, 1), _caller_site()))

    def _close_out_of_order(self, current: Any) -> None:
        """`with ws:` left while `current`, another workspace, is current (e.g. a generator that
        yielded inside `with ws:` dropped while another is open): closed anyway, so it is not left
        open for good, then an error says so."""
        self._unlink_from(current)
        # only suspended generators' scope_out_of_workspaces blocks above: they are not this
        # scope's doing, and they resolve to what is current below them (now self.parent)
        out_of_order = not suspended_between(current, self.parent)
        self._close_cycle()
        if out_of_order:
            raise WorkspaceScopeError(
                f"workspace {self.name!r} closed while {getattr(current, 'name', None)!r} is current: close "
                "nested workspaces in reverse order. (A generator that yields inside `with ws:` lends the scope "
                "to its caller until it resumes; yield detached results outside the `with` block instead.) "
                f"{self.name!r} is closed now and its arrays are invalid"
            )

    def _unlink_from(self, current: Any) -> None:
        """Take this workspace out of the chain of open scopes that ends in `current`."""
        node = current
        while node is not None and node.parent is not self:
            node = node.parent
        if node is not None:
            node.parent = self.parent

    # ---- validity (called by NDArray when an array's generation is not current) ---
    def _still_valid(self, arr: Any) -> bool:
        g = arr._gen
        if g is self._gen and not self.destroyed:
            return True
        if not self.config.circular or self.destroyed or g.lap != self._lap - 1 or g.kind is not ArrayOverwrittenError:
            return False
        arena = self.arena
        address = data_address(arr._data)
        if not arena.holds(address):  # a spill: heap memory nobody reuses this lap
            return True
        return address - arena.base >= arena.offset  # the new lap has not reached it yet

    def _stale(self, arr: Any, op: str) -> None:
        if self._tid is not None and threading.get_ident() != self._tid:
            raise WorkspaceThreadError(
                f"{op}: this array (shape {arr._data.shape}) lives in workspace {self.name!r} of thread "
                f"{self.thread_name!r}, and thread {threading.current_thread().name!r} may not use it: the owning "
                "thread reuses the arena when its cycle ends, so the values could change under you. Call .detach() "
                "on the owning thread and hand over the copy"
            )
        if self._still_valid(arr):
            return
        g = arr._gen
        kind = g.kind or ArrayFromOldCycleError
        how = g.ended or (
            f"cycle {g.cycle} ended when the scope closed" if kind is ArrayFromClosedScopeError else "its cycle ended"
        )
        if kind is ArrayOverwrittenError and g.lap != self._lap - 1:
            how = f"the circular workspace has wrapped around {self._lap - g.lap} times since"
        now = (
            "destroyed"
            if self.destroyed
            else (f"in cycle {self._entered} (open)" if self._open else f"closed after cycle {self.cycles}")
        )
        if self.config.circular:
            made = f"in lap {g.lap + 1} of the circular buffer"
        else:
            made = f"in cycle {g.cycle}" if g.cycle > 0 else "outside any cycle"
        if self.destroyed:
            kind, how = ArrayFromDestroyedWorkspaceError, how + "; then the workspace was destroyed"
        elif kind is ArrayFromClosedScopeError and self._entered > g.cycle:
            kind = ArrayFromOldCycleError
            how += f", and the workspace has been reopened {self._entered - g.cycle} time(s) since"
        msg = (
            f"{op}: this array (shape {arr._data.shape}, {arr._data.dtype}) lives in workspace {self.name!r} "
            f"on {self.device} and was allocated {made}; {how}, so its memory may already hold other data "
            f"(the workspace is now {now}). Keep a result past its scope with .detach() inside the scope "
            f"(a heap copy), or .leverage_to('<outer workspace>') into an open outer workspace."
        )
        if g.sites:
            where = data_address(arr._data)
            site = next((s for a, b, s in reversed(g.sites) if a <= where < b), None)
            if site:
                msg += f" It was allocated at {site}."
        elif not STATE.track_sites:
            msg += " (kit.workspace.track_allocation_sites(True) adds where it was allocated.)"
        raise kind(msg)
