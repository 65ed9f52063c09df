"""Memory workspaces: arenas for cyclic workloads, re-created from ND4J, with loud misuse.

    >>> import kit
    >>> x = kit.randn((64, 32)); w = kit.randn((32, 10))
    >>> cfg = kit.WorkspaceConfig(policy_learning=kit.LearningPolicy.FIRST_LOOP)
    >>> ws = kit.get_workspace_for_current_thread(cfg, "LOOP")
    >>> for step in range(100):
    ...     with ws:                          # a cycle: bump-pointer allocation in one arena
    ...         h = (x @ w).tanh()            # views into the arena, written with out=
    ...         keep = h.sum().detach()       # a heap copy that outlives the cycle
    >>> h + 1                                 # a StaleArrayError: cycle 100 ended
    Traceback (most recent call last):
    kit.workspaces.workspace.ArrayFromClosedScopeError: add: this array (shape (64, 10), float32) lives in ...
    >>> stats = ws.stats()                    # capacity, used, peak, spills, cycles, allocations
    >>> stats["cycles"], stats["allocations"]
    (100, 300)
    >>> ws.destroy()                          # give the arena back

Semantics (ND4J's Nd4jWorkspace, as its documentation and source describe them):
- Entering the scope starts a cycle: offsets reset (BLOCK_LEFT), last cycle's spills freed.
- Leaving it ends the cycle: every array of that cycle becomes invalid. Learning runs here
  (FIRST_LOOP: size the arena from the first cycle; OVER_TIME: after N cycles; REALLOCATE:
  grow to the largest cycle).
- ENDOFBUFFER_REACHED makes a circular buffer: arrays stay valid after the scope until the
  write pointer laps them, and only then do they raise.
- Each array carries its workspace's generation object; every op compares it by identity, so
  the check costs one attribute load. A stale array raises a StaleArrayError subclass naming
  the workspace, the cycle it was made in, what invalidated it, the op, and the remedy.

The other rooms of kit.workspaces are re-exported here: `from kit.workspaces.workspace import X`
works for all.
"""

from __future__ import annotations

import math
import threading
from threading import get_ident as _get_ident
from typing import Any

import numpy as np

from kit.core import memory
from kit.core.context import current_workspace, scope_out_of_workspaces, set_current_workspace
from kit.core.devices import AnyDevice, as_device
from kit.core.memory import data_address
from kit.state import STATE
from kit.workspaces.workspace_arena import Arena
from kit.workspaces.workspace_config import (
    AllocationPolicy,
    DebugMode,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    WorkspaceConfig,
    get_debug_mode,
    set_debug_mode,
    track_allocation_sites,
)
from kit.workspaces.workspace_cycles import Cycles
from kit.workspaces.workspace_errors import (
    ArrayFromClosedScopeError,
    ArrayFromDestroyedWorkspaceError,
    ArrayFromOldCycleError,
    ArrayOverwrittenError,
    NoSuchWorkspaceError,
    StaleArrayError,
    WorkspaceConfigError,
    WorkspaceError,
    WorkspaceFullError,
    WorkspaceScopeError,
    WorkspaceThreadError,
)
from kit.workspaces.workspace_registry import (
    all_workspaces,
    destroy_all_workspaces_for_current_thread,
    get_manager,
    leverage_target,
    parent_of_current_workspace,
)

__all__ = [
    "AllocationPolicy",
    "ArrayFromClosedScopeError",
    "ArrayFromDestroyedWorkspaceError",
    "ArrayFromOldCycleError",
    "ArrayOverwrittenError",
    "DebugMode",
    "LearningPolicy",
    "NoSuchWorkspaceError",
    "ResetPolicy",
    "SpillPolicy",
    "StaleArrayError",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceConfigError",
    "WorkspaceError",
    "WorkspaceFullError",
    "WorkspaceScopeError",
    "WorkspaceThreadError",
    "all_workspaces",
    "current_workspace",
    "destroy_all_workspaces_for_current_thread",
    "get_debug_mode",
    "get_workspace_for_current_thread",
    "leverage_target",
    "parent_of_current_workspace",
    "scope_out_of_workspaces",
    "set_debug_mode",
    "track_allocation_sites",
]

ALIGNMENT = memory.ALIGNMENT  # 64 bytes: where the arena and every carve from it start
_thread = STATE.thread  # this thread's slots: .ws (the current workspace), .manager
DEFAULT_ID = "DefaultWorkspace"


class Generation:
    """One cycle of a workspace (one lap, in a circular one): every array carved in it holds it, and
    is valid while it is its workspace's current one (an identity check); how it ended words the
    error (kit.workspaces.workspace_cycles)."""

    __slots__ = ("cycle", "ended", "kind", "lap", "sites")

    def __init__(self, cycle: int, lap: int) -> None:
        self.cycle, self.lap = cycle, lap
        self.ended: str | None = None  # how it ended, for the error message
        self.kind: type[StaleArrayError] | None = None
        self.sites: list[tuple[int, int, str]] | None = None  # (start, end, "file:line") in debug


class Workspace(Cycles):
    """One arena on one device, owned by one thread. Use `with ws:` for each cycle.

    It owns its `arena` (kit.workspaces.workspace_arena.Arena: the block, the write pointer, the size it
    learned) and calls down into it; the workspace keeps what the arena does not know: whose it is,
    its scopes and generations, spills, and the counters `stats()` reads. Whether an array of an
    earlier cycle may still be used, and the error that says why, is its mixin `Cycles`
    (kit.workspaces.workspace_cycles): nothing there runs while arrays are used in their cycle."""

    def __init__(self, config: WorkspaceConfig, name: str, device: AnyDevice) -> None:
        self.config = config
        self.name = name
        self.device = device
        self.physical = device.physical
        self.thread_id = threading.get_ident()
        self.thread_name = threading.current_thread().name
        # arrays of a scoped workspace belong to its thread (the owner resets the arena when a
        # cycle ends); a circular one's are handed to other threads by design (prefetching)
        self._tid: int | None = None if config.circular else self.thread_id
        # the config is frozen: what the scope hot path asks of it, read once
        self._circular = config.circular
        self._realloc = config.policy_spill is SpillPolicy.REALLOCATE
        self.arena = Arena(config, self.physical)
        self.parent: Workspace | None = None
        self._open = False
        self._tag = 0  # re-entrant scope depth beyond the first
        self._bypassed: list[bool] = []
        self._saved_current: Any = None  # the current workspace a bypassed scope stood in for
        self.destroyed = False
        self.cycles = 0  # completed cycles
        self._entered = 0  # started cycles
        self._lap = 0
        self._gen = Generation(0, 0)
        self._cycle_bytes = 0
        self.max_cycle_bytes = 0
        self.last_cycle_bytes = 0
        self.peak_used = 0
        self.allocations = 0
        self.spilled_bytes = 0
        self.spilled_count = 0
        self.cycle_spilled_bytes = 0
        self.resets = 0
        self.lent_tally: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # the tally when lend() opened a cycle
        raw = self.arena.start()  # a config's initial_size: the block now
        if raw is not None and STATE.recorder is not None:  # the arena is one heap allocation
            STATE.recorder.arena(self, raw, self.arena.capacity + ALIGNMENT)
        with STATE.lock:
            STATE.workspaces.add(self)

    # ---- a cycle: `with ws:` -------------------------------------------------------
    def _check_thread(self, what: str) -> None:
        if threading.get_ident() != self.thread_id:
            raise WorkspaceThreadError(
                f"{what}: workspace {self.name!r} belongs to thread {self.thread_name!r}, not "
                f"{threading.current_thread().name!r}; each thread gets its own with get_workspace_for_current_thread()"
            )

    def __enter__(self) -> Workspace:
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
        self._close_out_of_order(current)  # a generator's scope, say: closed anyway, then an error

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

    def _retire(self, how: str, kind: type[StaleArrayError]) -> None:
        self._gen.ended = how
        self._gen.kind = kind

    @property
    def capacity(self) -> int:
        """The arena's size in bytes (0: no block yet, or destroyed)."""
        return self.arena.capacity

    @property
    def arena_allocations(self) -> int:
        """How many blocks the arena has had (the first, and each growth)."""
        return self.arena.blocks_made

    # ---- carving -------------------------------------------------------------------
    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[Any, Workspace]:
        """Carve an array from the arena (or spill, as the policy says)."""
        arena = self.arena
        off = arena.offset
        if STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            data = arena.carve(shape, dtype)
            if data is not None:
                end = arena.offset
                self.allocations += 1
                self._cycle_bytes += end - off
                if end > self.peak_used:
                    self.peak_used = end
                if STATE.track_sites:
                    self._remember_site(arena.base + off, end - off)
                if STATE.recorder is not None:
                    STATE.recorder.carve(self, off, end - off)
                return data, self
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:  # an empty array holds no memory: nothing to carve
            self.allocations += 1
            if STATE.recorder is not None:
                STATE.recorder.carve(self, off, 0)
            with self.physical.activate():
                return self.physical.xp.empty(shape, dtype), self
        size = (nbytes + ALIGNMENT - 1) & -ALIGNMENT
        if self._circular and size <= arena.capacity and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            self._wrap_around()
            return self.alloc(shape, dtype)
        return self._spill(shape, dtype, nbytes, size), self

    def _spill(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int, size: int) -> Any:
        if self.config.policy_spill is SpillPolicy.FAIL and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            raise WorkspaceFullError(
                f"workspace {self.name!r} is full: {nbytes} bytes for an array of shape {shape} ({dtype}) do not "
                f"fit ({self.arena.offset} of {self.capacity} bytes used) and SpillPolicy.FAIL forbids spilling; "
                f"raise initial_size to at least {self.arena.offset + nbytes} bytes (max_size only caps growth), or "
                "use SpillPolicy.EXTERNAL or REALLOCATE"
            )
        self.allocations += 1
        self._cycle_bytes += size  # what the cycle asked for, spills included: the arena learns from it
        self.spilled_bytes += size
        self.cycle_spilled_bytes += size
        self.spilled_count += 1
        memory.count(self.physical, nbytes)
        with self.physical.activate():
            data = self.physical.xp.empty(shape, dtype)
        if STATE.track_sites:
            self._remember_site(data_address(data), nbytes)
        if STATE.recorder is not None:
            STATE.recorder.spill(self, data, size)
        return data

    def _wrap_around(self) -> None:
        """Circular buffer: the write pointer returns to 0; arrays from the previous lap stay
        valid until the pointer passes them."""
        self._retire(f"circular workspace wrapped around in cycle {self._entered}", ArrayOverwrittenError)
        if STATE.recorder is not None:
            STATE.recorder.reset(self)
        self._lap += 1
        self._gen = Generation(self._entered, self._lap)
        self.arena.move_to(0)
        self.resets += 1

    def initialize(self) -> None:
        """Size the arena from the largest cycle seen (ND4J initializeWorkspace)."""
        self._resize(self.arena.size_for(self.max_cycle_bytes))

    def destroy(self) -> None:
        """Release the arena. Every array in it becomes invalid."""
        self._check_thread("destroy")
        if self._open:
            raise WorkspaceScopeError(f"workspace {self.name!r} is open: leave its scope before destroying it")
        self._retire("the workspace was destroyed", ArrayFromDestroyedWorkspaceError)
        self._gen = Generation(-1, self._lap)
        self._gen.ended, self._gen.kind = "the workspace was destroyed", ArrayFromDestroyedWorkspaceError
        self.arena.release()
        self.destroyed = True
        get_manager().forget(self)

    # ---- a cycle outside the thread's chain of scopes ------------------------------
    def lend(self) -> None:
        """Open a cycle without making this workspace current: for a workspace lent to one array
        whose lifetime does not nest with the scopes around it (kit.nn's activation-gradient
        slots). Only `alloc` carves here; ordinary kit ops keep allocating where they did.
        `take_back()` ends the cycle: its arrays become invalid, as at a scope's exit."""
        self._check_thread("lend")
        if self._open or self._circular or self.destroyed:
            raise WorkspaceScopeError(
                f"workspace {self.name!r}: lend() opens a cycle of a closed, non-circular workspace that is not "
                f"destroyed; this one is {'open' if self._open else 'circular' if self._circular else 'destroyed'}"
            )
        self._open_cycle()
        self.lent_tally = self.tally()  # what a planned training step counts this cycle from

    def take_back(self) -> None:
        """End the cycle `lend()` opened (nothing when it is closed already)."""
        if self._open:
            self._close_cycle()

    # ---- a replayed cycle (kit.nn.replay) ------------------------------------------
    def tally(self) -> tuple[int, int, int, int, int]:
        """(allocations, bytes carved this cycle, the offset now, spills, arenas made): what a
        planned training step reads before and after the cycle it records."""
        return self.allocations, self._cycle_bytes, self.arena.offset, self.spilled_count, self.arena.blocks_made

    def replay_cycle(self, allocations: int, nbytes: int, end: int) -> None:
        """A whole cycle of this closed workspace, never made current: opened, then the carves a
        recorded cycle made counted (`allocations` arrays of `nbytes` in all, aligned, ending at
        offset `end`: allocations, the cycle's bytes, the offset and the peak, as `alloc`'s hits
        would count them), then closed. A replayed training step (kit.nn.replay) counts its
        scopes' cycles here after its arithmetic, on the arena views its recorded cycles were
        given, so the arena holds what those carves would have put there (its valid() made the
        checks `with ws` makes); the counters, the generation and the learning end as a scope's
        would. Not for an open workspace, nor a circular one (its carves land where its write
        pointer is)."""
        if self._open or self._circular:
            raise WorkspaceScopeError(
                f"workspace {self.name!r}: replay_cycle counts a whole cycle of a closed, non-circular workspace; "
                f"this one is {'open' if self._open else 'circular'}: carve in `with ws:` instead"
            )
        self._open_cycle()
        self.allocations += allocations
        self._cycle_bytes += nbytes
        self.arena.offset = end
        if end > self.peak_used:
            self.peak_used = end
        self._close_cycle()

    # ---- reading -------------------------------------------------------------------
    @property
    def is_scope_active(self) -> bool:
        return self._open

    @property
    def used(self) -> int:
        return self.arena.offset

    @property
    def current_cycle(self) -> int:
        """The number of the cycle open now, or of the last one started (1 for the first)."""
        return self._entered

    @property
    def generation(self) -> int:
        return self._entered * 1_000_003 + self._lap

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": str(self.device),
            "thread": self.thread_name,
            "capacity": self.capacity,
            "used": self.arena.offset,
            "peak_used": self.peak_used,
            "spilled_bytes": self.spilled_bytes,
            "spilled_count": self.spilled_count,
            "cycles": self.cycles,
            "allocations": self.allocations,
            "arena_allocations": self.arena_allocations,
            "last_cycle_bytes": self.last_cycle_bytes,
            "max_cycle_bytes": self.max_cycle_bytes,
            "resets": self.resets,
            "open": self._open,
            "destroyed": self.destroyed,
            "circular": self.config.circular,
        }

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else ("open" if self._open else "closed")
        return (
            f"Workspace({self.name!r}, {self.device}, {state}, capacity={self.capacity}, "
            f"used={self.arena.offset}, cycles={self.cycles})"
        )


def get_workspace_for_current_thread(
    config: WorkspaceConfig | None = None, name: str = DEFAULT_ID, device: str | AnyDevice | None = None
) -> Workspace:
    """This thread's workspace `name` on `device` (default: the default device), created with
    `config` if missing. A workspace belongs to one device: the same name on another device is
    another workspace. As in ND4J, the configuration is used only at creation; a different one
    for an existing name is an error here (ND4J ignores it silently)."""
    if not isinstance(name, str) or not name:
        raise WorkspaceConfigError(f"a workspace name is a non-empty string, got {name!r}")
    if config is not None and not isinstance(config, WorkspaceConfig):
        raise WorkspaceConfigError(f"config must be a WorkspaceConfig, got {type(config).__name__}")
    mgr = get_manager()
    dev = as_device(device)
    ws = mgr.get(name, dev)
    if ws is not None:
        if config is not None and config != ws.config:
            raise WorkspaceConfigError(
                f"workspace {name!r} already exists on this thread on {dev.name} with {ws.config}; a different "
                f"config ({config}) needs another name, or destroy() the old one first"
            )
        return ws
    ws = Workspace(config or WorkspaceConfig(), name, dev)
    mgr.workspaces[(name, dev)] = ws
    return ws
