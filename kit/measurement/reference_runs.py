"""Reading reference runs: the JSON reports `scripts/gpu-check` writes on a GPU machine, shipped in
`kit/data/reference_runs/` (`reference_runs`), a figure inside one (`lookup`, with the path
syntax kit.reference explains), the label a column shows for a run (`run_label`), and the chapter
figures a run recorded (`chapter_figure`, `chapter_mode`).

    >>> report = {"machine": {"gpu": "NVIDIA H100", "date": "2026-12-01T10:00:00+00:00"},
    ...           "parts": {"bench": {"rows": [{"regime": "plain", "ms": 0.31}]}}}
    >>> lookup(report, "bench.rows[regime=plain].ms"), run_label(report)
    (0.31, 'NVIDIA H100 (2026-12-01)')
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["chapter_figure", "chapter_mode", "lookup", "reference_runs", "run_label", "run_labels"]

_STEP = re.compile(r"([^.\[\]]+)|\[([^\]=]+)=([^\]]*)\]|\[(-?\d+)\]")


def reference_runs(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """The reference reports, oldest first (by their machine's date): every `*.json` in `directory`,
    by default the package's `kit/data/reference_runs/` read through importlib.resources."""
    if directory is None:
        folder: Any = resources.files("kit.data").joinpath("reference_runs")
    else:
        folder = Path(directory)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"reference runs: {str(folder)!r} is not a directory; pass the folder that holds the reports"
            )
    if not folder.is_dir():
        return []
    runs = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            report = json.loads(entry.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"reference run {entry.name}: not valid JSON ({exc}); copy gpu-check's report unchanged"
            ) from None
        if not isinstance(report, dict) or not isinstance(report.get("machine"), dict) or "parts" not in report:
            raise ValueError(
                f"reference run {entry.name}: expected a gpu-check report with 'machine' and 'parts', "
                f"found keys {sorted(report) if isinstance(report, dict) else type(report).__name__}"
            )
        report.setdefault("file", entry.name)
        runs.append(report)
    return sorted(runs, key=lambda r: str(r["machine"].get("date", "")))


def lookup(report: dict[str, Any], path: str) -> Any:
    """The value at `path` inside `report["parts"]`, or None where the report has no such value."""
    value: Any = report.get("parts", {})
    pos = 0
    while pos < len(path):
        if path[pos] == ".":
            pos += 1
            continue
        m = _STEP.match(path, pos)
        if m is None:
            raise ValueError(f"reference path {path!r}: cannot read from position {pos} ({path[pos:]!r})")
        pos = m.end()
        key, sel_key, sel_value, index = m.groups()
        if key is not None:
            value = value.get(key) if isinstance(value, dict) else None
        elif index is not None:
            i = int(index)
            value = value[i] if isinstance(value, list) and -len(value) <= i < len(value) else None
        else:
            rows = value if isinstance(value, list) else []
            value = next((r for r in rows if isinstance(r, dict) and str(r.get(sel_key)) == sel_value), None)
        if value is None:
            return None
    return value


def run_label(report: dict[str, Any], time_of_day: bool = False) -> str:
    """Where and when a report was taken, as a reader sees it: its GPU (or host) and date, with the
    time of day (UTC) when `time_of_day` (two runs of one GPU on one day). The commit is not shown:
    it is a developer's detail, kept in the report (`report["machine"]["commit"]`)."""
    machine = report["machine"]
    where = machine.get("gpu") or f"{machine.get('host', 'unknown host')}, {machine.get('backend', '?')}, no GPU"
    stamp = str(machine.get("date", "date unknown"))
    when = stamp[:10] + (f" {stamp[11:16]} UTC" if time_of_day and len(stamp) >= 16 else "")
    return f"{where} ({when})"


def run_labels(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One column label per run; runs that would share a label (one GPU, one day) get the time too."""
    plain = [run_label(r) for r in runs]
    return [run_label(r, time_of_day=plain.count(label) > 1) for r, label in zip(runs, plain)]


def chapter_mode(report: dict[str, Any], name: str) -> str:
    """The mode ("quick ..." or "full ...") of the chapter run that reported `name`, "" if unknown:
    a chapter reads it to say which of a reference run's figures came from a quick-mode run."""
    for chapter in report.get("parts", {}).get("chapters", {}).values():
        if isinstance(chapter, dict) and name in chapter.get("figures", {}):
            return str(chapter.get("mode", ""))
    return ""


def chapter_figure(report: dict[str, Any], name: str) -> Any:
    for chapter in report.get("parts", {}).get("chapters", {}).values():
        figures = chapter.get("figures", {}) if isinstance(chapter, dict) else {}
        if name in figures:
            return figures[name]
    return None
