"""A memory timeline: every allocation and release, in every workspace and on the heap, while it records.

    >>> import kit
    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.nn import mlp
    >>> train, _ = load_digits()
    >>> net = mlp(64, hidden=(32,), n_out=10)
    >>> with kit.memory_timeline() as tl:                  # records on every thread until the block ends
    ...     _ = net.fit(ArrayIterator(train, 64), epochs=1)
    >>> sorted(tl.events[0])
    ['array_type', 'cycle', 'device', 'kind', 'nbytes', 'offset', 'thread', 'time', 'workspace']
    >>> acts = next(r for r in tl.summary() if (r["workspace"] or "").endswith("WS_ALL_LAYERS_ACT"))
    >>> acts["cycles"], acts["spills"] > 0                 # one cycle per iteration; the first one spilled
    (23, True)
    >>> fig = tl.plot()                                    # the last cycle of the busiest workspace, bar by bar
    >>> path = tl.save_trace("fit.json")                   # open in chrome://tracing or ui.perfetto.dev

Each event is a dict of one `kind` (`MemoryTimeline` describes them), "replay" among them: an answer
replayed at the kernel seam (kit.nn.replay); a training step runs its layers while a timeline records,
so its allocations are all here. Threads are told apart by identity, never merged by name.

Why it costs nothing when off: the allocation sites read `kit.state.STATE.recorder` once and
record only when it is set (kit.ndarray's fast paths take the allocate_heap path while it records).
On, every event takes a lock and builds a dict: do not time a workload while it records. One
timeline records at a time.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np

from kit.core import memory
from kit.monitor.timeline_views import FIELDS, TimelineError, TimelineViews
from kit.state import STATE

if TYPE_CHECKING:
    from kit.core.backend import RawArray
    from kit.core.devices import AnyDevice
    from kit.workspaces.workspace import Workspace

__all__ = ["KINDS", "MemoryTimeline", "TimelineError", "memory_timeline"]

KINDS = ("alloc", "release", "spill", "reset", "replay")
_slot = threading.Lock()  # guards STATE.recorder: one timeline at a time


class _Typing(threading.local):
    array_type: str | None = None  # set while LayerWorkspaceMgr.create runs on this thread


class MemoryTimeline(TimelineViews):
    """Records allocations while it is the active recorder (`with tl:` or start()/stop()).

    Each event is a dict: `time` (seconds since the timeline started, perf_counter), `thread` (its
    name; a later thread of a name seen already is "name #2", "name #3", ...), `device`, `workspace`
    (its name, numbered the same way for another workspace of a name its thread had; None: the
    heap), `cycle` (the workspace's cycle number; None on the heap), `offset` (bytes from the
    arena start; None on the heap and for a spill), `nbytes`, `array_type` (ND4J's ArrayType name
    -- INPUT, ACTIVATIONS, ACTIVATION_GRAD, FF_WORKING_MEM, BP_WORKING_MEM, UPDATER_WORKING_MEM -- for
    an array a layer asked its LayerWorkspaceMgr for; None otherwise), and `kind`:

    - "alloc": carved from an arena (nbytes: what the bump pointer moved, aligned to 64 bytes, so the
      allocs and spills of a cycle add up to the workspace's `last_cycle_bytes`), or a heap allocation
      (nbytes: the array's; a workspace's arena is itself one of these);
    - "spill": a workspace allocation that did not fit and went to the heap (nbytes aligned as above);
    - "reset": the write pointer back to 0 (nbytes: the bytes it gave back at once): a scoped
      workspace's cycle ending, or a circular one wrapping around (a circular workspace's cycles end
      without one, as in ND4J); they number the workspace's `resets`;
    - "release": host heap memory freed -- a NumPy array that owns its memory collected while the
      timeline records, on the thread that dropped the last reference. Not recorded: blocks handed
      back to kit's cache, and GPU memory (a CuPy view does not keep its base alive, so a collection
      proves nothing). Workspace arrays are never released one by one: their cycle's reset frees them.

    `cycles` holds one dict per workspace cycle (start and end times, bytes, spilled bytes, capacity).
    """

    def __init__(self) -> None:
        self._rows: list[tuple] = []  # FIELDS, in that order
        self._cycle_rows: list[dict[str, Any]] = []
        self._starts: dict[tuple[int, int], float] = {}  # (id(workspace), cycle) -> start time
        self._live: dict[int, tuple] = {}  # id(weakref) -> (weakref, device, workspace, cycle, nbytes, type)
        self._lock = threading.RLock()  # re-entrant: a release can be recorded inside a record (GC)
        self._typing = _Typing()
        # each thread's and each workspace's label: its name, or "name #2", "name #3" ... for a later
        # one of a name taken already, so two threads called "worker" (or a workspace made again under
        # its old name) are two rows, never merged (keyed by the object, unique among all labels)
        self._labels: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
        self._issued: set[tuple[str, str]] = set()  # ("thread" or a thread's label, label)
        self._t0 = 0.0
        self.recording = False
        self._used = False

    # ---- on and off ----------------------------------------------------------------
    def start(self) -> MemoryTimeline:
        with _slot:
            if self._used:
                raise TimelineError("this timeline has recorded already; make a new one with kit.memory_timeline()")
            if STATE.recorder is not None:
                raise TimelineError(
                    "another memory timeline is recording; stop it first (one records at a time, and it "
                    "already sees every thread)"
                )
            self._used = True
            self._t0 = perf_counter()
            self.recording = True
            memory.set_recorder(self)
        return self

    def stop(self) -> MemoryTimeline:
        with _slot:
            if STATE.recorder is self:
                memory.set_recorder(None)
        with self._lock:
            self.recording = False
            self._live.clear()  # arrays still alive keep no reference to the timeline
            self._starts.clear()
        return self

    def __enter__(self) -> MemoryTimeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the hooks (called by kit.memory, kit.workspace and LayerWorkspaceMgr) -------
    def _add(
        self,
        device: str,
        workspace: str | None,
        cycle: int | None,
        offset: int | None,
        nbytes: int,
        kind: str,
        array_type: str | None,
        thread: str | None = None,
    ) -> None:
        with self._lock:
            if self.recording:
                thread = thread or self._thread_label()
                row = (perf_counter() - self._t0, thread, device, workspace, cycle, offset, nbytes, array_type, kind)
                self._rows.append(row)

    def _thread_label(self) -> str:
        """This thread's label in the timeline."""
        t = threading.current_thread()
        return self._label(t, t.name, "thread")

    def _label(self, obj: object, name: str, kind: str) -> str:
        """`obj`'s label: `name`, or `name #2`, `name #3` ... when another object has it already."""
        with self._lock:
            label = self._labels.get(obj)
            if label is None:
                label, n = name, 1
                while (kind, label) in self._issued:
                    n += 1
                    label = f"{name} #{n}"
                self._issued.add((kind, label))
                self._labels[obj] = label
            return label

    def _watch(
        self, data: RawArray, device: str, workspace: str | None, cycle: int | None, nbytes: int, array_type: str | None
    ) -> None:
        """Record a release when `data` is collected (host arrays that own their memory only)."""
        if data.__class__ is not np.ndarray or data.base is not None:
            return
        ref = weakref.ref(data, self._released)
        with self._lock:
            if self.recording:  # a release is the allocating thread's row (the collector may be a dying thread)
                self._live[id(ref)] = (ref, device, workspace, cycle, nbytes, array_type, self._thread_label())

    def _released(self, ref: weakref.ref) -> None:
        info = self._live.pop(id(ref), None)
        if info is not None:
            _, device, workspace, cycle, nbytes, array_type, thread = info
            self._add(device, workspace, cycle, None, nbytes, "release", array_type, thread)

    def heap(self, result: tuple[RawArray, object], device: AnyDevice, nbytes: int) -> None:
        """A heap allocation by kit.memory.allocate_heap, `result` being (array, owner)."""
        array_type = self._typing.array_type
        self._add(device.name, None, None, None, nbytes, "alloc", array_type)
        self._watch(result[0], device.name, None, None, nbytes, array_type)

    def arena(self, ws: Workspace, arena: RawArray, nbytes: int) -> None:
        """A workspace's arena: one heap allocation, untyped."""
        self._add(ws.device.name, None, None, None, nbytes, "alloc", None)
        self._watch(arena, ws.device.name, None, None, nbytes, None)

    def carve(self, ws: Workspace, offset: int, nbytes: int) -> None:
        self._add(ws.device.name, self._ws(ws), ws.current_cycle, offset, nbytes, "alloc", self._typing.array_type)

    def spill(self, ws: Workspace, data: RawArray, nbytes: int) -> None:
        array_type = self._typing.array_type
        self._add(ws.device.name, self._ws(ws), ws.current_cycle, None, nbytes, "spill", array_type)
        self._watch(data, ws.device.name, self._ws(ws), ws.current_cycle, nbytes, array_type)

    def reset(self, ws: Workspace) -> None:
        self._add(ws.device.name, self._ws(ws), ws.current_cycle, 0, ws.used, "reset", None)

    def _ws(self, ws: Workspace) -> str:
        """A workspace's label: its name, "name #2" for another workspace object of that name on its thread."""
        return self._label(ws, ws.name, self._thread_label())  # numbered among this thread's workspaces

    def replay(self, device: AnyDevice, nbytes: int) -> None:
        """A step replayed at the kernel seam on `nbytes` of arrays it allocated when recorded."""
        self._add(device.name, None, None, None, nbytes, "replay", None)

    def cycle_start(self, ws: Workspace) -> None:
        if self.recording:
            self._starts[(id(ws), ws.current_cycle)] = perf_counter() - self._t0

    def cycle_end(self, ws: Workspace) -> None:
        """Called as a cycle ends, before a scoped workspace's offset goes back to 0."""
        start = self._starts.pop((id(ws), ws.current_cycle), None)
        if not ws.config.circular:
            self.reset(ws)
        with self._lock:
            thread = self._thread_label()
        cycle = {
            "workspace": self._ws(ws),
            "thread": thread,
            "device": ws.device.name,
            "cycle": ws.current_cycle,
            "start": start,  # None: the cycle began before the timeline did
            "end": perf_counter() - self._t0,
            "bytes": ws.last_cycle_bytes,
            "spilled_bytes": ws.cycle_spilled_bytes,
            "capacity": ws.capacity,
        }
        with self._lock:
            if self.recording:
                self._cycle_rows.append(cycle)

    def array_type(self) -> str | None:
        return self._typing.array_type

    @contextlib.contextmanager
    def typed(self, name: str) -> Iterator[None]:
        """Allocations on this thread inside the block are of ArrayType `name`."""
        self._typing.array_type = name
        try:
            yield
        finally:
            self._typing.array_type = None

    # ---- reading -------------------------------------------------------------------
    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event so far, oldest first, as dicts with the keys in FIELDS."""
        with self._lock:
            rows = sorted(self._rows, key=lambda r: r[0])
        return [dict(zip(FIELDS, r, strict=True)) for r in rows]

    @property
    def cycles(self) -> list[dict[str, Any]]:
        """One dict per workspace cycle that ended while recording, in the order they ended."""
        with self._lock:
            return [dict(c) for c in self._cycle_rows]


def memory_timeline() -> MemoryTimeline:
    """A timeline that records from `with` (or start()) until the block ends (or stop())."""
    return MemoryTimeline()
