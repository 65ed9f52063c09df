"""Training listeners: DL4J's score and performance lines, a JSON-lines stats recorder, a live
notebook dashboard and a tqdm progress bar.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.training.listeners import PerformanceListener, ScoreIterationListener, StatsRecorder
    >>> from kit.nn import mlp
    >>> train, test = load_digits()
    >>> net, it = mlp(64, hidden=(32,), n_out=10), ArrayIterator(train, 64)   # 23 iterations an epoch
    >>> net.fit(it, epochs=2, listeners=[ScoreIterationListener(20),
    ...                                  PerformanceListener(20, report_score=True),
    ...                                  StatsRecorder("run.jsonl")])
    Score at iteration 20 is ...
    ETL: ... ms; iteration 20; iteration time: ... ms; samples/sec: ...; batches/sec: ...; score: ...; GC: ...
    Score at iteration 40 is ...
    ETL: ... ms; iteration 40; iteration time: ... ms; samples/sec: ...; batches/sec: ...; score: ...; GC: ...
    <kit.nn.network.Network object at 0x...>
    >>> records = StatsRecorder.read("run.jsonl")        # plot later: collect while training, look after
    >>> len(records), sorted(records[0])
    (46, ['batch_size', 'epoch', 'etl_ms', 'iteration', 'iteration_ms', 'score', 'time'])

The listener protocol and its numbering are kit.nn.loop's (DL4J's), the same on every path;
`worker` names the replica that reports when several train at once (ParallelWrapper).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
from tqdm.auto import tqdm

from kit.core import memory
from kit.core.arguments import whole
from kit.files import write_target
from kit.monitor import readings
from kit.monitor.widgets import TrainingPanel, WorkerPanel

if TYPE_CHECKING:
    from kit.nn.network import Network

__all__ = [
    "PerformanceListener",
    "ProgressBarListener",
    "ScoreIterationListener",
    "StatsRecorder",
    "TrainingDashboard",
    "TrainingListener",
    "WorkerTimingPanel",
]


class TrainingListener:
    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        pass

    def on_fit_start(self, model: Network) -> None:
        pass

    def on_epoch_start(self, model: Network, epoch: int) -> None:
        pass

    def on_epoch_end(self, model: Network, epoch: int) -> None:
        pass


def _every(where: str, name: str, value: object) -> int:
    """Every `value` iterations: a whole number (DL4J's rule: <= 0 means 1), never a truncated 2.5."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool) and value <= 0:
        return 1
    return whole(where, name, value, what=" (<= 0 means every iteration)")


class ScoreIterationListener(TrainingListener):
    """Every `frequency` iterations: `Score at iteration N is S` (DL4J's line; <= 0 means 1).
    A network with a loss scaler (kit.nn.mixed) adds `(loss scale 65536, 0 skipped steps)`."""

    def __init__(self, frequency: int = 10, stream: TextIO | None = None) -> None:
        self.frequency = _every("ScoreIterationListener", "frequency", frequency)
        self.stream = stream
        self.lines: list[str] = []

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        if iteration % self.frequency == 0:
            worker = f"[{info['worker']}] " if info.get("worker") is not None else ""
            line = f"{worker}Score at iteration {iteration} is {info.get('score', model.last_score)}"
            scaler = getattr(model, "loss_scaler", None)
            if scaler is not None:
                line += f" (loss scale {scaler.scale:g}, {scaler.skipped_steps} skipped steps)"
            self.lines.append(line)
            _write_line(self.stream, line)


class _GcCounter:
    """Python's own GC activity (DL4J reports the JVM collectors'): collections and time."""

    def __init__(self) -> None:
        self.collections = 0
        self.seconds = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.collections += 1
            self.seconds += time.perf_counter() - self._t0


class PerformanceListener(TrainingListener):
    """DL4J's PerformanceListener line, every `frequency` iterations:

    `ETL: 0 ms; iteration 16; iteration time: 65 ms; samples/sec: 492.308; batches/sec: 15.384; score: ...; GC: ...`

    The iteration time is measured since the previous iteration (so one line describes one
    iteration); ETL is the time spent waiting for the batch."""

    def __init__(
        self,
        frequency: int = 1,
        report_score: bool = False,
        report_gc: bool = True,
        report_etl: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.frequency = whole("PerformanceListener", "frequency", frequency)
        self.report_score = report_score
        for name, flag in (("report_score", report_score), ("report_gc", report_gc), ("report_etl", report_etl)):
            if not isinstance(flag, bool):  # "no" is a true string
                raise TypeError(f"PerformanceListener({name}={flag!r}): True or False")
        self.report_gc, self.report_etl = report_gc, report_etl
        self.stream = stream
        self.lines: list[str] = []
        self.records: list[dict[str, float]] = []
        self._last: float | None = None
        self._gc = _GcCounter()
        self._gc_installed = False

    def on_fit_start(self, model: Network) -> None:
        self._last = time.perf_counter()
        if self.report_gc and not self._gc_installed:
            gc.callbacks.append(self._gc)
            self._gc_installed = True

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._last = now
            return
        seconds, self._last = now - self._last, now
        batch = info.get("batch_size", 0)
        record = {
            "iteration": iteration,
            "etl_ms": float(getattr(model, "last_etl_ms", 0.0)),
            "iteration_ms": seconds * 1e3,
            "samples_per_sec": batch / seconds if seconds > 0 else 0.0,
            "batches_per_sec": 1 / seconds if seconds > 0 else 0.0,
            "score": float(info.get("score", float("nan"))),
            "gc_collections": self._gc.collections,
            "gc_ms": self._gc.seconds * 1e3 + memory.gc_stats()["seconds"] * 1e3,
        }
        self.records.append(record)
        if iteration % self.frequency:
            return
        parts = []
        if info.get("worker") is not None:
            parts.append(f"Device: [{info['worker']}]; ")
        if self.report_etl:
            parts.append(f"ETL: {_ms(record['etl_ms'])} ms; ")
        parts.append(f"iteration {iteration}; ")
        parts.append(f"iteration time: {_ms(record['iteration_ms'])} ms; ")
        parts.append(f"samples/sec: {record['samples_per_sec']:.3f}; ")
        parts.append(f"batches/sec: {record['batches_per_sec']:.3f}; ")
        if self.report_score:
            parts.append(f"score: {record['score']};")
        if self.report_gc:
            parts.append(f" GC: [python gc: {record['gc_collections']} ({record['gc_ms']:.0f}ms)];")
        line = "".join(parts).rstrip()
        self.lines.append(line)
        _write_line(self.stream, line)

    def close(self) -> None:
        if self._gc_installed:
            gc.callbacks.remove(self._gc)
            self._gc_installed = False

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: gc may be gone
            pass


def _ms(value: float) -> str:
    """Whole milliseconds as DL4J prints them, with decimals below 10 ms (kit's small models)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.3f}"


class StatsRecorder(TrainingListener):
    """Append one JSON object per iteration to a file (score, timing, memory); read it back
    with `StatsRecorder.read(path)`. Collect at run time, look later."""

    def __init__(self, path: str | os.PathLike, frequency: int = 1, memory_every: int = 10) -> None:
        self.path = os.fspath(write_target(path, "StatsRecorder"))  # a missing folder is said now, not at fit
        self.frequency = _every("StatsRecorder", "frequency", frequency)
        self.memory_every = _every("StatsRecorder", "memory_every", memory_every)
        self._file: TextIO | None = None
        self._last = time.perf_counter()

    def on_fit_start(self, model: Network) -> None:
        self._last = time.perf_counter()

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        if iteration % self.frequency:
            return
        record: dict[str, Any] = {
            "time": time.time(),
            "iteration": iteration,
            "epoch": epoch,
            "score": float(info.get("score", float("nan"))),
            "iteration_ms": seconds * 1e3,
            "etl_ms": float(getattr(model, "last_etl_ms", 0.0)),
            "batch_size": info.get("batch_size"),
        }
        if info.get("worker") is not None:
            record["worker"] = info["worker"]
        if iteration % self.memory_every == 0:
            record["heap_allocations"] = memory.heap_allocations()
            record["rss_bytes"] = readings.rss_bytes()
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def on_epoch_end(self, model: Network, epoch: int) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @staticmethod
    def read(path: str | os.PathLike) -> list[dict[str, Any]]:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class TrainingDashboard(TrainingPanel):
    """A live panel for notebooks (kit.widgets.TrainingPanel): loss, progress and memory in one
    throttled panel, closed into a static final state when an epoch ends; plain text lines
    outside a kernel."""

    def __init__(self, total_iterations: int | None = None, interval: float = 0.3, widgets: bool | None = None) -> None:
        super().__init__(total_iterations, interval=interval, widgets=widgets)

    def on_epoch_end(self, model: Network, epoch: int | None = None) -> None:
        super().on_epoch_end(model, epoch)
        self.close()


class WorkerTimingPanel(WorkerPanel):
    """One row per worker of a ParallelWrapper (kit.widgets.WorkerPanel): iterations, median
    step time and rate, under one bar for the whole run's `total_iterations`."""


class ProgressBarListener(TrainingListener):
    """A tqdm bar over iterations (tqdm.auto: a widget in notebooks, text elsewhere)."""

    def __init__(self, total: int | None = None, **tqdm_kw: object) -> None:
        self.bar = tqdm(total=total, unit="it", **tqdm_kw)

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        self.bar.update(1)
        self.bar.set_postfix(score=f"{info.get('score', float('nan')):.4f}", epoch=epoch, refresh=False)

    def close(self) -> None:
        self.bar.close()


def _write_line(stream: TextIO | None, line: str) -> None:
    """A listener's report line, on its stream (stdout by default), flushed at once."""
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()
