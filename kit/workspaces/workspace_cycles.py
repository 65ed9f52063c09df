"""A workspace's cycles: entering and leaving its scope, and whether an array of an earlier cycle
may still be used (and, when not, the error that says why).

    >>> import kit
    >>> ws = kit.get_workspace_for_current_thread(name="CYCLES")
    >>> with ws:
    ...     x = kit.ones((3,))
    >>> x.is_valid, ws.cycles
    (False, 1)
    >>> ws.destroy()

Each cycle (and, in a circular workspace, each lap of the write pointer) is one `Generation`
object. An array holds the generation it was carved in; every op compares it with its owner's by
identity, so the check on the hot path is one attribute load. Only when the two differ does the
workspace look closer (`_still_valid`: a circular buffer's last lap stays valid until the pointer
reaches it) and word the error (`_stale`), with the file:line each array was carved at when
`kit.workspace.track_allocation_sites(True)` asked the generation to remember it.

`Cycles` is a mixin of `kit.workspaces.workspace.Workspace`, and opens by declaring what it needs
from it. When a cycle ends it asks the workspace's arena (kit.workspaces.workspace_arena) what size
it has learned, calling down with what the arena needs (the largest cycle, how many ran); when the
answer is a larger block, the arrays of the old one are retired here (`_resize`). Re-exported by
`kit.workspace`.
"""

from __future__ import annotations

import sys
import threading
from threading import get_ident as _get_ident
from typing import Any

from kit.core.context import set_current_workspace, suspended_between
from kit.core.devices import AnyDevice
from kit.core.memory import data_address
from kit.state import STATE
from kit.workspaces.workspace_arena import ALIGNMENT, Arena
from kit.workspaces.workspace_config import DebugMode, WorkspaceConfig
from kit.workspaces.workspace_errors import (
    ArrayFromClosedScopeError,
    ArrayFromDestroyedWorkspaceError,
    ArrayFromOldCycleError,
    ArrayOverwrittenError,
    StaleArrayError,
    WorkspaceScopeError,
    WorkspaceThreadError,
)

_thread = STATE.thread  # this thread's slots: .ws (the current workspace), .manager


class Generation:
    __slots__ = ("cycle", "ended", "kind", "lap", "sites")

    def __init__(self, cycle: int, lap: int) -> None:
        self.cycle, self.lap = cycle, lap
        self.ended: str | None = None  # how it ended, for the error message
        self.kind: type[StaleArrayError] | None = None
        self.sites: list[tuple[int, int, str]] | None = None  # (start, end, "file:line") in debug


def _caller_site() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("kit"):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Cycles:
    """Scopes and validity, mixed into `Workspace` (which holds the state these methods read)."""

    # needs from its host (Workspace, kit.workspaces.workspace, sets each in __init__):
    name: str
    device: AnyDevice
    config: WorkspaceConfig
    thread_id: int
    thread_name: str
    arena: Arena  # owned by the host; these methods call down into it
    destroyed: bool
    _tid: int | None  # the thread that may use its arrays (None: any, a circular workspace)
    _circular: bool  # config.circular, read once
    _realloc: bool  # config.policy_spill is SpillPolicy.REALLOCATE, read once
    # the scope and cycle state these methods keep, started by the host's __init__:
    parent: Any  # the workspace current when this one opened (None, a Workspace, a kit.context marker)
    _open: bool
    _tag: int  # re-entrant scope depth beyond the first
    _bypassed: list[bool]  # per `with`, whether DebugMode.BYPASS_EVERYTHING skipped it
    _saved_current: Any  # the current workspace a bypassed scope stood in for
    cycles: int  # completed cycles
    _entered: int  # started cycles
    _lap: int  # a circular workspace's laps of its write pointer
    _gen: Generation  # the generation arrays carved now get
    # the counters a cycle's end settles (the host counts carves and spills into them):
    _cycle_bytes: int
    cycle_spilled_bytes: int
    last_cycle_bytes: int
    max_cycle_bytes: int
    resets: int

    def _remember_site(self, address: int, nbytes: int) -> None:
        if self._gen.sites is None:
            self._gen.sites = []
        self._gen.sites.append((address, address + max(nbytes, 1), _caller_site()))

    def _retire(self, how: str, kind: type[StaleArrayError]) -> None:
        self._gen.ended = how
        self._gen.kind = kind

    def _check_thread(self, what: str) -> None:
        if threading.get_ident() != self.thread_id:
            raise WorkspaceThreadError(
                f"{what}: workspace {self.name!r} belongs to thread {self.thread_name!r}, not "
                f"{threading.current_thread().name!r}; each thread gets its own with get_workspace_for_current_thread()"
            )

    def __enter__(self) -> Cycles:
        if _get_ident() != self.thread_id:
            self._check_thread("with ws")
        if self.destroyed:
            raise WorkspaceScopeError(
                f"workspace {self.name!r} was destroyed; get a new one with get_workspace_for_current_thread()"
            )
        if STATE.debug_mode is DebugMode.BYPASS_EVERYTHING:
            self._bypassed.append(True)
            self._saved_current = set_current_workspace(None)
            return self
        self._bypassed.append(False)
        if self._open:
            if _thread.ws is self:
                self._tag += 1  # re-entrant: same cycle
                return self
            raise WorkspaceScopeError(
                f"workspace {self.name!r} is already open further out; a workspace cannot be opened "
                f"inside its own scope with another workspace in between"
            )
        self.parent = _thread.ws
        _thread.ws = self
        self._open_cycle()
        return self

    def _open_cycle(self) -> None:
        """A cycle starts (entering the scope, or Workspace.replay_cycle)."""
        self._open = True
        self._entered += 1
        if not self._circular:
            self.arena.offset = 0  # the front (Arena.move_to, written out: every cycle)
            self._gen = Generation(self._entered, self._lap)
        elif self._gen.cycle == 0:
            self._gen.cycle = self._entered
        self._cycle_bytes = 0
        self.cycle_spilled_bytes = 0
        if STATE.recorder is not None:
            STATE.recorder.cycle_start(self)

    def __exit__(self, *exc: Any) -> None:
        if self._bypassed.pop() if self._bypassed else False:
            set_current_workspace(self._saved_current)
            return
        if self._tag:
            self._tag -= 1
            return
        if not self._open:  # already closed (out of order, see below): nothing left to do
            return
        current = _thread.ws
        if current is self:
            _thread.ws = self.parent
            self._close_cycle()
            return
        # out of order, e.g. a generator that yielded inside `with ws:` dropped while another is open:
        self._unlink_from(current)  # close it anyway, so it is not left open for good, then say so
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

    def _close_cycle(self) -> None:
        """A cycle ends: the counters, the generation retired, the learning (leaving the scope, or
        Workspace.replay_cycle)."""
        self._open = False
        self.cycles += 1
        used = self.last_cycle_bytes = self._cycle_bytes
        if used > self.max_cycle_bytes:
            self.max_cycle_bytes = used
        if STATE.recorder is not None:  # before the reset: the timeline records the bytes it frees
            STATE.recorder.cycle_end(self)
        if not self._circular:
            # the message is written only if a stale array is ever used (_stale): "cycle N ended
            # when the scope closed", N being the generation's cycle
            self._gen.kind = ArrayFromClosedScopeError
            # between cycles: a generation of its own, which the next exit retires in turn (an array
            # carved while closed, through Workspace.alloc, must not become valid again later)
            self._gen = Generation(0, self._lap)
            self.arena.offset = 0  # the front (Arena.move_to, written out: every cycle)
            self.resets += 1
        arena = self.arena
        # the learning policy's say: while unsized, or (REALLOCATE) when a cycle outgrew the block (a
        # circular arena's room is its ring block, which it knows); a sized arena is not asked otherwise
        due = not arena.sized or (self._realloc and (self._circular or self.max_cycle_bytes > arena.capacity))
        if due and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            self._resize(arena.learn(self.max_cycle_bytes, self.cycles))

    def _resize(self, size: int) -> None:
        """A larger block for the arena when `size` (what it learned) exceeds the one it has.
        The arrays of the old block become invalid; a circular workspace's stay valid (they keep
        the old block alive and nothing writes there again), and new ones start at the front."""
        arena = self.arena
        if size <= arena.capacity:
            return
        if self._open:
            raise WorkspaceScopeError(f"workspace {self.name!r}: initialize() inside its own scope")
        if not self._circular:
            self._retire("the arena was reallocated", ArrayFromOldCycleError)
            self._gen = Generation(0, self._lap)
        raw = arena.replace(size)
        if STATE.recorder is not None:  # the arena is one heap allocation
            STATE.recorder.arena(self, raw, arena.capacity + ALIGNMENT)

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
