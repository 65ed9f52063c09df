"""Benchmarks behind `python -m kit bench NAME`: ratios taken side by side, medians of repeats.

    python -m kit bench arrays       # kit op vs the same raw NumPy/CuPy op, small and large
    python -m kit bench workspaces   # plain vs caching allocator vs workspace, MLP-sized cycle
    python -m kit bench train        # training steps: kit vs NumPy (vs PyTorch), modes, ETL
    python -m kit bench parallel     # ParallelWrapper 1 vs 2 workers, averaging frequency, inference
    python -m kit bench spark        # what a Spark round costs, beside Network.fit
    python -m kit bench d2l          # d2l's ResNet-18 on Fashion-MNIST, 10 epochs, kit beside PyTorch
    python -m kit bench precision    # float32, float16 and mixed precision: bytes, step time, accuracy

`BENCHMARKS` names each with its one-line description (what `bench -h` lists). Timings are never
asserted in tests (shared, noisy machines); each benchmark interleaves the variants in every
repeat, so drift hits them alike, and reports the median. `--json FILE` writes the result with
the run's environment (`common.run_metadata`: versions, UTC time, git commit); its directory is
checked before the benchmark starts (`check_json_path`).
"""

from __future__ import annotations

import json
import os
import statistics
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kit
from kit import measure, tables
from kit.bench.common import device_label, run_metadata
from kit.bench.d2l import bench_d2l
from kit.bench.parallel import bench_parallel
from kit.bench.precision import bench_precision
from kit.bench.spark import bench_spark
from kit.bench.train import bench_train

__all__ = [
    "BENCHMARKS",
    "OutputPathError",
    "bench_arrays",
    "bench_workspaces",
    "check_json_path",
    "format_result",
    "mlp_cycle",
    "run",
    "write_json",
]


# ---------------------------------------------------------------------------------------


def _array_rows(dev: Any, size: int, min_time: float, repeats: int, stages: _Stages) -> list[dict[str, Any]]:
    a, b = kit.rand((size,)), kit.rand((size,))
    ra, rb = a.data, b.data
    xp = dev.xp
    m = kit.rand((10, size // 10))
    rm = m.data
    cases = {
        "add": (lambda: a + b, lambda: ra + rb),
        "multiply by scalar": (lambda: a * 2.0, lambda: ra * 2.0),
        "exp": (lambda: a.exp(), lambda: xp.exp(ra)),
        "sum": (lambda: a.sum(), lambda: ra.sum()),
        "max over axis 1": (lambda: m.max(axis=1), lambda: rm.max(axis=1)),
        "slice view": (lambda: a[1:-1], lambda: ra[1:-1]),
        "compare": (lambda: a > b, lambda: ra > rb),
    }
    rows = []
    for op, (kit_fn, raw_fn) in cases.items():
        step = stages.stage(f"{op}, {size:,} elements")
        t = measure.compare(
            {"kit": kit_fn, "raw": raw_fn}, min_time=min_time, repeats=repeats, sync=kit.backend.sync, progress=step
        )
        ratios = [k / r for k, r in zip(t["kit"].seconds, t["raw"].seconds)]
        added = [(k - r) * 1e6 for k, r in zip(t["kit"].seconds, t["raw"].seconds)]
        warnings = t["kit"].warnings + t["raw"].warnings
        rows.append(
            {
                "op": op,
                "elements": size,
                "raw_us": t["raw"].median * 1e6,
                "kit_us": t["kit"].median * 1e6,
                "added_us": statistics.median(added),
                "ratio": statistics.median(ratios),
                "spread": max(t["kit"].spread, t["raw"].spread),
                "reliable": "yes" if not warnings else "NO",
                "warnings": warnings,  # in the JSON; the summary says what they were
                "ratio_per_repeat": ratios,  # each repeat's figures (in the JSON): the goals' ranges
                "added_us_per_repeat": added,
            }
        )
    return rows


class _Stages:
    """Several compare() runs in a row reported as one progress: steps counted on across them."""

    def __init__(self, progress: Callable[[int, int, str], Any] | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def stage(self, what: str) -> Callable[[int, int, str], Any] | None:
        if self.progress is None:
            return None
        base = self.done

        def report(done: int, steps: int, note: str) -> None:
            self.done = base + done
            self.progress(self.done, self.total, f"{what}: {note}")

        return report


_ARRAY_COLUMNS = ["op", "elements", "raw_us", "kit_us", "added_us", "ratio", "spread", "reliable"]
_ARRAY_NOTES = {
    "raw_us": "the raw NumPy/CuPy op, microseconds per call (median of the repeats)",
    "kit_us": "the same op through kit, microseconds per call (median of the repeats)",
    "added_us": "kit minus raw within each repeat, then the median over repeats "
    "(not the difference of the two medians, which mixes two repeats)",
    "ratio": "kit / raw within each repeat, then the median over repeats (not the ratio of the two medians)",
    "spread": "half the range of the repeats over their median, the wider of kit's and raw's",
    "reliable": "NO when kit.measure flagged either timing (machine busy, spread too wide)",
}


def bench_arrays(quick: bool = False, progress: Callable[[int, int, str], Any] | None = None) -> dict[str, Any]:
    """Each variant is timed for at least `min_time` per repeat (0.2 s full, 0.01 s quick), kit and
    raw interleaved; 100 elements (per-op overhead) and 1,000,000 elements (the op dominates).
    `progress`: a `kit.widgets.Progress` (or any `progress(done, total, note)`)."""
    dev = kit.current_device()
    repeats, min_time = (3, 0.01) if quick else (5, 0.2)
    per_timing = 2 * (2 + repeats)  # 2 variants x (warm-up, calibration, repeats)
    stages = _Stages(progress, 2 * 7 * per_timing)  # 2 sizes x 7 ops (tests/test_cli.py checks the count)
    with measure.machine_load() as load:
        rows = []
        for size in (100, 1_000_000):
            rows += _array_rows(dev, size, min_time, repeats, stages)
    return {
        "benchmark": "arrays",
        "device": device_label(),
        "repeats": repeats,
        "min_time_s": min_time,
        "columns": list(_ARRAY_COLUMNS),
        "column_notes": dict(_ARRAY_NOTES),
        "rows": rows,
        "summary": _arrays_summary(rows, load.others),
    }


def _arrays_summary(rows: list[dict[str, Any]], others: float) -> dict[str, Any]:
    """The added microseconds on small arrays, the overhead on large ones, the machine's load, the
    goals. Each goal's figure is a median over ops of each op's median over repeats; beside it, the
    range over repeats of the same median over ops taken repeat by repeat (`per_repeat`), so a
    verdict the noise could turn is printed as such."""
    small_rows = [r for r in rows if r["elements"] == 100]
    # a view costs the same at any size, so it has no place in a large-array overhead figure
    large_rows = [r for r in rows if r["elements"] != 100 and r["op"] != "slice view"]
    small = statistics.median(r["added_us"] for r in small_rows)
    large_pct = (statistics.median(r["ratio"] for r in large_rows) - 1) * 100
    small_each = _per_repeat([r["added_us_per_repeat"] for r in small_rows])
    large_each = [(m - 1) * 100 for m in _per_repeat([r["ratio_per_repeat"] for r in large_rows])]
    # each goal is as reliable as the rows it reads: a flagged small-op row does not flag the large-op goal
    small_ok = all(r["reliable"] == "yes" for r in small_rows)
    large_ok = all(r["reliable"] == "yes" for r in large_rows)
    small_range, large_range = (min(small_each), max(small_each)), (min(large_each), max(large_each))
    small_goal = ("added per small op (median)", small, "<=", 1.5, "µs", small_ok, small_range)
    large_goal = ("overhead on large ops (median)", large_pct, "<=", 2, "%", large_ok, large_range)
    return {
        "small_added_us_median": small,
        "small_added_us_max": max(r["added_us"] for r in small_rows),
        "large_overhead_pct_median": large_pct,
        "machine_load_by_others": round(others, 4),  # a fraction of the machine, 0..1 (printed as %)
        "goal_small": measure.goal(*small_goal),
        "goal_large": measure.goal(*large_goal),
        "warnings": _warnings_summary(rows),
    }


def _per_repeat(each_op: list[list[float]]) -> list[float]:
    """The median over ops within each repeat: one figure per repeat (every op has as many)."""
    return [statistics.median(values) for values in zip(*each_op, strict=True)]


def _warnings_summary(rows: list[dict[str, Any]]) -> str:
    """What flagged the rows, each kind of reason once, with how many rows it flagged (a reason's
    own figures, the spread or the load, differ row by row: they are in each row's warnings)."""
    counts: dict[str, int] = {}
    for r in rows:
        reasons = {_reason_kind(w) for w in r["warnings"]}
        for w in reasons:
            counts[w] = counts.get(w, 0) + 1
    return "; ".join(f"{w} ({n} of {len(rows)} rows)" for w, n in counts.items()) or "none"


def _reason_kind(warning: str) -> str:
    if warning.startswith("spread"):
        return f"a spread wider than ±{measure.SPREAD_LIMIT:.0%}"
    if warning.startswith("machine busy"):
        return f"machine busy (other processes used more than {measure.LOAD_LIMIT:.0%} of the CPU)"
    return warning


# ---------------------------------------------------------------------------------------


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
_WORKSPACE_NOTES = {
    "ms_per_iter": "milliseconds per training iteration (median of the repeats)",
    "spread": "half the range of the repeats over their median",
    "ratio_to_plain": "this regime's time / plain's within each repeat, then the median over repeats "
    "(not the ratio of the two medians, which mixes repeats)",
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


def _traced_peaks(fn: Callable[[], float], iterations: int = 5) -> list[int]:
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
        "kit_heap_allocs_per_iter": (kit.memory.heap_allocations(this_thread=True) - before_allocs) / 5,
        "cache_hits_per_iter": (kit.memory.cache_stats()["hits"] - hits0) / 5,
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


# ---------------------------------------------------------------------------------------


BENCHMARKS: dict[str, tuple[Callable[[bool], dict[str, Any]], str]] = {
    "arrays": (bench_arrays, "kit op vs the same raw NumPy/CuPy op, on 100 and 1,000,000 elements"),
    "workspaces": (bench_workspaces, "one MLP step: plain vs caching allocator vs workspace (time, allocations)"),
    "train": (bench_train, "training steps: kit vs hand-written NumPy (vs PyTorch), workspace modes, data"),
    "parallel": (bench_parallel, "ParallelWrapper 1 vs 2 workers, averaging frequency; ParallelInference"),
    "spark": (bench_spark, "bytes and time a Spark round costs, beside Network.fit (needs PySpark, Java)"),
    "d2l": (bench_d2l, "d2l's ResNet-18 on Fashion-MNIST, 10 epochs, kit beside PyTorch (meant for a GPU)"),
    "precision": (bench_precision, "float32, float16 and mixed precision: bytes per cycle, step time, accuracy"),
}


def run(name: str, quick: bool = False) -> dict[str, Any]:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}: {', '.join(BENCHMARKS)}")
    bench, _ = BENCHMARKS[name]
    return bench(quick)


def _cells(result: dict[str, Any]) -> list[list[str]]:
    """Each row's values as printed: a spread as kit.measure prints it, a number with separators."""
    show = lambda c, v: measure.format_spread(v) if c == "spread" and isinstance(v, float) else tables.number(v)  # noqa: E731
    return [[show(c, row[c]) for c in result["columns"]] for row in result["rows"]]


# the summary's keys as a reader reads them under the HTML table (the JSON and the text form keep the keys)
SUMMARY_WORDS = {
    "small_added_us_median": "added per small op, median (µs)",
    "small_added_us_max": "added per small op, largest (µs)",
    "large_overhead_pct_median": "overhead on large ops, median (%)",
    "machine_load_by_others": "load by other processes while timed",
    "goal_small": "goal for small ops",
    "goal_large": "goal for large ops",
    "goal_time": "goal for time",
    "goal_allocations": "goal for allocations",
    "workspace_capacity_bytes": "workspace capacity (bytes)",
    "workspace_peak_used_bytes": "workspace peak used (bytes)",
}


def _summary(result: dict[str, Any], words: bool = False) -> list[str]:
    """The summary's lines; a machine's load printed on the right side of its limit. `words`: each
    key as words (`SUMMARY_WORDS`, else `kit.tables.header`), as the HTML table's notes show it."""

    def name(k: str) -> str:
        return SUMMARY_WORDS.get(k) or tables.header(k) if words else k

    return [
        f"{name(k)}: "
        f"{measure.format_load(v) if k.startswith('machine_load') and isinstance(v, float) else tables.number(v)}"
        for k, v in result["summary"].items()
    ]


def format_result(result: dict[str, Any]) -> str:
    cols = result["columns"]
    lines = [f"benchmark {result['benchmark']} on {result['device']} (median of {result['repeats']} repeats)"]
    cells = _cells(result)
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    lines += [f"  {c}: {note}" for c, note in result.get("column_notes", {}).items()]  # one definition each
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    lines += _summary(result)
    return "\n".join(lines)


def result_table(result: dict[str, Any]) -> tables.Table:
    """`format_result`'s table as a `kit.tables.Table`: an HTML table in a notebook (a wide one
    scrolls instead of wrapping), the column definitions and the summary as notes under it."""
    cols = result["columns"]
    cells = _cells(result)
    notes = [f"{tables.header(c)}: {note}" for c, note in result.get("column_notes", {}).items()]  # as headed
    notes += _summary(result, words=True)
    flag = "reliable" if "reliable" in cols else None
    text = [c for c in cols[:1]]
    title = f"benchmark {result['benchmark']} on {result['device']} (median of {result['repeats']} repeats)"
    return tables.Table(list(cols), cells, notes, title, flag, text)


class OutputPathError(ValueError):
    """`--json FILE` names a file that cannot be written; said before the benchmark runs."""


def check_json_path(path: str | os.PathLike[str]) -> Path:
    """The JSON file a benchmark will write, checked now (a benchmark can take minutes): its
    directory must exist and be writable, and the path must not be a directory."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise OutputPathError(
            f"--json {str(path)!r} is a directory; give a file in it, e.g. --json {target / 'bench.json'}"
        )
    if not folder.is_dir():
        raise OutputPathError(
            f"--json {str(path)!r}: the directory {str(folder)!r} does not exist; "
            f"create it first (mkdir -p {folder}) or write the file somewhere that exists"
        )
    if not os.access(folder, os.W_OK):
        raise OutputPathError(f"--json {str(path)!r}: the directory {str(folder)!r} is not writable; choose another")
    return target


def write_json(result: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """The result and the run's environment (versions, UTC time, git commit) under "run".
    Atomic write: a temporary file renamed over the target."""
    target = check_json_path(path)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({**result, "run": run_metadata()}, f, indent=2)
    os.replace(tmp, target)
