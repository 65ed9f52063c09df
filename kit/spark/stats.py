"""Spark training statistics for offline viewing: phases per round and per executor, JSON, HTML.

DL4J's answer to its training UI clashing with Spark: collect at run time
(`collect_training_stats=True` on the master, then `spark_net.get_training_stats()`), view later,
anywhere (here one round of one worker, written by hand):

    >>> from pathlib import Path
    >>> from kit.spark.stats import SparkTrainingStats, export_stats_html
    >>> stats = SparkTrainingStats("ParameterAveragingTrainingMaster",
    ...     rounds=[{"start": 0.0, "broadcast_ms": 2.0, "job_ms": 40.0, "aggregate_ms": 1.0}],
    ...     workers=[{"worker": 0, "examples": 32, "start": 0.002, "load_ms": 1.5, "get_model_ms": 0.5,
    ...               "fit_ms": 30.0, "export_ms": 0.5}])
    >>> stats.save_json("stats.json")
    >>> stats = SparkTrainingStats.from_json(Path("stats.json").read_text())
    >>> stats.summary()                              # median ms per phase
    {'broadcast_ms': 2.0, 'job_ms': 40.0, 'aggregate_ms': 1.0, 'worker_load_ms': 1.5, 'worker_get_model_ms': 0.5, ...}
    >>> export_stats_html(stats, "stats.html")       # one self-contained page: timeline, medians, rounds

Per round the driver records the broadcast, the Spark job and the aggregation; each worker
(kit.spark.wire's `WorkerStats`) its loading, getting the model, fitting, exporting, allocations,
peak workspace bytes, GC and Spark's `attempt`. `setup["preparations"]` says whether the fit
prepared its data or reused its master's; `retries` add up Spark's retried tasks. Bytes count the
NumPy arrays' `nbytes`, never pickle framing: `broadcast_bytes`, `received_bytes`, `sent_bytes`,
`driver_received_bytes` (after `tree_levels` levels) and `tree_bytes` (moved between executors).
The HTML page is inline SVG and tables: no script, no network.
"""

from __future__ import annotations

import html
import json
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from kit.files import atomic_write

__all__ = ["DRIVER_BYTES", "DRIVER_PHASES", "PHASE_COLORS", "WORKER_PHASES", "SparkTrainingStats", "export_stats_html"]

DRIVER_PHASES = ("broadcast_ms", "job_ms", "aggregate_ms")
DRIVER_BYTES = ("broadcast_bytes", "driver_received_bytes", "partials", "tree_levels", "tree_bytes")
WORKER_PHASES = ("load_ms", "get_model_ms", "fit_ms", "export_ms")
# each phase's colour in export_stats_html's timeline; a chapter that draws the timeline itself uses
# the same colours, so its figure and the exported page read alike
PHASE_COLORS = {
    "broadcast_ms": "#4e79a7",
    "job_ms": "#bab0ac",
    "aggregate_ms": "#e15759",
    "load_ms": "#f28e2b",
    "get_model_ms": "#76b7b2",
    "fit_ms": "#59a14f",
    "export_ms": "#b07aa1",
}


@dataclass
class SparkTrainingStats:
    """What one fit() measured. `setup` holds the preparation (repartition, count, export);
    `rounds` one dict per round (driver side); `workers` one dict per (round, worker)."""

    master: str
    setup: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"master": self.master, "setup": self.setup, "rounds": self.rounds, "workers": self.workers}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=float)

    def save_json(self, path: str | os.PathLike) -> None:
        with atomic_write(path, what="save_json") as f:  # through a link, the old file whole on failure
            f.write(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> SparkTrainingStats:
        data = json.loads(text)
        return cls(data["master"], data.get("setup", {}), data.get("rounds", []), data.get("workers", []))

    def summary(self) -> dict[str, float]:
        """Median milliseconds per phase (driver phases per round, worker phases per task), the
        median bytes and partial results per round, and the executors' largest peak workspace
        bytes and total heap allocations."""
        out: dict[str, float] = {}
        for key in DRIVER_PHASES + DRIVER_BYTES:
            values = [r[key] for r in self.rounds if key in r]
            if values:
                out[key] = statistics.median(values)
        trained = [w for w in self.workers if w.get("examples")]
        for key in (*WORKER_PHASES, "received_bytes", "sent_bytes"):
            values = [w[key] for w in trained if key in w]
            if values:
                out[f"worker_{key}"] = statistics.median(values)
        if trained:
            out["worker_heap_allocations"] = float(sum(w.get("heap_allocations", 0) for w in trained))
            out["worker_peak_workspace_bytes"] = float(max(w.get("peak_workspace_bytes", 0) for w in trained))
            out["worker_gc_calls"] = float(sum(w.get("gc_calls", 0) for w in trained))
        if "prepare_ms" in self.setup:
            out["prepare_ms"] = self.setup["prepare_ms"]
        return out

    def timeline(self) -> list[tuple[str, str, float, float]]:
        """(row, phase, start s, end s) relative to the first round's start: the driver's rounds
        and each executor's phases (laid end to end from the task's start)."""
        if not self.rounds:
            return []
        t0 = min(r["start"] for r in self.rounds)
        bars = []
        for r in self.rounds:
            t = r["start"] - t0
            for key in DRIVER_PHASES:
                d = r.get(key, 0.0) / 1e3
                bars.append(("driver", key, t, t + d))
                t += d
        for w in self.workers:
            if "start" not in w:
                continue
            t = w["start"] - t0
            for key in WORKER_PHASES:
                d = w.get(key, 0.0) / 1e3
                bars.append((f"worker {w['worker']}", key, t, t + d))
                t += d
        return bars


def export_stats_html(stats: SparkTrainingStats, path: str | os.PathLike) -> None:
    """A self-contained HTML page: timeline (inline SVG), phase medians, per-round table."""
    if not isinstance(stats, SparkTrainingStats):
        got = "None (the last fit collected no statistics)" if stats is None else type(stats).__name__
        raise TypeError(
            f"export_stats_html: got {got}, not a SparkTrainingStats; create the training master with "
            "collect_training_stats=True, fit again, then export spark_net.get_training_stats()"
        )
    svg = _timeline_svg(stats.timeline())
    legend = " ".join(
        f'<span style="background:{c};padding:0 8px;margin-right:4px"></span>{k}' for k, c in PHASE_COLORS.items()
    )
    summary = "".join(f"<tr><td>{k}</td><td>{v:,.3f}</td></tr>" for k, v in stats.summary().items())
    cols = ["round", "epoch", "workers", *DRIVER_PHASES, *DRIVER_BYTES]
    table = _table_rows(stats.rounds, cols)
    wcols = ["round", "worker", "pid", "examples", *WORKER_PHASES, "received_bytes", "sent_bytes"]
    wcols += ["heap_allocations", "peak_workspace_bytes"]
    wtable = _table_rows(stats.workers, wcols)
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kit.spark training stats ({html.escape(stats.master)})</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px;
text-align:right}}</style></head><body>
<h1>kit.spark training stats: {html.escape(stats.master)}</h1>
<p>Setup: {html.escape(json.dumps(stats.setup))}</p>
<h2>Timeline</h2><p>{legend}</p>{"".join(svg)}
<h2>Medians (ms, bytes)</h2><table><tr><th>phase</th><th>value</th></tr>{summary}</table>
<h2>Rounds (driver)</h2><table><tr>{"".join(f"<th>{c}</th>" for c in cols)}</tr>{table}</table>
<h2>Executors</h2><table><tr>{"".join(f"<th>{c}</th>" for c in wcols)}</tr>{wtable}</table>
</body></html>
"""
    with atomic_write(path, what="export_stats_html") as f:
        f.write(page)


def _timeline_svg(bars: list[tuple[str, str, float, float]]) -> list[str]:
    """The timeline as inline SVG pieces: a row a lane (the driver first), a bar a phase, a time axis."""
    rows = sorted({b[0] for b in bars}, key=lambda r: (r != "driver", r))
    end = max((b[3] for b in bars), default=1.0) or 1.0
    width, row_h, left = 1000, 22, 90
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left + 10}" height="{row_h * len(rows) + 30}">']
    for i, row in enumerate(rows):
        svg.append(f'<text x="2" y="{i * row_h + 15}" font-size="12">{html.escape(row)}</text>')
    for row, phase, a, b in bars:
        x = left + a / end * width
        w = max((b - a) / end * width, 0.5)
        y = rows.index(row) * row_h + 3
        svg.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 6}" fill="{PHASE_COLORS[phase]}">'
            f"<title>{html.escape(row)} {phase}: {(b - a) * 1e3:.2f} ms</title></rect>"
        )
    axis_y = row_h * len(rows) + 18
    svg.append(f'<text x="{left}" y="{axis_y}" font-size="11">0 s</text>')
    svg.append(f'<text x="{left + width - 40}" y="{axis_y}" font-size="11">{end:.2f} s</text>')
    svg.append("</svg>")
    return svg


def _table_rows(records: list[dict[str, Any]], cols: list[str]) -> str:
    """HTML table rows, one a record, a cell a column (empty where the record has none)."""
    return "".join("<tr>" + "".join(f"<td>{_cell(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in records)


def _cell(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else html.escape(str(v))
