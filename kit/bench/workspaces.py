"""`python -m kit bench workspaces`: one MLP-sized training cycle in three regimes (plain heap,
caching allocator, workspace), interleaved: time per iteration, heap allocations, peak bytes.
"""

from __future__ import annotations

import statistics
import tracemalloc
from collections.abc import Callable
from typing import Any

import kit
from kit.bench.common import device_label
from kit.measurement import measure

__all__ = ["bench_workspaces", "mlp_cycle"]


def mlp_cycle(batch: int = 64, n_in: int = 784, n_hidden: int = 256, n_out: int = 10) -> Callable[[], float]:
    """One MLP training step's array work written with kit ops: forward, softmax
    cross-entropy, backward, SGD update. Returns a function that runs one step."""
    x = kit.rand((batch, n_in))
    y = kit.zeros((batch, n_out))
    y[:, 0] = 1.0
    w1 = kit.randn((n_in, n_hidden)) * 0.05
    w2 = kit.randn((n_hidden, n_out)) * 0.05
    lr = 0.01

    def step() -> float:
        h = (x @ w1).tanh()  # (B, H)
        z = h @ w2  # (B, O)
        e = (z - z.max(axis=1, keepdims=True)).exp()
        p = e / e.sum(axis=1, keepdims=True)  # softmax
        loss = -((p + 1e-9).log() * y).sum() / batch
        dz = (p - y) / batch  # (B, O)
        dw2 = h.T @ dz
        dh = (dz @ w2.T) * (1.0 - h * h)
        dw1 = x.T @ dh
        w1.__isub__(dw1 * lr)
        w2.__isub__(dw2 * lr)
        return float(loss)

    return step


def _regimes() -> dict[str, Callable[[Callable[[], float]], Callable[[], float]]]:
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), "BENCH_MLP")

    def plain(step: Callable[[], float]) -> Callable[[], float]:
        return step

    def in_workspace(step: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            with ws:
                return step()

        return run

    return {"plain": plain, "caching": plain, "workspace": in_workspace}


def _set_regime(name: str) -> None:
    kit.memory.set_max_host_cache(256 << 20 if name == "caching" else 0)
    if kit.current_device().kind == "gpu":  # "plain" turns it off again: nothing leaks into later benchmarks
        kit.memory.set_max_device_cache(512 << 20 if name == "caching" else 0)


_WORKSPACE_COLUMNS = [
    "regime",
    "ms_per_iter",
    "spread",
    "ratio_to_plain",
    "kit_heap_allocs_per_iter",
    "cache_hits_per_iter",
    "peak_traced_kib_per_iter",
    "held_kib",
    "peak_with_held_kib",
]
_TRACED_ITERATIONS = 5  # iterations traced per regime: the memory columns are their medians
_WORKSPACE_NOTES = {
    "ms_per_iter": "milliseconds per training iteration (median of the repeats)",
    "spread": "half the range of the repeats over their median",
    "ratio_to_plain": "this regime's time / plain's within each repeat, then the median over repeats "
    "(not the ratio of the two medians, which mixes repeats)",
    "peak_traced_kib_per_iter": "traced: the most memory allocated at once within one iteration, above what "
    "was allocated before it, as Python's tracemalloc records NumPy's and Python's allocations (median of "
    f"{_TRACED_ITERATIONS} iterations)",
    "held_kib": "memory the regime keeps between iterations, allocated before the iteration and so not in its "
    "traced peak: the caching allocator's cached blocks, the workspace's arena",
    "peak_with_held_kib": "peak traced KiB within one iteration plus the KiB held between iterations",
}
_BLOCK = 10  # steps per timed call: the regime is switched once per block, outside the steps' cost


def bench_workspaces(quick: bool = False, progress: Callable[[int, int, str], Any] | None = None) -> dict[str, Any]:
    """The same MLP step in three regimes, interleaved; each timed repeat lasts at least 0.3 s
    (full) or 0.02 s (quick). `progress`: as in `bench_arrays`."""
    repeats, min_time = (3, 0.02) if quick else (7, 0.3)
    step = mlp_cycle()
    runners = {name: wrap(step) for name, wrap in _regimes().items()}
    timed = _time_regimes(runners, repeats, min_time, progress)
    times = {k: [x / _BLOCK for x in t.seconds] for k, t in timed.items()}
    rows = [_regime_row(name, fn, timed[name], times) for name, fn in runners.items()]
    _set_regime("plain")
    return {
        "benchmark": "workspaces",
        "device": device_label(),
        "repeats": repeats,
        "iterations_per_repeat": timed["plain"].number * _BLOCK,
        "columns": list(_WORKSPACE_COLUMNS),
        "column_notes": dict(_WORKSPACE_NOTES),
        "rows": rows,
        "summary": _workspaces_summary(rows, timed),
    }


def _time_regimes(
    runners: dict[str, Callable[[], float]],
    repeats: int,
    min_time: float,
    progress: Callable[[int, int, str], Any] | None,
) -> dict[str, measure.Timing]:
    """The regimes timed interleaved, each call a block of steps after switching to its regime."""

    def in_regime(name: str, fn: Callable[[], float]) -> Callable[[], None]:
        def run() -> None:
            _set_regime(name)
            for _ in range(_BLOCK):
                fn()

        return run

    return measure.compare(
        {name: in_regime(name, fn) for name, fn in runners.items()},
        min_time=min_time,
        repeats=repeats,
        sync=kit.backend.sync,
        progress=progress,
    )


def _traced_peaks(fn: Callable[[], float], iterations: int = _TRACED_ITERATIONS) -> list[int]:
    """The peak traced bytes within each of a few iterations (all domains: NumPy + Python)."""
    peaks = []
    tracemalloc.start()
    for _ in range(iterations):
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return peaks


def _held_bytes(name: str) -> int:
    """The memory a regime keeps between iterations, which a per-iteration trace does not see."""
    if name == "caching":
        return sum(kit.memory.cache_stats()["cached_bytes"].values())
    if name == "workspace":
        return kit.get_workspace_for_current_thread(name="BENCH_MLP").capacity
    return 0


def _regime_row(
    name: str, fn: Callable[[], float], timing: measure.Timing, times: dict[str, list[float]]
) -> dict[str, Any]:
    """One regime's row: its time against plain's, and the allocations, cache hits and memory of an iteration."""
    _set_regime(name)
    fn()
    before_allocs = kit.memory.heap_allocations(this_thread=True)
    hits0 = kit.memory.cache_stats()["hits"]
    peaks = _traced_peaks(fn)
    held = _held_bytes(name)
    return {
        "regime": name,
        "ms_per_iter": statistics.median(times[name]) * 1e3,
        "spread": timing.spread,
        "ratio_to_plain": statistics.median(t / p for t, p in zip(times[name], times["plain"])),
        # the lowest and highest of those per-repeat ratios: the goal line and chapter 2 read them
        "ratio_to_plain_range": _ratio_range(times[name], times["plain"]),
        "kit_heap_allocs_per_iter": (kit.memory.heap_allocations(this_thread=True) - before_allocs) / len(peaks),
        "cache_hits_per_iter": (kit.memory.cache_stats()["hits"] - hits0) / len(peaks),
        "peak_traced_kib_per_iter": statistics.median(peaks) / 1024,
        "held_kib": held / 1024,
        "peak_with_held_kib": (statistics.median(peaks) + held) / 1024,
        # every timed repeat and the machine's load while timed: error bars, and kit.prose's
        # verdict (a measure.Timing rebuilt from them gives the same flags as the table)
        "ms_repeats": [x * 1e3 for x in times[name]],
        "load": timing.load,
    }


def _ratio_range(times: list[float], base: list[float]) -> list[float]:
    """The lowest and highest of the ratios taken within each repeat (`times[i] / base[i]`)."""
    ratios = [t / p for t, p in zip(times, base)]
    return [min(ratios), max(ratios)]


def _workspaces_summary(rows: list[dict[str, Any]], timed: dict[str, measure.Timing]) -> dict[str, Any]:
    """The workspace's capacity and peak use, the time and allocation goals, the timings' warnings."""
    ws_stats = kit.get_workspace_for_current_thread(name="BENCH_MLP").stats()
    by = {r["regime"]: r for r in rows}
    warnings = sorted({w for t in timed.values() for w in t.warnings})
    return {
        "workspace_capacity_bytes": ws_stats["capacity"],
        "workspace_peak_used_bytes": ws_stats["peak_used"],
        "goal_time": measure.goal(
            "workspace time / plain time",
            by["workspace"]["ratio_to_plain"],
            "<=",
            1.0,
            "",
            not (timed["plain"].warnings or timed["workspace"].warnings),  # the two timings it reads
            per_repeat=tuple(by["workspace"]["ratio_to_plain_range"]),
        ),
        "goal_allocations": measure.goal(
            "heap allocations per iteration in the workspace", by["workspace"]["kit_heap_allocs_per_iter"], "<=", 0
        ),
        "warnings": "; ".join(warnings) or "none",
    }
