"""Chapter 2, read against what runs: it says what "traced" means before its table uses it; section 7
sets the workspace step's two timings side by side with their flags; its workspace sentence and goal
line read the same per-repeat ratios; it withholds a reference ratio the reference's own report flags."""

from __future__ import annotations

import json

from _chapter_cells import cells as _cells
from _chapter_cells import holding as _cell
from _chapter_cells import source as _source
from _reports import flagged_report as _flagged_report

from kit import measure, prose, reference
from kit.measurement.measure import Timing

CH2 = "02_workspaces"


def _first_cell_saying(chapter: str, word: str) -> int:
    """The index of the first cell whose source or stored output holds `word`."""
    for i, c in enumerate(_cells(chapter)):
        outputs = json.dumps(c.get("outputs", []))
        if word in _source(c).lower() or word in outputs.lower():
            return i
    raise AssertionError(f"{chapter}: no cell says {word!r}")


def test_chapter_2_defines_traced_before_its_table_uses_it():
    first = _first_cell_saying(CH2, "traced")
    cell = _cells(CH2)[first]
    assert cell["cell_type"] == "markdown" and "tracemalloc" in _source(cell), _source(cell)
    from kit.bench.workspaces import _WORKSPACE_COLUMNS, _WORKSPACE_NOTES

    for column in _WORKSPACE_COLUMNS:  # every memory column is defined under the table too
        if "kib" in column:
            assert column in _WORKSPACE_NOTES, column
    assert "tracemalloc" in _WORKSPACE_NOTES["peak_traced_kib_per_iter"]


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


def _ch2_reconcile(bench: Timing, off: Timing) -> str:
    cell = _cell(CH2, "bench_ws, here_off")
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
    markdown = " ".join("".join(c["source"]) for c in _cells(CH2) if c["cell_type"] == "markdown")
    assert "again in section 7" not in markdown
    if "section 7 times it again" in markdown:
        assert "Section 2's benchmark timed the same workspace step" in _cell(CH2, "bench_ws, here_off")


def _ch2_cell(start: str) -> str:
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "02_workspaces.ipynb").read_text())
    (src,) = ["".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith(start)]
    return src


def _ch2_rows(plain_ms, ws_ms):
    rows = {}
    for name, ms in (("plain", plain_ms), ("workspace", ws_ms), ("caching", plain_ms)):
        ratios = [w / p for w, p in zip(ms, plain_ms)]
        rows[name] = {"regime": name, "ms_per_iter": sorted(ms)[len(ms) // 2], "ms_repeats": ms, "load": 0.0,
                      "ratio_to_plain": sorted(ratios)[len(ratios) // 2],
                      "ratio_to_plain_range": [min(ratios), max(ratios)], "kit_heap_allocs_per_iter": 0,
                      "held_kib": 0.0}  # fmt: skip
    return rows


def test_ch2_workspace_sentence_and_goal_line_read_the_same_per_repeat_ratios():
    import kit
    from kit import prose

    src = _ch2_cell("ws_row = by_regime")
    for plain_ms, ws_ms, expect, goal_word in (
        ([0.66, 0.70, 0.64], [0.70, 0.65, 0.67], "neither faster", "not shown either way"),
        ([0.66, 0.70, 0.64], [0.70, 0.74, 0.68], "slower in every repeat", "NOT met"),
    ):
        by_regime = _ch2_rows(plain_ms, ws_ms)
        ws = by_regime["workspace"]
        goal = measure.goal("workspace time / plain time", ws["ratio_to_plain"], "<=", 1.0,
                            per_repeat=tuple(ws["ratio_to_plain_range"]))  # fmt: skip
        shown = []

        def timing(name, rows=by_regime):
            return measure.Timing(name, [x / 1e3 for x in rows[name]["ms_repeats"]], 1, load=0.0)

        env = {
            "by_regime": by_regime,
            "timing": timing,
            "prose": prose,
            "measure": kit.measure,
            "kit": kit,
            "display": shown.append,
        }
        exec(src, env)
        text = " ".join(str(s) for s in shown)
        assert expect in text and goal_word in goal, (text, goal)


def test_ch2_withholds_a_reference_ratio_its_own_report_flags(tmp_path):
    from kit import prose

    _flagged_report(tmp_path)
    by_regime = _ch2_rows([0.66, 0.70, 0.64], [0.70, 0.65, 0.67])
    ref = reference.beside(
        {"workspace / plain time": by_regime["workspace"]["ratio_to_plain"]},
        {"workspace / plain time": "benchmarks.workspaces.result.rows[regime=workspace].ratio_to_plain"},
        directory=tmp_path,
        device="cpu:0",
    )
    shown = []
    env = {"ref": ref, "by_regime": by_regime, "reference": reference, "prose": prose, "display": shown.append}
    exec(_ch2_cell('ratio = "workspace / plain time"'), env)
    text = str(shown[0])
    assert "(per repeat 0.929-1.06)" in text and "0.833" not in text
    assert "Its own report flags the G1's (spread ±28% is wider than ±25%)" in text
