"""`python -m kit bench arrays`: each kit op beside the same raw NumPy/CuPy op, on 100 elements (the
per-op overhead) and 1,000,000 elements (where the op dominates), interleaved in every repeat.

The summary's goals are medians over ops, with the range the same median takes repeat by repeat
(`measure.goal(per_repeat=...)`): where that range lies on both sides of a goal, the line says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import kit
from kit.bench.common import device_label
from kit.measurement import measure

__all__ = ["bench_arrays", "flagged_figures"]


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
    summary = _arrays_summary(rows, load.others)
    return {
        "benchmark": "arrays",
        "device": device_label(),
        "repeats": repeats,
        "min_time_s": min_time,
        "columns": list(_ARRAY_COLUMNS),
        "column_notes": dict(_ARRAY_NOTES),
        "rows": rows,
        "summary": summary,
        # the summary's figures computed from a row kit.measure flagged: printed "(flagged)" (kit.goals)
        "summary_flagged": flagged_figures(rows),
    }


def flagged_figures(rows: list[dict[str, Any]]) -> list[str]:
    """The summary's figures that read a flagged row: the small-op figures when a row on 100
    elements is flagged, the large-op overhead when one of the large rows it reads is (the rule of
    the goal lines, `_arrays_summary`)."""
    small_rows, large_rows = _small_and_large(rows)
    out = []
    if not all(r["reliable"] == "yes" for r in small_rows):
        out += ["small_added_us_median", "small_added_us_max"]
    if not all(r["reliable"] == "yes" for r in large_rows):
        out.append("large_overhead_pct_median")
    return out


def _small_and_large(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows on 100 elements, and the large rows an overhead is read from (a view costs the same
    at any size, so it has no place in a large-array overhead figure)."""
    small = [r for r in rows if r["elements"] == 100]
    large = [r for r in rows if r["elements"] != 100 and r["op"] != "slice view"]
    return small, large


def _arrays_summary(rows: list[dict[str, Any]], others: float) -> dict[str, Any]:
    """The added microseconds on small arrays, the overhead on large ones, the machine's load, the
    goals. Each goal's figure is a median over ops of each op's median over repeats; beside it, the
    range over repeats of the same median over ops taken repeat by repeat (`per_repeat`), so a
    verdict the noise could turn is printed as such."""
    small_rows, large_rows = _small_and_large(rows)
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
