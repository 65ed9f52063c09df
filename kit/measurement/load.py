"""Machine load: how much of the CPU other processes took while kit measured (kit.measure's first
reason to flag a timing), read from psutil's machine-wide busy time minus this process's own.

    >>> from kit.measurement.load import machine_load
    >>> with machine_load() as load:
    ...     _ = sum(range(10_000))
    >>> 0.0 <= load.others <= 1.0
    True
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

from kit.measurement import tables

__all__ = ["LOAD_LIMIT", "LoadMeter", "LoadReading", "format_load", "machine_load", "unchecked_note"]

LOAD_LIMIT = 0.2  # fraction of the machine's CPU time other processes may use before a result is flagged


def format_load(load: float) -> str:
    """Other processes' share of the CPU as printed, on the right side of `LOAD_LIMIT` (a flagged
    20.04 % reads `20.04%`, never `20%`: kit.tables.percent)."""
    return tables.percent(load, LOAD_LIMIT)


def _busy_seconds() -> float:
    c = psutil.cpu_times()
    # guest time is already inside user; steal is time the hypervisor gave to someone else
    return sum(getattr(c, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_seconds() -> float:
    """CPU seconds of this process itself, all its threads. Never its children's: `children_user`
    / `children_system` jump by a child's whole lifetime when it is reaped, time the machine's
    busy figure only partly (or never) saw inside the block, so subtracting them hid other load."""
    t = os.times()
    return t.user + t.system


@dataclass
class LoadReading:
    """Other processes' CPU use during a block, as a fraction of the whole machine (0..1)."""

    cores: int = field(default_factory=lambda: psutil.cpu_count() or 1)
    wall: float = 0.0
    others: float = 0.0  # fraction of cores x wall used by other processes
    own: float = 0.0  # fraction used by this process (all its threads; its children count in `others`)

    @property
    def busy_cores(self) -> float:
        """Cores' worth of other processes' work (0.5 = half a core busy on average)."""
        return self.others * self.cores


@contextmanager
def machine_load(children_are_ours: bool = False) -> Iterator[LoadReading]:
    """`with machine_load() as load: ...` then `load.others` (fraction of the machine other
    processes used while the block ran; child processes count as other processes, reaped or not).

    `children_are_ours=True` counts this process's descendants as its own work: for a workload
    that runs in them (Spark's JVM and its Python workers, a process pool), whose CPU would
    otherwise read as other processes' load and flag every timing. A descendant that ends inside
    the block counts as this process's work where this process or a descendant reaps it (a
    subprocess run and waited for), and one nobody of the tree reaps (an orphan, the workers
    PySpark forks under TorchDistributor) by its last reading, taken every 0.2 s: `TreeSampler`."""
    if children_are_ours:
        with _load_with_descendants() as reading:
            yield reading
        return
    reading, meter = LoadReading(), LoadMeter()
    try:
        yield reading
    finally:
        meter.fill(reading)


class LoadMeter:
    """`machine_load` without a with-block: other processes' CPU use from the meter's creation to
    each `read()`, for what lives across calls (a live panel, from its first tick to its close)."""

    def __init__(self) -> None:
        self._busy0, self._own0, self._t0 = _busy_seconds(), _own_seconds(), time.perf_counter()

    def read(self) -> LoadReading:
        return self.fill(LoadReading())

    def fill(self, reading: LoadReading) -> LoadReading:
        wall = time.perf_counter() - self._t0
        busy, own = _busy_seconds() - self._busy0, _own_seconds() - self._own0
        capacity = max(wall * reading.cores, 1e-9)
        reading.wall = wall
        reading.own = min(1.0, max(0.0, own / capacity))
        # /proc/stat ticks at 10 ms: short blocks read coarsely, never below zero
        reading.others = min(1.0, max(0.0, (busy - own) / capacity))
        return reading


def unchecked_note(reading: LoadReading) -> str:
    """What a one-run timing shown live (a panel) can and cannot be read for: it was not repeated,
    so it has no spread, and the machine's load while it ran, flagged above `LOAD_LIMIT`."""
    note = f"one run, not repeated: other processes used {format_load(reading.others)} of the CPU while it ran"
    if reading.others > LOAD_LIMIT:
        return note + " (machine busy: flagged, read no time from it)"
    return note + "; kit.measure's repeated timings say how much a time can vary"


def _tree_seconds(me: psutil.Process) -> dict[int, tuple[float, float]]:
    """(own CPU seconds, reaped children's CPU seconds) of this process and each live descendant, by pid."""
    seconds = {}
    for p in (me, *me.children(recursive=True)):
        try:
            t = p.cpu_times()
            seconds[p.pid] = (t.user + t.system, t.children_user + t.children_system)
        except psutil.Error:
            continue
    return seconds


def tree_work(before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]) -> float:
    """CPU seconds this process and its descendants spent between two `_tree_seconds` readings.
    The live ones' own time, plus what they reaped (the kernel adds a reaped child's whole life,
    and its reaped descendants', to its parent's children time), less what those reaped ones had
    used before the first reading. A descendant nobody of the tree reaps is not counted (others')."""
    live = sum(own - before.get(pid, (0.0, 0.0))[0] for pid, (own, _) in after.items())
    reaped = sum(kids - before.get(pid, (0.0, 0.0))[1] for pid, (_, kids) in after.items())
    earlier = sum(own + kids for pid, (own, kids) in before.items() if pid not in after)
    return max(0.0, live + reaped - earlier)


class TreeSampler:
    """Each descendant's CPU seconds, read every `period` seconds from a thread, by (pid, start
    time): a process that ends where none of the tree reaps it keeps its last reading. Reaping
    alone misses those: an orphan that init reaps, a child of a parent that ignores SIGCHLD (the
    kernel reaps it and adds its time to nobody; PySpark's forked workers end so under
    TorchDistributor). `stop()` gives the descendants' seconds since the sampler started, less
    what each ran after its last reading (under `period`) and any that lived under `period`."""

    def __init__(self, me: psutil.Process, period: float = 0.2) -> None:
        self._me, self._period = me, period
        self._seen: dict[tuple[int, float], psutil.Process] = {}  # read on after they leave the tree
        self._first: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._read(born_before=True)
        self._thread = threading.Thread(target=self._run, name="kit-load-tree", daemon=True)
        self._thread.start()

    def _read(self, born_before: bool = False) -> None:
        for p in self._me.children(recursive=True):
            try:
                self._seen.setdefault((p.pid, p.create_time()), p)
            except psutil.Error:
                continue
        for key, p in list(self._seen.items()):
            try:
                if not p.is_running():  # ended, or its pid names another process now (start time)
                    raise psutil.NoSuchProcess(p.pid)
                t = p.cpu_times()
            except psutil.Error:
                del self._seen[key]
                continue
            self._first.setdefault(key, t.user + t.system if born_before else 0.0)
            self._last[key] = t.user + t.system

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._read()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=10.0)
        self._read()
        return sum(last - self._first[key] for key, last in self._last.items())


@contextmanager
def _load_with_descendants() -> Iterator[LoadReading]:
    """Two readings of the tree's work, each short of the truth in its own way (reaping misses
    what nobody of the tree reaps; sampling misses the last moments and the shortest lives):
    the larger is taken, so others' load is never read as smaller than it was."""
    reading = LoadReading()
    me = psutil.Process()
    before, own0 = _tree_seconds(me), _own_seconds()
    sampler = TreeSampler(me)
    busy0, t0 = _busy_seconds(), time.perf_counter()
    try:
        yield reading
    finally:
        reading.wall = time.perf_counter() - t0
        busy = _busy_seconds() - busy0
        sampled = sampler.stop() + _own_seconds() - own0
        own = max(tree_work(before, _tree_seconds(me)), sampled)
        capacity = max(reading.wall * reading.cores, 1e-9)
        reading.own = min(1.0, max(0.0, own / capacity))
        reading.others = min(1.0, max(0.0, (busy - own) / capacity))


# ---------------------------------------------------------------------------------------
# one variant's timing
