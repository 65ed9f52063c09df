"""Your machine beside a reference run: a chapter's figures next to the same figures taken on a real GPU.

A *reference run* is the JSON report `scripts/gpu-check` writes on a GPU machine (its "machine" block
names the GPU, the date and the commit; its "parts" hold every figure), copied into
`kit/data/reference_runs/` so every install sees the same ones. A column is labelled with its GPU
and date; the commits stay in the report for the developer who reproduces it.

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from kit import reference
    >>> folder = Path(tempfile.mkdtemp())
    >>> report = {"kind": "kit gpu-check",
    ...           "machine": {"gpu": "NVIDIA H100", "date": "2026-12-01T10:00:00+00:00", "commit": "0123456789ab"},
    ...           "parts": {"bench": {"rows": [{"regime": "plain", "ms": 0.31}, {"regime": "workspace", "ms": 0.3}]}}}
    >>> _ = (folder / "h100.json").write_text(json.dumps(report))
    >>> [run["machine"]["gpu"] for run in reference.reference_runs(folder)]
    ['NVIDIA H100']
    >>> reference.lookup(report, "bench.rows[regime=workspace].ms")
    0.3
    >>> print(reference.beside({"ms per step": 1.25, "accuracy": 0.93},
    ...                        {"ms per step": "bench.rows[regime=plain].ms", "accuracy": "resnet.test_accuracy"},
    ...                        directory=folder, device="cpu:0"))
    quantity    | your machine (cpu:0) | NVIDIA H100 (2026-12-01)
    ------------+----------------------+-------------------------
    ms per step | 1.25                 | 0.31
    accuracy    | 0.93                 | — (not in this run)

A pick is a path into the report's "parts" (``[key=value]`` selects a list's row, ``[3]`` an
index) or a function of the report; without one, a quantity is looked up by name among the
chapters' figures. A flagged figure reads "(flagged)" in its cell: no conclusion is drawn from it.

Reading the reports is kit.measurement.reference_runs; a run's physical limits (copy and matmul
throughput beside the datasheet) are kit.measurement.reference_limits, re-exported here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core import backend
from kit.core.devices import current_device
from kit.files import Json
from kit.measurement import tables
from kit.measurement.measure import SPREAD_LIMIT, Timing, format_spread
from kit.measurement.reference_limits import physical_limits_sentence, physical_limits_table
from kit.measurement.reference_runs import chapter_figure, chapter_mode, lookup, reference_runs, run_label, run_labels
from kit.state import STATE

__all__ = [
    "NO_RUN_YET",
    "Beside",
    "beside",
    "chapter_mode",
    "lookup",
    "physical_limits_sentence",
    "physical_limits_table",
    "reference_flag",
    "reference_runs",
    "reported",
    "reported_flags",
    "run_label",
]

NO_RUN_YET = (
    "no reference run recorded yet: run scripts/gpu-check on a GPU machine and copy its report into\n"
    "kit/data/reference_runs/ (see the README.md there)"
)
MISSING = "— (not in this run)"
FLAGGED = " (flagged)"
FLAGGED_NOTE = (
    "(flagged): measured in a run kit.measure flagged as unreliable (see the warnings printed above it): "
    "not a figure to compare"
)

Pick = str | Callable[[dict[str, Any]], Any]


@dataclass
class Beside:
    """The table `beside` builds: `columns` (labels), `rows` (quantity, then one value per column).
    A figure this machine measured in a run kit.measure flagged reads "(flagged)", with a note:

        >>> import tempfile
        >>> from kit.measurement.measure import Timing
        >>> busy = Timing("workspace", [0.010, 0.011, 0.010], 10, load=0.5)
        >>> print(beside({"workspace / plain time": 1.13}, flagged={"workspace / plain time": [busy]},
        ...              directory=tempfile.mkdtemp(), device="cpu:0"))
        quantity               | your machine (cpu:0)
        -----------------------+---------------------
        workspace / plain time | 1.13 (flagged)
        no reference run recorded yet: run scripts/gpu-check on a GPU machine and copy its report into
        kit/data/reference_runs/ (see the README.md there)
        (flagged): measured in a run kit.measure flagged as unreliable (see the warnings printed above it): not a
          figure to compare
    """

    columns: list[str]
    rows: list[list[Any]]
    note: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    flagged: set[str] = field(default_factory=set)  # quantities whose figure here came from a flagged run
    # (quantity, index of the run in `runs`) -> why that run's own report flags its figure
    reference_flags: dict[tuple[str, int], str] = field(default_factory=dict)

    def _cells(self) -> list[list[str]]:
        out = []
        for r in self.rows:
            cells = [str(r[0])] + [tables.number(v, MISSING) for v in r[1:]]
            if r[0] in self.flagged:
                cells[1] += FLAGGED
            for k in range(len(self.runs)):
                if (r[0], k) in self.reference_flags and r[2 + k] is not None:
                    cells[2 + k] += FLAGGED
            out.append(cells)
        return out

    def quote(self, quantity: str) -> list[tuple[dict[str, Any], Any, str]]:
        """Each reference run's figure for `quantity` as (run, value, why its report flags it, "" when
        it does not), for a chapter that quotes one: a figure with a reason is not one to set beside
        this machine's, and the sentence must say so instead of quoting it as a result."""
        row = next((r for r in self.rows if r[0] == quantity), None)
        if row is None:
            raise KeyError(f"quote: no quantity {quantity!r} in this table; it has {[r[0] for r in self.rows]}")
        return [
            (run, row[2 + k], self.reference_flags.get((quantity, k), ""))
            for k, run in enumerate(self.runs)
            if row[2 + k] is not None
        ]

    def text(self) -> str:
        """The table as text no wider than 100 columns (transposed when it would be), then the note."""
        return tables.text_table(self.columns, self._cells(), self.note.splitlines())

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        notes = self.note.splitlines()
        return tables.html_table(self.columns, self._cells(), notes, text_columns=["quantity"])


def beside(
    measured: Mapping[str, Any],
    picks: Mapping[str, Pick] | None = None,
    *,
    directory: str | Path | None = None,
    device: str | None = None,
    flagged: Mapping[str, bool | Timing | Sequence[Timing]] | None = None,
) -> Beside:
    """A table of `measured` (quantity -> this machine's figure) beside each reference run's figure
    for the same quantity, taken from the report by `picks[quantity]` (a path, see `lookup`, or a
    function of the report). Quantities without a pick show only this machine's figure.

    `flagged[quantity]`: the timing(s) this machine's figure was computed from; where any of them is
    unreliable (`kit.measure` flagged it) the cell reads "(flagged)"; `True` marks it outright (a
    benchmark's figure whose table already says "reliable: NO"). A measured value that is itself a
    Timing shows its median and is marked the same way."""
    picks = dict(picks or {})
    unknown = sorted(set(picks) - set(measured))
    if unknown:
        raise ValueError(f"beside: picks {unknown} name no measured quantity; measured are {sorted(measured)}")
    measured, marked = _figures_and_flags(measured, flagged or {})
    runs = reference_runs(directory)
    here = device or f"{current_device().name}, {backend.name()}"
    labels = run_labels(runs)
    columns = ["quantity", f"your machine ({here})", *labels]
    STATE.reported.update({name: _number(value) for name, value in measured.items()})
    STATE.reported_flagged.difference_update(measured)
    STATE.reported_flagged.update(marked)
    rows: list[list[Any]] = []
    quick_columns: list[str] = []  # runs whose chapter figures shown here came from quick-mode chapters
    ref_flags: dict[tuple[str, int], str] = {}
    for name, value in measured.items():
        rows.append([name, value, *_reference_figures(name, picks.get(name), runs, labels, quick_columns, ref_flags)])
    notes = _beside_notes(bool(runs), bool(marked), labels, ref_flags, quick_columns)
    return Beside(columns, rows, "\n".join(notes), runs, marked, ref_flags)


def _beside_notes(
    any_run: bool, marked: bool, labels: list[str], ref_flags: dict[tuple[str, int], str], quick_columns: list[str]
) -> list[str]:
    """The notes under a `beside` table: no run yet, this machine's flagged figures, the reference
    runs' own flags, and the columns whose chapter figures come from a quick-mode run."""
    notes = [] if any_run else [NO_RUN_YET]
    notes += [FLAGGED_NOTE] if marked else []
    notes += [
        f"(flagged) in the {labels[k]} column: {name}: that run's own report flags it ({why}): not a figure "
        "to set beside this machine's"
        for (name, k), why in ref_flags.items()
    ]
    notes += [
        f"{label}: its chapter figures come from a quick-mode run (KIT_QUICK=1: smaller workloads than a full "
        "run), so they are not the same measurement as this machine's full-mode figures: no direction is drawn "
        "between the two"
        for label in quick_columns
    ]
    return notes


def _figures_and_flags(
    measured: Mapping[str, Any], flagged: Mapping[str, bool | Timing | Sequence[Timing]]
) -> tuple[dict[str, Any], set[str]]:
    """This machine's figures (a Timing's median for a Timing) and the quantities whose timings
    kit.measure flagged (from `flagged`, and the Timings among the figures)."""
    behind: dict[str, list[Timing]] = {}
    for name, timings in flagged.items():
        if name not in measured:
            raise ValueError(f"beside: flagged names {name!r}, no measured quantity; measured are {sorted(measured)}")
        if isinstance(timings, bool):
            timings = [Timing(name, [1.0], 1, extra_warnings=["flagged by its benchmark"])] if timings else []
        behind[name] = [timings] if isinstance(timings, Timing) else list(timings)
    figures = dict(measured)
    for name, value in figures.items():
        if isinstance(value, Timing):
            behind.setdefault(name, []).append(value)
            figures[name] = value.median
    return figures, {name for name, timings in behind.items() if any(not t.reliable for t in timings)}


def _reference_figures(
    name: str,
    pick: Pick | None,
    runs: Sequence[dict[str, Json]],
    labels: list[str],
    quick_columns: list[str],
    ref_flags: dict[tuple[str, int], str],
) -> list[Any]:
    """Each reference run's figure for the quantity `name` (by its pick, or as the GPU check's run
    of the chapters reported it); notes the runs whose figure came from a quick-mode chapter in
    `quick_columns`, and the figures a run's own report flags in `ref_flags`."""
    row: list[Any] = []
    for k, (run, label) in enumerate(zip(runs, labels)):
        if pick is None:  # the same quantity, as the GPU check's run of the chapters reported it
            figure, mode = chapter_figure(run, name), chapter_mode(run, name)
            row.append(figure)
            if figure is not None and mode.startswith("quick") and label not in quick_columns:
                quick_columns.append(label)
        elif callable(pick):
            row.append(pick(run))
        else:
            row.append(lookup(run, pick))
        why = reference_flag(run, name if pick is None else pick)
        if why and row[-1] is not None:
            ref_flags[(name, k)] = why
    return row


_TIMED = re.compile(r"(^|_)(ms|us|s|seconds|ratio|added|speedup|overhead|spread)(_|$)")


def _row_flags(row: Any) -> list[str]:
    """Why a benchmark row's own report flags it: its reliable column, its spread, its warnings."""
    if not isinstance(row, dict):
        return []
    out = [str(w) for w in row.get("warnings") or []]
    if not out and str(row.get("reliable", "yes")) != "yes":
        out.append(f"its row reads reliable: {row['reliable']}")
    spread = row.get("spread")
    if not out and isinstance(spread, (int, float)) and spread > SPREAD_LIMIT:
        out.append(f"spread {format_spread(spread)} is wider than {format_spread(SPREAD_LIMIT)}")
    return out


def reference_flag(report: dict[str, Json], pick: Pick) -> str:
    """Why `report` itself flags the figure `pick` names ("" when it does not, or cannot say):
    a benchmark row read through ``rows[...]`` by its reliable column, spread or warnings (a
    ``ratio_to_X`` figure by row X's too); a benchmark summary figure by the goal line it feeds
    (``goal_small`` feeds ``small_...``) when that line is marked unreliable; a chapter figure (a
    quantity name, no path) by the names the chapter run recorded as flagged
    (parts.chapters.<notebook>.flagged).

        >>> run = {"parts": {"benchmarks": {"w": {"result": {
        ...     "rows": [{"regime": "plain", "spread": 0.1}, {"regime": "ws", "spread": 0.28, "ratio_to_plain": 0.83}],
        ...     "summary": {"goal_time": "t: 0.83 -> met (goal <= 1) [unreliable measurement: see the warnings]"}}}}}}
        >>> reference_flag(run, "benchmarks.w.result.rows[regime=ws].ratio_to_plain")
        'spread ±28% is wider than ±25%'
        >>> reference_flag(run, "benchmarks.w.result.rows[regime=plain].spread")
        ''
        >>> reference_flag(run, "benchmarks.w.result.summary.time_median")
        "its goal line 't' is marked unreliable"
    """
    if callable(pick):
        return ""
    if not pick.startswith("benchmarks."):
        return _chapter_flag(report, pick)
    head, _, field_name = pick.rpartition(".")
    if head.endswith("]"):
        return _bench_row_flag(report, head, field_name)
    if head.endswith(".summary"):
        return _summary_flag(report, head, field_name)
    return ""


def _chapter_flag(report: dict[str, Json], pick: str) -> str:
    """A chapter figure's flag (a quantity name, no path): what the chapter run recorded for it."""
    if "." in pick or "[" in pick:
        return ""
    for chapter in report.get("parts", {}).get("chapters", {}).values():
        if isinstance(chapter, dict) and pick in chapter.get("figures", {}):
            flagged = chapter.get("flagged") or {}
            return str(flagged.get(pick, "")) if isinstance(flagged, dict) else ""
    return ""


def _bench_row_flag(report: dict[str, Json], head: str, field_name: str) -> str:
    """A benchmark row's field: its timing flags reach its timed figures, not its counts (a
    ``ratio_to_X`` figure gets row X's flags too)."""
    if not _TIMED.search(field_name):
        return ""
    reasons = _row_flags(lookup(report, head))
    if field_name.startswith("ratio_to_") and "[" in head:
        rows_path = head[: head.rindex("[")]
        other = field_name[len("ratio_to_") :]
        rows = lookup(report, rows_path) or []
        base = next((r for r in rows if isinstance(r, dict) and other in map(str, r.values())), None)
        reasons += [f"{other}: {w}" for w in _row_flags(base) if w not in reasons]
    return "; ".join(reasons)


def _summary_flag(report: dict[str, Json], head: str, field_name: str) -> str:
    """A benchmark summary figure: flagged when the goal line it feeds is marked unreliable."""
    summary = lookup(report, head) or {}
    goals = {k[len("goal_") :]: v for k, v in summary.items() if k.startswith("goal_")}
    fed = [v for k, v in goals.items() if field_name.startswith(k + "_")] or list(goals.values())
    marked = [str(v) for v in fed if "unreliable" in str(v)]
    if marked:
        names = ", ".join(f"'{m.split(':')[0]}'" for m in marked)
        return f"its goal line {names} is marked unreliable"
    return ""


# Every quantity a chapter shows through `beside` is remembered in this process, so that
# scripts/gpu-check, which runs the chapters' cells on a GPU, can store them in its report under
# parts.chapters.<notebook>.figures; `beside` then finds them there by name, without a pick.


def reported() -> dict[str, Any]:
    """The quantities shown through `beside` in this process so far (name -> figure)."""
    return dict(STATE.reported)


def reported_flags() -> dict[str, str]:
    """The quantities `beside` showed as flagged in this process (name -> why): scripts/gpu-check
    stores them beside the figures, so a reference column can mark a flagged figure as such."""
    return {name: "measured in a run kit.measure flagged as unreliable" for name in sorted(STATE.reported_flagged)}


def _number(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
