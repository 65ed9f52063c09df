"""What kit.compare.compare_devices gives back: a `Comparison`, its rows as a table (text and HTML),
the notes every figure needs beside it, a speedup worded as a sentence, the scaling model's inputs
and the plot. Its flags are per figure: each row's `flags` say which timings each figure is computed
from were flagged (kit.compare.assess_row puts them there); a flagged figure is greyed (marked `*`
in the text form), and no sentence draws a direction from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.measurement import measure, prose, tables

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["COLUMNS", "MODEL_WORDS", "Comparison"]


COLUMNS = [
    "devices",
    "kind",
    "reliable",  # beside what it judges: a wide table must not scroll it out of sight
    "epoch_s",
    "spread",
    "samples_per_s",
    "speedup",
    "speedup_vs_share",
    "efficiency",
    "predicted_speedup",
    "copies_per_epoch",
    "copied_MB_per_epoch",
    "accuracy",
]


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    # the measurements behind the rows: seconds per epoch of every repeat (kit.measure.Timing),
    # keyed by device count, and "share" for one device with one worker's share of the cores
    timings: dict[int | str, measure.Timing] = field(default_factory=dict)

    @property
    def reliable(self) -> bool:
        return all(r["reliable"] for r in self.rows)

    def notes(self, words: bool = False) -> list[str]:
        """What the table's numbers need said beside them: the baseline, every flag (with the
        figures it flags), the kind. `words`: columns named as the HTML headers say them
        ("speedup vs share"), else by their keys, as the text form heads them."""
        name = tables.header if words else str
        out = []
        if any(r["devices"] > 1 for r in self.rows):
            out.append(
                f"{name('speedup')}, {name('speedup_vs_share')}: the median over repeats of one device's epoch "
                f"time divided by this row's, both from the same repeat (so not the ratio of the "
                f"{name('epoch_s')} medians)"
            )
        base = self.model.get("baseline")
        if base:
            out.append(
                f"baseline: 1 device with {base['threads']} BLAS thread(s) (the same total as the workers): "
                f"{base['epoch_s']:.3g} s/epoch{_spread_words(base, 'spread')}; with {base['share_threads']} "
                f"thread(s) (one worker's share): {base['share_epoch_s']:.3g} s/epoch"
                f"{_spread_words(base, 'share_spread')}"
            )
        for r in self.rows:
            flags = _row_flags(r)
            shown = [c for c in _FLAGGED_COLUMNS if c in flags]
            for w in r["warnings"]:
                cols = [c for c in shown if w in flags[c]]
                every = cols == shown or cols == [c for c in shown if c in _MEASURED]  # the whole row
                which = "" if every else " (" + ", ".join(name(c) for c in cols) + ")"
                out.append(f"UNRELIABLE {r['devices']} device(s){which}: {w}")
        if not self.reliable:
            how = "greyed" if words else "marked *"
            out.append(f"-> read no figure that is flagged ({how}): rerun on a quiet machine")
        if any("logical" in r["kind"] or "simulated" in r["kind"] for r in self.rows):
            out.append(
                "note: logical and simulated devices share one physical device; their speedup is overlap on "
                "shared hardware, not a multi-GPU speedup"
            )
        return out

    def _shown(self) -> tuple[list[str], list[list[str]], list[set[str]]]:
        """The columns and cells to show (a column with nothing in any row, all "-", is left out),
        and for each row the columns whose figure is flagged."""
        cells = [[_fmt(c, r.get(c), r) for c in COLUMNS] for r in self.rows]
        keep = [i for i, c in enumerate(COLUMNS) if c in ("devices", "reliable") or any(row[i] != "-" for row in cells)]
        flagged = [{c for c, why in _row_flags(r).items() if why} for r in self.rows]
        return [COLUMNS[i] for i in keep], [[row[i] for i in keep] for row in cells], flagged

    def table(self) -> str:
        """The rows as text no wider than 100 columns (transposed when they would be), a flagged
        figure marked `*`, then the notes."""
        columns, cells, flagged = self._shown()
        marked = [
            [f"{v}*" if c in bad and v != "-" else v for c, v in zip(columns, row)] for row, bad in zip(cells, flagged)
        ]
        return tables.text_table(columns, marked, self.notes())

    __str__ = table

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        """Narrower than the text, to fit a notebook's column: each epoch time carries its spread, and
        samples_per_s (the examples over epoch_s) is left to the text form. A flagged figure is
        greyed, alone: a row's other figures keep their colour when their own timings are clean."""
        columns, cells, flagged = self._shown()
        at = {c: i for i, c in enumerate(columns)}
        for row in cells if "spread" in at else ():
            row[at["epoch_s"]] = f"{row[at['epoch_s']]} {row[at['spread']]}".rstrip(" -")
        keep = [i for i, c in enumerate(columns) if c not in ("spread", "samples_per_s")]
        heads = ["epoch (s) ±spread" if c == "epoch_s" and "spread" in at else c for c in columns]
        return _html_table(
            [heads[i] for i in keep],
            [columns[i] for i in keep],
            [[row[i] for i in keep] for row in cells],
            flagged,
            self.notes(words=True),
        )

    def speedup_sentence(
        self, devices: int, vs_share: bool = False, name: str | None = None, baseline_name: str | None = None
    ) -> prose.Sentence:
        """The table's speedup of `devices` over one device (every core; `vs_share`: one worker's
        share of the cores) as a sentence (kit.prose): the same per-repeat figure the table shows,
        their range and whether every repeat points one way, or, where the table flags that
        figure, no conclusion and why."""
        row = next(r for r in self.rows if r["devices"] == devices)
        column, key = ("speedup_vs_share", "share") if vs_share else ("speedup", 1)
        if row.get(column) is None or key not in self.timings:
            raise ValueError(f"speedup_sentence: no {column} for {devices} device(s) in this comparison")
        base = self.model.get("baseline", {})
        name = name or f"{devices} devices"
        if baseline_name is None:
            threads = base.get("share_threads") if vs_share else base.get("threads")
            baseline_name = f"one device on {threads} thread(s)" if vs_share else "one device (every core)"
        flagged = _row_flags(row)[column]
        if flagged:
            return self._no_conclusion(flagged, (name, devices), (baseline_name, key))
        ratios = row["speedups_vs_share" if vs_share else "speedups"]
        lo, hi, median = min(ratios), max(ratios), row[column]
        header = tables.header(column)
        way = _direction(lo, hi, name)
        spreads = " and ".join(measure.format_spread(self.timings[k].spread) for k in (key, devices))
        efficiency = "" if vs_share else f", efficiency {row['efficiency']:.2f}"
        return prose.sentence(
            f"Paired by repeat (the epoch of **{baseline_name}** divided by that of **{name}** in the same "
            f"repeat), the {header} ranged from {lo:.2f}x to {hi:.2f}x over {len(ratios)} repeats; its median, "
            f"{median:.2f}x, is the table's {header}{efficiency}. So {way} (the two epoch times' spreads: "
            f"{spreads})."
        )

    def model_table(self) -> tables.Table:
        """Every input of the scaling model, measured or given, in words: the predicted speedup
        (`predicted_speedup`) can be recomputed from this table alone."""
        return tables.Table(
            ["scaling model input", "value"], _model_rows(self.model), text_columns=["scaling model input"]
        )

    def _no_conclusion(
        self, flagged: list[str], own: tuple[str, int], baseline: tuple[str, int | str]
    ) -> prose.Sentence:
        """No conclusion, and why: the table's reasons, each timing's under its name ("a and b:
        machine busy"), then the speedup's own (beyond the device count)."""
        (name, devices), (baseline_name, key) = own, baseline
        timing, ref = self.timings[devices], self.timings[key]
        named = [
            measure.Timing(n, t.seconds, t.number, t.load, t.extra_warnings)
            for n, t in ((name, timing), (baseline_name, ref))
        ]
        timed = set(timing.warnings) | {w for w in flagged if w.startswith("its baseline")}
        reasons = prose.flags(named) + [w for w in flagged if w not in timed]
        return prose.no_conclusion(reasons or flagged)

    def plot(self, ax: Axes | None = None) -> Axes:
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.5, 4.2))
        n = [r["devices"] for r in self.rows]
        ax.plot(n, n, ":", color="#999", label="ideal")
        ax.plot(n, [r["predicted_speedup"] for r in self.rows], "--", color="#c63", label="scaling model")
        _plot_measured(ax, self.rows)
        # the plotted figure is the speedup over every core: its own flag, as the table greys it
        bad = [r for r in self.rows if _row_flags(r).get("speedup")]
        if bad:
            ax.plot([r["devices"] for r in bad], [r["speedup"] for r in bad], "x", color="#c00", ms=12, mew=2,
                    label="UNRELIABLE (see table)")  # fmt: skip
        kinds = list(dict.fromkeys(r["kind"] for r in sorted(self.rows, key=lambda r: r["devices"])))
        ax.set_xlabel("devices (" + ", ".join(kinds) + ")", fontsize=8)  # kinds in the order of their ticks
        ax.set_ylabel("speedup over 1 device")
        ax.set_xticks(n)
        # below the axes, in two columns: beside them, a legend as wide as the plot squeezed the axes
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
        if bad:
            ax.set_title("flagged: machine busy or noisy, no conclusion", fontsize=9, color="#c00")
        return ax


# the figures a flag can fall on: the epoch time (with its spread and samples/s), and the ratios
_FLAGGED_COLUMNS = ["epoch_s", "speedup", "speedup_vs_share", "efficiency", "predicted_speedup"]
_MEASURED = _FLAGGED_COLUMNS[:-1]  # the prediction is a model's figure, not a timing
_FOLLOWS = {"spread": "epoch_s", "samples_per_s": "epoch_s"}


def _spread_words(base: dict[str, Any], key: str) -> str:
    return f" ({measure.format_spread(base[key])})" if base.get(key) is not None else ""


def _row_flags(row: dict[str, Any]) -> dict[str, list[str]]:
    """Which figures of a row each warning flags. A row built without per-figure flags (by hand)
    has its warnings fall on every figure it holds."""
    if "flags" in row:
        flags = {c: why for c, why in row["flags"].items() if row.get(c) is not None}
    else:
        flags = {c: list(row.get("warnings", [])) for c in _FLAGGED_COLUMNS if row.get(c) is not None}
    for col, source in _FOLLOWS.items():
        if source in flags and row.get(col) is not None:
            flags[col] = flags[source]
    return flags


def _html_table(
    heads: list[str], keys: list[str], rows: list[list[str]], flagged: list[set[str]], notes: list[str]
) -> str:
    """kit.tables.html_table with a flag per figure: a flagged cell greyed alone (not its whole
    row), the `reliable` cell a badge unless it says yes."""
    at = dict(zip(keys, heads))
    grey = [{at[k] for k in bad if k in at} for bad in flagged]
    return tables.html_table(heads, rows, notes, flag_column=at.get("reliable"), text_columns=["kind"], grey=grey)


def _fmt(col: str, v: Any, row: dict[str, Any] | None = None) -> str:
    if col == "spread" and isinstance(v, float):
        return measure.format_spread(v)
    if col == "reliable":
        if v or row is None:
            return "yes" if v else "NO"
        # NO where every measured figure is flagged, partly where some figure's own timings are clean
        flags = [bool(why) for c, why in _row_flags(row).items() if c in _MEASURED]
        return "partly" if any(flags) and not all(flags) else "NO"
    return tables.number(v)


# the scaling model's inputs (and the run's shape) as `Comparison.model_table` words them
MODEL_WORDS = {
    "params": "parameters P",
    "bytes_per_value": "bytes per parameter b",
    "buffers_averaged": "buffers averaged k (parameters, plus updater state)",
    "batches_per_epoch": "batches per epoch B",
    "averaging_frequency": "averaging frequency F",
    "bandwidth_GBps": "copy bandwidth (GB/s)",
    "step_s_one_device": "one training step on one device, every core (s)",
    "epochs_per_repeat": "epochs per timed repeat",
    "repeats": "timed repeats",
    "load": "CPU taken by other processes (one-device runs)",
}


def _model_rows(model: dict[str, Any]) -> list[list[str]]:
    def value(k: str, v: Any) -> str:
        if k == "load":  # other processes' share of the CPU while the one-device runs were timed
            return measure.format_load(v)
        return f"{v:.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)

    rows = []
    for k, v in model.items():
        if k in ("baseline", "compute_split"):
            continue
        if k == "step_s_per_worker":
            for n, step in v.items():
                split = model["compute_split"][n]
                words = (
                    f"one training step for {n} workers, each on its share of the compute (s)"
                    if split
                    else f"one training step for {n} workers sharing one device's compute (s)"
                )
                rows.append([words, value(k, step)])
                rows.append([f"compute divided by N for {n} workers", "yes" if split else "no"])
            continue
        rows.append([MODEL_WORDS.get(k, k.replace("_", " ")), value(k, v)])
    return rows


def _direction(lo: float, hi: float, name: str) -> str:
    """Which way every repeat's speedup points, or that the repeats disagree."""
    if lo > 1:
        return f"in every repeat {name} took the shorter epoch"
    if hi < 1:
        return f"in every repeat {name} took the longer epoch"
    return "the ratios fall on both sides of 1: no direction, paired by repeat or not"


def _plot_measured(ax: Axes, rows: list[dict[str, Any]]) -> None:
    """The measured speedups: their medians, with the range of the per-repeat ratios where every row has them."""
    n, measured = [r["devices"] for r in rows], [r["speedup"] for r in rows]
    if all(r.get("speedups") for r in rows):
        lo = [s - min(r["speedups"]) for s, r in zip(measured, rows)]
        hi = [max(r["speedups"]) - s for s, r in zip(measured, rows)]
        ax.errorbar(n, measured, yerr=[lo, hi], fmt="o-", color="#36c", capsize=4,
                    label="measured (median, range of repeats)")  # fmt: skip
    else:
        ax.plot(n, measured, "o-", color="#36c", label="measured (median)")
