"""Chapter 7's side-by-side, from one run of kit.bench.spark_peers: its table and its sentences.

The chapter runs `peers_table(sc, quick, systems=CHAPTER_SYSTEMS)` and shows what these functions make
of the result: every figure is the run's, every sentence built from those figures. Where the run
is flagged (kit.measure's load rule), every timing carries the flag and no sentence draws a
direction from it. Accuracies are seeded, so they are always compared (McNemar's exact test). What
ran is read from the run, never assumed: kit's execution, whether TorchDistributor ran (and why not).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from kit.bench.spark_peers import DEFAULT_ROW, PER_WORKER, SINGLE_ROW, TARGET, goals
from kit.measurement.goals import flagged_figure, goal_verdict
from kit.measurement.load import LOAD_LIMIT, LoadReading, format_load
from kit.measurement.prose import Sentence, accuracy_difference, no_conclusion, sentence
from kit.measurement.tables import Table

__all__ = ["flag_reasons", "label", "merged", "peers_sentences", "peers_view", "updater_sentences", "updater_view"]

DEFAULTS, FIT, DDP, PEER, TORCH = (
    DEFAULT_ROW,
    SINGLE_ROW,
    "kit gang, every step",
    "TorchDistributor (DDP)",
    "PyTorch (one process)",
)
# two narrow tables (a text table fits a notebook's column), one row a system, by its short label
WHAT = ["system", "ran as", "accuracy", "right"]
TIMES = ["system", "call (s)", "per step (ms)", "sync (ms)", f"to {TARGET} (s)"]
LABELS = {
    FIT: "Network.fit",
    DEFAULTS: "kit defaults",
    DDP: "kit gang every step",
    TORCH: "PyTorch",
    PEER: "TorchDistributor",
}
POINTS = 0.5  # the goal: kit's defaults within half a point of Network.fit


def flag_reasons(peers: dict[str, Any], load: LoadReading | None = None) -> list[str]:
    """Why this run's timings say nothing (empty: they can be read, as one run each): other
    processes' share of the CPU over kit.measure's limit, in the run's own reading or `load` (the
    cell's). The run's own Spark and PyTorch processes are its work, never load: a load average at
    the cores, which they alone reach on two cores, is kept in the table's notes, not a reason."""
    shares = [x for x in (peers.get("machine_load_by_others"), load.others if load else None) if x is not None]
    if shares and max(shares) > LOAD_LIMIT:
        return [f"other processes used {format_load(max(shares))} of the CPU while these fits ran"]
    return []


def merged(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """Two runs of `peers_table` on the same job as one (the chapter runs kit's rows, then PyTorch's,
    in two cells, each within a test's minute): the second run's Network.fit row left out (seeded,
    it scores the same; each run's sync overheads are against its own single process), the goals
    read from all the rows, the busier of the two load readings."""
    for key in ("data", "epochs", "steps_per_epoch", "test_examples"):
        if first[key] != then[key]:
            raise ValueError(f"merged: the runs differ in {key} ({first[key]!r} vs {then[key]!r}): run both on one job")
    rows = first["rows"] + [r for r in then["rows"] if r["system"] != FIT]
    others = max(first["machine_load_by_others"], then["machine_load_by_others"])
    return {
        **first,
        "rows": rows,
        "right": {**then["right"], **first["right"]},
        "torch_distributor": then["torch_distributor"],
        "goals": goals(rows, LoadReading(others=others)),
        "machine_load_by_others": others,
        "load_average": [first["load_average"][0], then["load_average"][1]],
        "skipped": {**first["skipped"], **then["skipped"]},
    }


def _figure(value: float, digits: int, reasons: Sequence[str], sign: bool = False) -> str:
    if math.isnan(value):
        return "-"
    return flagged_figure(f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}", list(reasons))


def _right(peers: dict[str, Any], system: str) -> str:
    ok = peers["right"][system]
    return f"{int(ok.sum()):,} of {ok.size:,}"


def label(system: str) -> str:
    """A row's short name in the chapter's tables and sentences ("save_updater=False" for the flipped row)."""
    return LABELS.get(system, system.removeprefix("kit averaging, "))


def _what(peers: dict[str, Any], r: dict[str, Any]) -> list[str]:
    return [label(r["system"]), r["semantics"], f"{r['final_accuracy']:.3f}", _right(peers, r["system"])]


def _times(r: dict[str, Any], reasons: Sequence[str]) -> list[str]:
    return [
        label(r["system"]),
        _figure(r["call_s"], 1, reasons),
        _figure(r["per_step_ms"], 2, reasons),
        _figure(r["overhead_ms"], 2, reasons, sign=True),
        _figure(r["to_target_s"], 1, reasons),
    ]


def _title(peers: dict[str, Any]) -> str:
    return (
        f"{peers['data']}, {peers['epochs']} epoch(s), MLP 784-256-10, Adam, global batch {2 * PER_WORKER} "
        f"(two workers of {PER_WORKER}): one run each"
    )


def peers_view(peers: dict[str, Any], reasons: Sequence[str]) -> list[Table]:
    """The side-by-side as two tables (what each system ran as and scored; its times, flagged where
    the run was), one row a system."""
    notes = [f"TorchDistributor: {peers['torch_distributor']}"]
    notes += [f"not run: {name}: {why}" for name, why in peers.get("skipped", {}).items()]
    notes += [f"{label(r['system'])}: {w}" for r in peers["rows"] for w in r.get("fallback", [])]
    notes.append("accuracy and right: on the test set (right: test examples classified right)")
    what = Table(
        WHAT, [_what(peers, r) for r in peers["rows"]], notes=notes, title=_title(peers), text_columns=WHAT[:2]
    )
    return [what, _times_table(peers, peers["rows"], reasons)]


def _times_table(peers: dict[str, Any], rows: list[dict[str, Any]], reasons: Sequence[str]) -> Table:
    la = peers["load_average"]
    notes = [
        "per step: from the first kept point to the last (start-up left out); sync: that minus the system's own "
        f"single process's; to {TARGET}: from the call, '-' where not reached",
        f"load average {la[0]:.1f} before, {la[1]:.1f} after, on {os.cpu_count()} core(s), the run's own "
        "processes included (the flag reads other processes' share of the CPU)",
        *(f"flagged: {why}" for why in reasons),
    ]
    return Table(TIMES, [_times(r, reasons) for r in rows], notes=notes, text_columns=["system"])


def _by(peers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["system"]: r for r in peers["rows"]}


def _timing_sentence(by: dict[str, dict[str, Any]]) -> Sentence:
    parts = []
    for name, base in ((DDP, FIT), (DEFAULTS, FIT), (PEER, TORCH)):
        if name in by and base in by:
            r, b = by[name], by[base]
            parts.append(
                f"{label(name)} {r['per_step_ms']:.2f} ms, {r['overhead_ms']:+.2f} ms over {label(base)}'s "
                f"{b['per_step_ms']:.2f} ms"
            )
    reached = [
        f"{label(r['system'])} after {r['to_target_s']:.1f} s" for r in by.values() if not math.isnan(r["to_target_s"])
    ]
    return sentence(
        "One run each (an observation, not a benchmark): per global step, "
        + "; ".join(parts)
        + ". "
        + (f"Test accuracy {TARGET} was reached by " + ", ".join(reached) if reached else f"No system reached {TARGET}")
        + " (from the call, start-up included)."
    )


def peers_sentences(peers: dict[str, Any], reasons: Sequence[str]) -> list[Sentence]:
    """What the side-by-side shows, in words built from its rows."""
    by, said = _by(peers), []
    if PEER in by:
        said.append(sentence("TorchDistributor ran here: PyTorch's DDP over Gloo on two barrier tasks of this Spark."))
    else:
        said.append(
            sentence(f"TorchDistributor did not run here: {peers['torch_distributor']}. The table has kit's rows.")
        )
    if DEFAULTS in by:
        d = by[DEFAULTS]
        said.append(
            sentence(
                f"kit's defaults (a ParameterAveragingTrainingMaster given only {PER_WORKER} examples a worker and "
                f"two workers) ran as: {d['semantics']}." + "".join(f" {w}." for w in d.get("fallback", []))
            )
        )
    said.append(no_conclusion(list(reasons)) if reasons else _timing_sentence(by))
    for a, b in ((DEFAULTS, FIT), (DDP, PEER)):
        if a in by and b in by:
            said.append(accuracy_difference(peers["right"][a], peers["right"][b], label(a), label(b)))
    if DEFAULTS in by and FIT in by:
        gap = (by[FIT]["final_accuracy"] - by[DEFAULTS]["final_accuracy"]) * 100
        said.append(
            sentence(
                f"Goal: kit's defaults within {POINTS} points of Network.fit: {goal_verdict(gap, '<=', POINTS)} "
                f"({abs(gap):.1f} points {'below' if gap > 0 else 'above'} it)."
            )
        )
    said += [sentence(f"Goal: {k}: {v}.") for k, v in peers["goals"].items()]
    return said


def _updater_pair(peers: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(kept, restarted): the defaults' row and the row that flips save_updater, or None."""
    by = _by(peers)
    other = next((r for r in peers["rows"] if r["system"].startswith("kit averaging, save_updater=")), None)
    if DEFAULTS not in by or other is None:
        return None
    kept_default = other["system"].endswith("=False")
    return (by[DEFAULTS], other) if kept_default else (other, by[DEFAULTS])


def updater_view(peers: dict[str, Any], reasons: Sequence[str]) -> list[Table]:
    """The two settings of save_updater, the rest the master's defaults, same seed and data."""
    pair = list(_updater_pair(peers) or ())
    what = Table(WHAT, [_what(peers, r) for r in pair], title=_title(peers), text_columns=WHAT[:2])
    return [what, _times_table(peers, pair, reasons)]


def updater_sentences(peers: dict[str, Any], reasons: Sequence[str]) -> list[Sentence]:
    """Updater kept against restarted at every averaging, in words built from the two rows."""
    pair = _updater_pair(peers)
    if pair is None:
        return [sentence("The comparison did not run: one of its two fits is missing from this run.")]
    kept, restarted = pair
    said = [
        sentence(
            f"Same seed, same examples in the same order; only save_updater differs. {label(kept['system'])} ran "
            f"as: {kept['semantics']}; {label(restarted['system'])}: {restarted['semantics']}."
        ),
        accuracy_difference(
            peers["right"][kept["system"]],
            peers["right"][restarted["system"]],
            label(kept["system"]),
            label(restarted["system"]),
        ),
    ]
    if reasons:
        said.append(no_conclusion(list(reasons)))
    else:
        k, r = kept, restarted
        said.append(
            sentence(
                f"One run each (an observation, not a benchmark): {label(k['system'])} took {k['call_s']:.1f} s "
                f"({k['per_step_ms']:.2f} ms a global step), {label(r['system'])} {r['call_s']:.1f} s "
                f"({r['per_step_ms']:.2f} ms)."
            )
        )
    return said
