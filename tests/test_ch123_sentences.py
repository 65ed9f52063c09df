"""Chapters 1-3's generated sentences, run on made-up measurements through every branch: a flagged
row is named and no other, the prefetch figures stand on one baseline and the summary repeats
them, and the workspace step's two timings are set side by side with their flags. Each test runs
the chapter's own cell (found by a line it holds), so the test reads what a reader reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit import measure, prose
from kit.measurement.measure import Timing

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHAPTERS = ["01_arrays_and_backends", "02_workspaces", "03_training_with_workspaces"]


def _cells(chapter: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{chapter}.ipynb").read_text())["cells"]


def _cell(chapter: str, marker: str) -> str:
    """The source of the one code cell of `chapter` that holds `marker`."""
    found = [
        "".join(c["source"]) for c in _cells(chapter) if c["cell_type"] == "code" and marker in "".join(c["source"])
    ]
    assert len(found) == 1, f"{chapter}: {len(found)} code cells hold {marker!r}"
    return found[0]


def _scope(source: str, **names) -> tuple[list[str], dict]:
    """Run a cell with `names` defined: what it displays, as text, and the names it leaves."""
    shown: list[str] = []
    scope = {"prose": prose, "measure": measure, "Timing": Timing, "display": lambda x: shown.append(str(x)), **names}
    exec(source, scope)
    return shown, scope


def _run(source: str, **names) -> list[str]:
    return _scope(source, **names)[0]


def _timing(name: str, median: float, spread: float = 0.02, load: float = 0.0) -> Timing:
    return Timing(name, [median * (1 - spread), median, median * (1 + spread)], 1, load=load)


# chapter 1, section 5: memory bandwidth or arithmetic, read from section 4's large rows


def _row(op: str, raw_us: float, reliable: bool = True, spread: float = 0.05) -> dict:
    warnings = [] if reliable else [f"spread ±{spread:.0%} is wider than ±25%"]
    row = {"op": op, "elements": 1_000_000, "raw_us": raw_us, "spread": spread}
    return row | {"reliable": "yes" if reliable else "NO", "warnings": warnings * 2}  # kit's and raw's warnings


def test_ch1_names_only_the_rows_section_4_flagged():
    cell = _cell(CHAPTERS[0], "flagged_rows")
    [said] = _run(cell, rows4=[_row("add", 500), _row("exp", 2000, reliable=False, spread=0.41)])
    assert said.startswith("No conclusion can be drawn from this run")
    assert "the exp row (spread ±41% is wider than ±25%)" in said and "was flagged" in said
    assert "add row" not in said and "raw add and raw exp" not in said
    assert said.count("spread ±41%") == 1  # kit's and raw's warnings, each said once
    [both] = _run(cell, rows4=[_row("add", 500, reliable=False), _row("exp", 2000, reliable=False)])
    assert "the add row" in both and "the exp row" in both and "were flagged" in both
    [clean] = _run(cell, rows4=[_row("add", 500), _row("exp", 2000)])
    assert "exp took 2,000 µs and add 500 µs, 4.00 times as long" in clean and "No conclusion" not in clean


# chapter 2, section 7: the workspace step beside the benchmark's


def _ch2_reconcile(bench: Timing, off: Timing) -> str:
    cell = _cell(CHAPTERS[1], "bench_ws, here_off")
    block = 50
    t = {None: Timing("off", [s * block for s in off.seconds], 1, off.load), 200: _timing("200", 0.06)}
    shown = _run(cell, windows=(None, 200), t=t, BLOCK=block, gc_counts={None: (0, 0.0), 200: (3, 0.01)},
                 timing=lambda name: bench)  # fmt: skip
    return shown[-1]


def test_ch2_sets_the_gc_off_time_beside_the_benchmarks_and_says_which_to_rely_on():
    busy = _timing("workspace", 0.000828, spread=0.31)
    said = _ch2_reconcile(busy, _timing("window off", 0.001334, spread=0.10))
    assert "Section 2's benchmark timed the same workspace step at 828 µs per iteration (flagged: spread" in said
    assert "with the window off, at 1.33 ms per iteration. The setups differ" in said
    assert "blocks of 50 steps, each followed by a `kit.memory.maybe_gc()` call" in said
    assert said.endswith(
        "Only this loop's figure is reliable: it is the one to read as the step's time on this machine."
    )
    agree = _ch2_reconcile(_timing("workspace", 0.00100), _timing("window off", 0.00101))
    assert agree.endswith("Both are reliable, and they agree within the spread of their repeats.")
    apart = _ch2_reconcile(_timing("workspace", 0.00100), _timing("window off", 0.00150))
    assert "differ beyond the spread of their repeats" in apart and "faster" not in apart
    neither = _ch2_reconcile(busy, _timing("window off", 0.001, load=0.9))
    assert neither.endswith("Neither is reliable: this run gives no time for the step to rely on.")
    only_bench = _ch2_reconcile(_timing("workspace", 0.001), _timing("window off", 0.001, spread=0.5))
    assert only_bench.endswith(
        "Only the benchmark's figure is reliable: it is the one to read as the step's time on this machine."
    )


def test_ch2_points_to_section_7_only_where_section_7_sets_the_two_side_by_side():
    markdown = " ".join("".join(c["source"]) for c in _cells(CHAPTERS[1]) if c["cell_type"] == "markdown")
    assert "again in section 7" not in markdown
    if "section 7 times it again" in markdown:
        assert "Section 2's benchmark timed the same workspace step" in _cell(CHAPTERS[1], "bench_ws, here_off")


# chapter 3, section 5 and the summary: the prefetch figures on one baseline


def _prefetch(source: float, train: float, without: float, with_: float, with_load: float = 0.0) -> tuple[list, str]:
    """Section 5's cell on these medians (seconds per call), then the summary cell after it."""
    shown, scope = _scope(
        _cell(CHAPTERS[2], "prefetch_verdict = "),
        EPOCHS=5,
        sleep_s=train,
        train_alone=_timing("training alone", train),
        prefetch_t={
            "source alone": _timing("source alone", source),
            "without prefetch": _timing("without prefetch", without),
            "with prefetch": _timing("with prefetch", with_, load=with_load),
        },
    )

    class Step:
        median, reliable = 0.2909, True

    summary = _run(_cell(CHAPTERS[2], "# the summary, its prefetch line"), prefetch_verdict=scope["prefetch_verdict"],
                   rstep=Step, mode_times={}, rnet=type("Net", (), {"num_params": 1}), xb=[0] * 4)  # fmt: skip
    return shown, summary[0]


def test_ch3_prefetch_figures_share_one_baseline_and_the_summary_repeats_them():
    shown, summary = _prefetch(source=0.101, train=0.0885, without=0.227, with_=0.130)
    parts, verdict, baseline = shown
    assert "in turn the two add up to" in parts and "its floor" in parts and "%" not in parts
    assert "with prefetch was 1.75x faster" in verdict
    # saved and hideable are both differences of the measured run without prefetch: 227 - 130 of 227 - 101
    assert "prefetch saved 97 ms of the at most 126 ms it could hide, 77% of it" in baseline
    assert "with prefetch the run took 130 ms, 29% above its floor of 101 ms, beyond the spread" in baseline
    assert "(this run: prefetch saved 97 ms of the at most 126 ms it could hide, 77% of it; with prefetch" in summary
    assert "47%" not in summary and "43%" not in summary
    at_floor = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.102)[0][-1]
    assert "at its floor of 101 ms within the spread of the repeats" in at_floor
    below = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.080)[0][-1]
    assert "more than the at most 89 ms above its floor" in below and "do not explain" in below


def test_ch3_prefetch_withholds_every_figure_from_a_flagged_or_unclear_run():
    shown, summary = _prefetch(source=0.101, train=0.0885, without=0.227, with_=0.130, with_load=0.9)
    assert shown[1].startswith("No conclusion can be drawn from this run") and len(shown) == 2
    assert "(this run: no conclusion, the timings were flagged)" in summary
    same = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.189)
    assert len(same[0]) == 2 and "(this run: no difference beyond the spread of the repeats)" in same[1]
    slower = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.230)
    assert "(this run: no gain: the run with prefetch took longer)" in slower[1]
    assert "291 ms a step" in same[1]  # the step time as the measurement line prints it


# all three chapters


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_errors_and_long_messages_go_through_show_and_no_dev_reference_is_left(chapter):
    for i, cell in enumerate(_cells(chapter)):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code":
            # an exception printed with print() is one long line that a notebook breaks mid-word
            assert not re.search(r"print\([^)]*(?<!type\()\b(e|exc|err)\b[,)]", src), (
                f"{chapter} cell {i}: print an error with prose.show"
            )
        else:
            assert "scripts/gpu-check" not in src and "GPU check" not in src, (
                f"{chapter} cell {i}: say 'the reference runs'"
            )
            assert not re.search(r"\bcommit\b", src), (
                f"{chapter} cell {i}: a reference run is labelled with GPU and date"
            )
