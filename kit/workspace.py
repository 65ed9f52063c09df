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
    kit.workspace.ArrayFromClosedScopeError: add: this array (shape (64, 10), float32) lives in workspace 'LOOP' ...
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
"""

from __future__ import annotations

import enum
import math
import sys
import threading
from dataclasses import dataclass
from threading import get_ident as _get_ident
from typing import Any

import numpy as np

from kit import memory
from kit.context import (
    current_workspace,
    resolve,
    scope_out_of_workspaces,
    set_current_workspace,
    suspended_between,
)
from kit.devices import AnyDevice, as_device
from kit.state import STATE

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

ALIGNMENT = 64  # bytes: a cache line, and enough for AVX-512 loads (ND4J aligns to 16)
DEFAULT_ID = "DefaultWorkspace"


class AllocationPolicy(enum.Enum):
    STRICT = "STRICT"  # exactly the learned/initial size
    OVERALLOCATE = "OVERALLOCATE"  # size * (1 + overallocation_limit)


class LearningPolicy(enum.Enum):
    NONE = "NONE"
    FIRST_LOOP = "FIRST_LOOP"
    OVER_TIME = "OVER_TIME"


class SpillPolicy(enum.Enum):
    FAIL = "FAIL"
    EXTERNAL = "EXTERNAL"
    REALLOCATE = "REALLOCATE"


class ResetPolicy(enum.Enum):
    BLOCK_LEFT = "BLOCK_LEFT"  # scoped: offsets reset when the scope is left
    ENDOFBUFFER_REACHED = "ENDOFBUFFER_REACHED"  # circular: reset when the end is reached


class DebugMode(enum.Enum):
    DISABLED = "DISABLED"
    SPILL_EVERYTHING = "SPILL_EVERYTHING"  # every allocation spills; no learning
    BYPASS_EVERYTHING = "BYPASS_EVERYTHING"  # workspaces do nothing: all on the heap


# ---------------------------------------------------------------------------------------
# errors


class WorkspaceError(RuntimeError):
    """Base of every workspace error."""


class WorkspaceConfigError(WorkspaceError, ValueError):
    """An invalid WorkspaceConfig value."""


class StaleArrayError(WorkspaceError):
    """An array was used after the workspace memory it lives in moved on."""


class ArrayFromClosedScopeError(StaleArrayError):
    """ND4J's 'leaked workspace pointer': the array's cycle ended when its scope closed."""


class ArrayFromOldCycleError(StaleArrayError):
    """ND4J's 'outdated workspace pointer': the workspace was reopened since."""


class ArrayFromDestroyedWorkspaceError(StaleArrayError):
    """The workspace was destroyed and its arena released."""


class ArrayOverwrittenError(StaleArrayError):
    """A circular workspace wrapped around and overwrote the array's memory."""


class WorkspaceFullError(WorkspaceError, MemoryError):
    """SpillPolicy.FAIL and the arena is full."""


class WorkspaceThreadError(WorkspaceError):
    """A workspace was used from a thread that does not own it."""


class WorkspaceScopeError(WorkspaceError):
    """Scopes closed out of order, or a workspace used after destroy."""


class NoSuchWorkspaceError(WorkspaceError, KeyError):
    """leverage_to(name) named a workspace this thread does not have open."""


# ---------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class WorkspaceConfig:
    """ND4J's WorkspaceConfiguration, with its defaults. Sizes in bytes."""

    initial_size: int = 0
    min_size: int = 0
    max_size: int = 0  # 0: no cap
    overallocation_limit: float = 0.3
    policy_allocation: AllocationPolicy = AllocationPolicy.OVERALLOCATE
    policy_learning: LearningPolicy = LearningPolicy.FIRST_LOOP
    policy_spill: SpillPolicy = SpillPolicy.EXTERNAL
    policy_reset: ResetPolicy = ResetPolicy.BLOCK_LEFT
    cycles_before_initialization: int = 0

    def __post_init__(self) -> None:
        for field in ("initial_size", "min_size", "max_size", "cycles_before_initialization"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise WorkspaceConfigError(f"WorkspaceConfig.{field}={value!r}: must be a whole number >= 0")
        for field, enum_type in (
            ("policy_allocation", AllocationPolicy),
            ("policy_learning", LearningPolicy),
            ("policy_spill", SpillPolicy),
            ("policy_reset", ResetPolicy),
        ):
            value = getattr(self, field)
            if not isinstance(value, enum_type):
                try:
                    object.__setattr__(self, field, enum_type(str(value).upper()))
                except ValueError:
                    names = ", ".join(m.name for m in enum_type)
                    raise WorkspaceConfigError(f"WorkspaceConfig.{field}={value!r}: use one of {names}") from None
        lim = self.overallocation_limit
        if not isinstance(lim, (int, float)) or isinstance(lim, bool) or not math.isfinite(lim) or lim < 0:
            raise WorkspaceConfigError(f"WorkspaceConfig.overallocation_limit={lim!r}: must be a finite number >= 0")
        if self.max_size and self.min_size > self.max_size:
            raise WorkspaceConfigError(
                f"WorkspaceConfig: min_size={self.min_size} is larger than max_size={self.max_size}"
            )
        if self.policy_learning is LearningPolicy.OVER_TIME and self.cycles_before_initialization < 1:
            raise WorkspaceConfigError(
                "WorkspaceConfig: LearningPolicy.OVER_TIME needs cycles_before_initialization >= 1 "
                f"(got {self.cycles_before_initialization}); the arena is sized after that many cycles"
            )
        if self.circular and self.policy_allocation is AllocationPolicy.OVERALLOCATE and lim < 1.0:
            raise WorkspaceConfigError(
                f"WorkspaceConfig: a circular workspace (ENDOFBUFFER_REACHED) with OVERALLOCATE needs "
                f"overallocation_limit >= 1.0 (ND4J's rule: room for at least two cycles), got {lim}"
            )

    @property
    def circular(self) -> bool:
        return self.policy_reset is ResetPolicy.ENDOFBUFFER_REACHED


# ---------------------------------------------------------------------------------------
# generations: one object per (cycle, lap); arrays hold it, ops compare it by identity


class _Generation:
    __slots__ = ("cycle", "ended", "kind", "lap", "sites")

    def __init__(self, cycle: int, lap: int) -> None:
        self.cycle, self.lap = cycle, lap
        self.ended: str | None = None  # how it ended, for the error message
        self.kind: type[StaleArrayError] | None = None
        self.sites: list[tuple[int, int, str]] | None = None  # (start, end, "file:line") in debug


STATE.debug_mode = DebugMode.DISABLED  # the process-wide debug mode and allocation-site tracking live in STATE
_thread = STATE.thread  # this thread's slots: .ws (the current workspace), .manager


def set_debug_mode(mode: DebugMode | str) -> None:
    """ND4J's workspace debug modes, process-wide: DISABLED, SPILL_EVERYTHING, BYPASS_EVERYTHING."""
    if not isinstance(mode, DebugMode):
        try:
            mode = DebugMode(str(mode).upper())
        except ValueError:
            raise WorkspaceConfigError(
                f"debug mode {mode!r}: use one of {', '.join(m.name for m in DebugMode)}"
            ) from None
    STATE.debug_mode = mode


def get_debug_mode() -> DebugMode:
    return STATE.debug_mode


def track_allocation_sites(enabled: bool = True) -> None:
    """Debug switch: remember where (file:line) each workspace array was allocated, and
    print it in stale-array errors. Costs a stack walk per allocation."""
    STATE.track_sites = bool(enabled)


def _caller_site() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("kit"):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _address(data: Any) -> int:
    if isinstance(data, np.ndarray):
        return int(data.__array_interface__["data"][0])
    return int(data.data.ptr)


# ---------------------------------------------------------------------------------------


class Workspace:
    """One arena on one device, owned by one thread. Use `with ws:` for each cycle."""

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
        self.parent: Workspace | None = None
        self._arena: Any = None
        self._views: dict[tuple, Any] = {}
        self._base = 0
        self.capacity = 0
        self._offset = 0
        self._open = False
        self._tag = 0  # re-entrant scope depth beyond the first
        self._bypassed: list[bool] = []
        self.destroyed = False
        self.cycles = 0  # completed cycles
        self._entered = 0  # started cycles
        self._lap = 0
        self._gen = _Generation(0, 0)
        self._cycle_bytes = 0
        self.max_cycle_bytes = 0
        self.last_cycle_bytes = 0
        self.peak_used = 0
        self.allocations = 0
        self.spilled_bytes = 0
        self.spilled_count = 0
        self.cycle_spilled_bytes = 0
        self.arena_allocations = 0
        self.resets = 0
        self._initialized = False
        self._learned_cycle_bytes = 0
        self._ring_block = 0
        if config.initial_size > 0:
            size = config.initial_size
            if config.policy_allocation is AllocationPolicy.OVERALLOCATE:
                size = int(size * (1 + config.overallocation_limit))
            if config.max_size:
                size = min(size, config.max_size)
            self._allocate_arena(size)
            self._initialized = True
        with STATE.lock:
            STATE.workspaces.add(self)

    # ---- the arena -----------------------------------------------------------------
    def _allocate_arena(self, nbytes: int) -> None:
        nbytes = -(-int(nbytes) // ALIGNMENT) * ALIGNMENT
        with self.physical.activate():
            arena = self.physical.xp.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        pad = (-_address(arena)) % ALIGNMENT  # start the arena on an aligned address
        self._arena = arena[pad : pad + nbytes]
        self._views = {}
        self._base = _address(self._arena)
        self.capacity = nbytes
        self.arena_allocations += 1
        memory.count(self.physical, nbytes + ALIGNMENT)
        if STATE.recorder is not None:  # the arena is one heap allocation
            STATE.recorder.arena(self, arena, nbytes + ALIGNMENT)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[Any, Workspace]:
        """Carve an array from the arena (or spill, as the policy says)."""
        off = self._offset
        # A cyclic workload asks for the same (offset, shape, dtype) every cycle: reuse the view
        # made last time (same memory, so same semantics; 3x cheaper than carving). The views
        # are dropped whenever the arena is replaced, so a hit always lies inside this arena.
        hit = self._views.get((off, shape, dtype))
        if hit is not None and STATE.debug_mode is DebugMode.DISABLED:
            data, size = hit
            self._offset = end = off + size
            self.allocations += 1
            self._cycle_bytes += size
            if end > self.peak_used:
                self.peak_used = end
            if STATE.track_sites:
                self._remember_site(self._base + off, size)
            if STATE.recorder is not None:
                STATE.recorder.carve(self, off, size)
            return data, self
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:  # an empty array holds no memory: nothing to carve
            self.allocations += 1
            if STATE.recorder is not None:
                STATE.recorder.carve(self, off, 0)
            with self.physical.activate():
                return self.physical.xp.empty(shape, dtype), self
        size = (nbytes + ALIGNMENT - 1) & -ALIGNMENT
        self.allocations += 1
        self._cycle_bytes += size
        if off + size <= self.capacity and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            self._offset = end = off + size
            if end > self.peak_used:
                self.peak_used = end
            data = self._arena[off : off + nbytes].view(dtype).reshape(shape)
            if len(self._views) >= 8192:
                self._views.clear()
            self._views[(off, shape, dtype)] = (data, size)
            if STATE.track_sites:
                self._remember_site(self._base + off, nbytes)
            if STATE.recorder is not None:
                STATE.recorder.carve(self, off, size)
            return data, self
        if self._circular and 0 < size <= self.capacity and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            self._wrap_around()
            self.allocations -= 1  # counted again by the retry
            self._cycle_bytes -= size
            return self.alloc(shape, dtype)
        return self._spill(shape, dtype, nbytes, size), self

    def _spill(self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int, size: int) -> Any:
        if self.config.policy_spill is SpillPolicy.FAIL and STATE.debug_mode is not DebugMode.SPILL_EVERYTHING:
            self._cycle_bytes -= size
            self.allocations -= 1
            raise WorkspaceFullError(
                f"workspace {self.name!r} is full: {nbytes} bytes for an array of shape {shape} ({dtype}) do not "
                f"fit ({self._offset} of {self.capacity} bytes used) and SpillPolicy.FAIL forbids spilling; "
                f"raise initial_size/max_size, or use SpillPolicy.EXTERNAL or REALLOCATE"
            )
        self.spilled_bytes += size
        self.cycle_spilled_bytes += size
        self.spilled_count += 1
        memory.count(self.physical, nbytes)
        with self.physical.activate():
            data = self.physical.xp.empty(shape, dtype)
        if STATE.track_sites:
            self._remember_site(_address(data), nbytes)
        if STATE.recorder is not None:
            STATE.recorder.spill(self, data, size)
        return data

    def _remember_site(self, address: int, nbytes: int) -> None:
        if self._gen.sites is None:
            self._gen.sites = []
        self._gen.sites.append((address, address + max(nbytes, 1), _caller_site()))

    def _wrap_around(self) -> None:
        """Circular buffer: the write pointer returns to 0; arrays from the previous lap stay
        valid until the pointer passes them."""
        self._retire(f"circular workspace wrapped around in cycle {self._entered}", ArrayOverwrittenError)
        if STATE.recorder is not None:
            STATE.recorder.reset(self)
        self._lap += 1
        self._gen = _Generation(self._entered, self._lap)
        self._offset = 0
        self.resets += 1

    def _retire(self, how: str, kind: type[StaleArrayError]) -> None:
        self._gen.ended = how
        self._gen.kind = kind

    # ---- scopes --------------------------------------------------------------------
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
        self._open = True
        self._entered += 1
        if not self._circular:
            self._offset = 0
            self._gen = _Generation(self._entered, self._lap)
        elif self._gen.cycle == 0:
            self._gen.cycle = self._entered
        self._cycle_bytes = 0
        self.cycle_spilled_bytes = 0
        if STATE.recorder is not None:
            STATE.recorder.cycle_start(self)
        return self

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
        out_of_order = current is not self
        if out_of_order:  # e.g. a generator that yielded inside `with ws:` dropped while another is open:
            self._unlink_from(current)  # close it anyway, so it is not left open for good, then say so
            # only suspended generators' scope_out_of_workspaces blocks above: they are not this
            # scope's doing, and they resolve to what is current below them (now self.parent)
            out_of_order = not suspended_between(current, self.parent)
        else:
            _thread.ws = self.parent
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
            self._gen = _Generation(0, self._lap)
            self._offset = 0
            self.resets += 1
        if self._realloc or not self._initialized:
            self._learn()
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

    def _learn(self) -> None:
        cfg = self.config
        if STATE.debug_mode is DebugMode.SPILL_EVERYTHING:
            return
        if not self._initialized:
            if cfg.policy_learning is LearningPolicy.FIRST_LOOP or (
                cfg.policy_learning is LearningPolicy.OVER_TIME and self.cycles >= cfg.cycles_before_initialization
            ):
                self.initialize()
        elif self._realloc and not self._circular:
            # ND4J grows only when currentSize > 0, so an arena learned from an empty first
            # cycle stays empty and spills forever; kit grows it too
            if self.max_cycle_bytes > self.capacity:
                self.initialize()
        elif self._realloc:
            # ND4J's "trimmed mode" (Nd4jWorkspace.alloc / initializeWorkspace): a ring learned
            # from small first cycles (a prefetch queue whose first batch was short) grows when a
            # cycle outgrows its block, the learned cycle x 1.3, instead of lapping live data; a
            # cycle that fits the block keeps the learned ring
            if self.max_cycle_bytes > self._ring_block:
                self.initialize()

    def initialize(self) -> None:
        """Size the arena from the largest cycle seen (ND4J initializeWorkspace)."""
        cfg = self.config
        size = self.max_cycle_bytes
        self._learned_cycle_bytes = size
        if cfg.max_size:
            size = min(size, cfg.max_size)
        if cfg.circular:
            size = int(size * 1.3)
            self._ring_block = size  # ND4J's initialBlockSize: one cycle's room, before overallocation
        if cfg.policy_allocation is AllocationPolicy.OVERALLOCATE:
            size = int(size * (1 + cfg.overallocation_limit))
        size = max(size, cfg.min_size)
        if cfg.max_size:  # ND4J's init(): the cap holds after over-allocation too; the arena is whole
            size = min(size, cfg.max_size - cfg.max_size % ALIGNMENT)  # aligned blocks, never past the cap
        self._initialized = True
        if size > self.capacity:
            if self._open:
                raise WorkspaceScopeError(f"workspace {self.name!r}: initialize() inside its own scope")
            if not cfg.circular:
                self._retire("the arena was reallocated", ArrayFromOldCycleError)
                self._gen = _Generation(0, self._lap)
            # circular: arrays handed out earlier keep the old block alive and nothing will
            # write there again, so they stay valid; new ones start at the new arena's front
            self._arena = None
            self._offset = 0
            self._allocate_arena(size)

    def destroy(self) -> None:
        """Release the arena. Every array in it becomes invalid."""
        self._check_thread("destroy")
        if self._open:
            raise WorkspaceScopeError(f"workspace {self.name!r} is open: leave its scope before destroying it")
        self._retire("the workspace was destroyed", ArrayFromDestroyedWorkspaceError)
        self._gen = _Generation(-1, self._lap)
        self._gen.ended, self._gen.kind = "the workspace was destroyed", ArrayFromDestroyedWorkspaceError
        self._arena = None
        self._views = {}
        self.capacity = 0
        self.destroyed = True
        get_manager()._forget(self)

    # ---- validity (called by NDArray when an array's generation is not current) ---
    def _still_valid(self, arr: Any) -> bool:
        g = arr._gen
        if g is self._gen and not self.destroyed:
            return True
        if not self.config.circular or self.destroyed or g.lap != self._lap - 1 or g.kind is not ArrayOverwrittenError:
            return False
        start = _address(arr._data) - self._base
        if not 0 <= start < self.capacity:  # a spill: heap memory nobody reuses this lap
            return True
        return start >= self._offset  # the new lap has not reached it yet

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
            where = _address(arr._data)
            site = next((s for a, b, s in reversed(g.sites) if a <= where < b), None)
            if site:
                msg += f" It was allocated at {site}."
        elif not STATE.track_sites:
            msg += " (kit.workspace.track_allocation_sites(True) adds where it was allocated.)"
        raise kind(msg)

    # ---- reading -------------------------------------------------------------------
    @property
    def is_scope_active(self) -> bool:
        return self._open

    @property
    def used(self) -> int:
        return self._offset

    @property
    def generation(self) -> int:
        return self._entered * 1_000_003 + self._lap

    def cycle_of(self, gen: _Generation) -> int:
        return gen.cycle

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": str(self.device),
            "thread": self.thread_name,
            "capacity": self.capacity,
            "used": self._offset,
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
            f"used={self._offset}, cycles={self.cycles})"
        )


# ---------------------------------------------------------------------------------------
# the per-thread manager (ND4J's BasicWorkspaceManager keeps a ThreadLocal map)


class _Manager:
    """One thread's workspaces, keyed by (name, device): a workspace belongs to one device, so
    "STEP" on cpu:0 and "STEP" on cpu:1 are two arenas (ND4J binds a thread to one device; kit's
    threads may use several, so the device is part of the key)."""

    def __init__(self) -> None:
        self.workspaces: dict[tuple[str, str], Workspace] = {}

    def get(self, name: str, device: AnyDevice) -> Workspace | None:
        return self.workspaces.get((name, device.name))

    def named(self, name: str) -> list[Workspace]:
        """This thread's workspaces called `name`, on any device."""
        return [ws for (n, _), ws in self.workspaces.items() if n == name]

    def _forget(self, ws: Workspace) -> None:
        key = (ws.name, ws.device.name)
        if self.workspaces.get(key) is ws:
            del self.workspaces[key]


def get_manager() -> _Manager:
    mgr = _thread.manager
    if mgr is None:
        mgr = _thread.manager = _Manager()
    return mgr


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
    mgr.workspaces[(name, dev.name)] = ws
    return ws


def destroy_all_workspaces_for_current_thread() -> int:
    """Destroy every workspace of this thread, on every device (they must all be closed). Returns how many."""
    mgr = get_manager()
    open_ones = [f"{ws.name} ({ws.device.name})" for ws in mgr.workspaces.values() if ws.is_scope_active]
    if open_ones:
        raise WorkspaceScopeError(f"cannot destroy workspaces that are open: {open_ones}; leave their scopes first")
    victims = list(mgr.workspaces.values())
    for ws in victims:
        ws.destroy()
    return len(victims)


@STATE.on_reset
def _close_and_destroy_this_threads_workspaces() -> None:
    """kit.state.reset(): this thread's workspaces, open or not, are closed and destroyed."""
    for ws in list(get_manager().workspaces.values()):
        ws._open = False
    destroy_all_workspaces_for_current_thread()


def leverage_target(name: str, enforce_existence: bool = False, device: AnyDevice | None = None) -> Workspace | None:
    """The open workspace `name` on `device` (default: the default device) of this thread that
    leverage_to copies into, or None (ND4J: the array stays where it is) unless
    `enforce_existence` asks for an error. A workspace of that name on another device is never
    the target: an array is not copied between devices by leverage_to."""
    dev = as_device(device)
    mgr = get_manager()
    target = mgr.get(name, dev) or next((ws for ws in mgr.named(name) if ws.physical is dev.physical), None)
    if target is None or not target.is_scope_active:
        if enforce_existence:
            elsewhere = [ws.device.name for ws in mgr.named(name) if ws.physical is not dev.physical]
            state = "does not exist" if target is None else "is not open"
            where = (
                f" (it exists on {', '.join(elsewhere)}: leverage_to copies within a device; .to({elsewhere[0]!r}) "
                f"copies the array to {elsewhere[0]}, into its workspace when that is the current one)"
                if elsewhere
                else ""
            )
            raise NoSuchWorkspaceError(
                f"leverage_to({name!r}): workspace {name!r} {state} on {dev.name} on this thread{where}"
            )
        return None
    return target


def parent_of_current_workspace() -> Workspace | None:
    """The workspace that was current when the current one was opened (leverage's target)."""
    current = current_workspace()
    parent = current.parent if current is not None else None
    return resolve(parent) if parent is not None else None  # through a suspended generator's block


def all_workspaces() -> list[Workspace]:
    """Every live workspace of every thread (for panels and stats)."""
    with STATE.lock:
        return [ws for ws in list(STATE.workspaces) if not ws.destroyed]
