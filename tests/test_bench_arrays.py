"""kit.bench.arrays: a figure computed from a row kit.measure flagged carries the flag wherever it is
printed (the summary, the goal lines, chapter 1's reference table), and no goal gives it a verdict."""

import re
import statistics

import pytest
from _chapter_cells import holding as _cell
from _chapter_cells import run_in as _run
from _chapter_cells import scope as _scope

import kit
from kit import bench, measure
from kit.bench.arrays import _arrays_summary, flagged_figures

CH1 = "01_arrays_and_backends"


def _array_row(op, elements, reliable=True):
    ratios, added = [1.0, 1.01, 1.02], [1.0, 1.1, 1.2]
    return {
        "op": op,
        "elements": elements,
        "raw_us": 1.0,
        "kit_us": 2.0,
        "ratio": statistics.median(ratios),
        "added_us": statistics.median(added),
        "spread": 0.02 if reliable else 0.4,
        "reliable": "yes" if reliable else "NO",
        "warnings": [] if reliable else ["spread ±40% is wider than ±25%"],
        "ratio_per_repeat": ratios,
        "added_us_per_repeat": added,
    }


def _arrays_result(small_ok: bool, large_ok: bool) -> dict:
    ops = ["add", "multiply by scalar", "exp", "sum", "max over axis 1", "slice view", "compare"]
    rows = [_array_row(op, 100, small_ok) for op in ops] + [_array_row(op, 1_000_000, large_ok) for op in ops]
    return {
        "benchmark": "arrays",
        "device": "cpu:0",
        "repeats": 3,
        "columns": ["op", "elements", "raw_us", "kit_us", "added_us", "ratio", "spread", "reliable"],
        "column_notes": {},
        "rows": rows,
        "summary": _arrays_summary(rows, 0.0),
        "summary_flagged": flagged_figures(rows),
    }


VERDICTS = ("-> met", "-> NOT met", "not shown either way")


def test_a_benchmark_whose_every_row_is_flagged_prints_no_verdict_and_flags_every_figure():
    """The finding: chapter 1 printed "-> NOT met" on a benchmark whose every row was flagged, above
    "No conclusion can be drawn"."""
    result = _arrays_result(small_ok=False, large_ok=False)
    for text in ("\n".join(bench.result_table(result).notes), bench.format_result(result)):
        assert not any(v in text for v in VERDICTS), text
        assert text.count("no verdict: kit.measure flagged the measurement") == 2
        figures = [
            line
            for line in text.splitlines()
            if re.match(r"(added per small op|overhead on large ops|small_|large_)", line)
        ]
        assert len(figures) == 3 and all(line.endswith(" (flagged)") for line in figures), figures
    # and the chapter's sentence under the table draws no conclusion from it
    scope = _scope(result=result)
    said = _run(_cell(CH1, 'rows4 = result["rows"]'), scope)
    assert said.startswith("No conclusion can be drawn from this run: rows not reliable")


@pytest.mark.parametrize(("small_ok", "large_ok"), [(True, True), (True, False), (False, True)])
def test_each_goal_and_figure_carries_only_its_own_rows_flag(small_ok, large_ok):
    result = _arrays_result(small_ok, large_ok)
    summary, notes = result["summary"], "\n".join(bench.result_table(result).notes)
    for key, ok in (("goal_small", small_ok), ("goal_large", large_ok)):
        assert ("no verdict" in summary[key]) == (not ok), summary[key]
        assert any(v in summary[key] for v in VERDICTS) == ok, summary[key]
    for words, ok in (("added per small op, median", small_ok), ("added per small op, largest", small_ok),
                      ("overhead on large ops, median", large_ok)):  # fmt: skip
        (line,) = [li for li in notes.splitlines() if li.startswith(words)]
        assert line.endswith("(flagged)") == (not ok), line


def test_chapter_1_reference_table_reads_the_benchmarks_own_flags():
    from kit import reference

    source = _cell(CH1, "ref = reference.beside(")
    for small_ok, large_ok in ((False, True), (True, False)):
        result = _arrays_result(small_ok, large_ok)
        t = measure.Timing("float32", [0.01, 0.0101, 0.0102], 10)
        scope = _scope(result=result, reference=reference, half_speed={kit.devices()[0].name: (t, t)}, ratio=1.0)
        _run(source, scope)
        ref = scope["ref"]
        mine = {row[0]: row[1] for row in ref._cells()}
        assert mine["kit added per small op (median, µs)"].endswith("(flagged)") == (not small_ok)
        assert mine["kit overhead on large ops (median, %)"].endswith("(flagged)") == (not large_ok)
