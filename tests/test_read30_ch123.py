"""Read 30's findings in chapters 1-3, as classes: a reference run's own flags reach its column and
every sentence that quotes it; a goal on a per-repeat ratio says "not shown either way" when the
ratios straddle the target; the copy row of the physical limits is compared only like for like;
the benchmark summaries under the HTML tables read as words."""

from __future__ import annotations

import json

from kit import bench, measure, reference


def _flagged_report(folder):
    """A reference report whose own summary flags its workspace row and its small-op goal (as the
    H100 run of 2026-11-24 does: spread ±28%, goal_small marked unreliable)."""
    report = {
        "kind": "kit gpu-check",
        "machine": {"gpu": "G1", "date": "2026-11-24T00:00:00+00:00", "commit": "0123456789"},
        "parts": {
            "benchmarks": {
                "workspaces": {
                    "result": {
                        "rows": [
                            {"regime": "plain", "ms_per_iter": 1.18, "spread": 0.24, "ratio_to_plain": 1.0,
                             "kit_heap_allocs_per_iter": 24.0},
                            {"regime": "workspace", "ms_per_iter": 1.05, "spread": 0.28, "ratio_to_plain": 0.833,
                             "kit_heap_allocs_per_iter": 0.0},
                        ],
                        "summary": {"warnings": "spread ±28% is wider than ±25%"},
                    }
                },
                "arrays": {
                    "result": {
                        "rows": [{"op": "exp", "elements": 100, "added_us": 7.0, "reliable": "NO"}],
                        "summary": {
                            "small_added_us_median": 2.5,
                            "large_overhead_pct_median": 1.0,
                            "goal_small": "added per small op (median): 2.5 µs -> NOT met (goal <= 1.5 µs) "
                            "[unreliable measurement: see the warnings]",
                            "goal_large": "overhead on large ops (median): 1 % -> met (goal <= 2 %)",
                        },
                    }
                },
            },
            "chapters": {"01.ipynb": {"figures": {"half": 0.99, "other": 2.0}, "flagged": {"half": "busy"}}},
        },
    }  # fmt: skip
    (folder / "g1.json").write_text(json.dumps(report))
    return report


def test_a_reference_figure_its_own_report_flags_is_marked_in_its_column_and_refused_by_quote(tmp_path):
    _flagged_report(tmp_path)
    path = "benchmarks.workspaces.result.rows[regime={}].{}"
    picks = {
        "ratio": path.format("workspace", "ratio_to_plain"),
        "plain ms": path.format("plain", "ms_per_iter"),
        "allocations": path.format("workspace", "kit_heap_allocs_per_iter"),
        "small": "benchmarks.arrays.result.summary.small_added_us_median",
        "large": "benchmarks.arrays.result.summary.large_overhead_pct_median",
    }
    measured = {"ratio": 1.06, "plain ms": 0.67, "allocations": 0, "small": 1.1, "large": 3.0, "half": 0.13,
                "other": 1.0}  # fmt: skip
    ref = reference.beside(measured, picks, directory=tmp_path, device="cpu:0")
    cells = {r[0]: r for r in ref._cells()}
    assert cells["ratio"][2] == "0.833 (flagged)"  # the row's spread, ±28%, is over the limit
    assert cells["small"][2] == "2.5 (flagged)"  # the goal line it feeds is marked unreliable
    assert cells["half"][2] == "0.99 (flagged)"  # the chapter run recorded it as flagged
    # a count is not a timing; an unflagged row, goal or chapter figure stays unmarked
    for name, shown in (("allocations", "0"), ("plain ms", "1.18"), ("large", "1"), ("other", "2")):
        assert cells[name][2] == shown, name
    assert "spread ±28% is wider than ±25%" in ref.note and "'added per small op (median)'" in ref.note
    assert "(flagged)" in ref._repr_html_()
    [(_run, value, why)] = ref.quote("ratio")
    assert value == 0.833 and "±28%" in why
    assert ref.quote("plain ms")[0][2] == ""


def test_gpu_check_records_the_figures_a_chapter_showed_as_flagged():
    busy = measure.Timing("w", [0.010, 0.011, 0.010], 10, load=0.5)
    reference.beside({"read30 q": busy, "read30 clean": 1.0}, device="cpu:0")
    flags = reference.reported_flags()
    assert "read30 q" in flags and "read30 clean" not in flags


def test_a_goal_on_per_repeat_ratios_that_straddle_the_target_is_not_a_verdict():
    line = measure.goal("workspace time / plain time", 1.06, "<=", 1, per_repeat=(0.93, 1.15))
    assert line.endswith("1.06 (per repeat 0.93-1.15) -> within the spread: not shown either way (goal <= 1)")
    assert "NOT met" in measure.goal("t", 1.06, "<=", 1, per_repeat=(1.01, 1.15))
    assert "-> met" in measure.goal("t", 0.9, "<=", 1, per_repeat=(0.85, 0.99))
    # no range: the verdict reads the figure alone, as before
    assert measure.goal("t", 1.06, "<=", 1) == "t: 1.06 -> NOT met (goal <= 1)"


def test_the_workspace_benchmark_goal_prints_its_per_repeat_range():
    result = bench.bench_workspaces(quick=True)
    ws = {r["regime"]: r for r in result["rows"]}["workspace"]
    lo, hi = ws["ratio_to_plain_range"]
    assert lo <= ws["ratio_to_plain"] <= hi
    goal = result["summary"]["goal_time"]
    assert f"(per repeat {lo:.3g}-{hi:.3g})" in goal
    by = {r["regime"]: r for r in result["rows"]}
    timings = [measure.Timing(n, [x / 1e3 for x in by[n]["ms_repeats"]], 1, load=by[n]["load"]) for n in by]
    flagged = not all(t.reliable for t in timings if t.name in ("plain", "workspace"))  # the two the goal reads
    # a flagged run's goal gives no verdict at all (kit.goals), a clean one none only where the range straddles 1
    assert ("not shown either way" in goal) == (lo <= 1 < hi and not flagged)
    assert ("no verdict" in goal) == flagged
    # the summary under the HTML table reads as words, not as the JSON's keys
    notes = "\n".join(bench.result_table(result).notes)
    assert "workspace capacity (bytes): " in notes and "workspace_capacity_bytes" not in notes
    assert "goal for time: workspace time / plain time" in notes
    assert "workspace_capacity_bytes: " in bench.format_result(result)  # the text form keeps the keys


def _limits(copy_like: bool, interleaved: bool, kit_range=(39.0, 41.0)):
    m = {"size": 8, "cupy_median": 50.0, "cupy_min_max": [49.0, 51.0], "kit_median": 40.0, "kit_min_max": kit_range}
    p = {
        "method": "m",
        "d2d_copy_gb_s": {"median": 100.0, "min": 99.0, "max": 101.0},
        "kit_dup_gb_s": {"median": 90.0, "min": 89.0, "max": 91.0},
        "matmul_float32_tflops": m,
        "matmul_float16_tflops": m,
    }
    if copy_like:
        p["cupy_copy_gb_s"] = {"median": 95.0, "min": 94.0, "max": 96.0}
    if interleaved:
        p["interleaved"] = True
    return {"machine": {"gpu": "G", "date": "2026-12-01T00:00:00+00:00"}, "parts": {"physical_limits": p}}


def test_a_copy_that_is_not_like_for_like_gets_no_ratio_and_no_direction():
    old = _limits(copy_like=False, interleaved=False)
    sentence = reference.physical_limits_sentence(old)
    assert "device-to-device copy: not like for like in this run" in sentence
    assert "so no direction is drawn from it" in sentence and "kit 90.0 against" not in sentence
    # the matmuls: the same call both ways, but not interleaved: no direction even with ranges apart
    assert "not interleaved, so neither a ratio nor a direction is drawn" in sentence and "lies below" not in sentence
    assert "% of it" not in sentence  # no ratio of figures timed one after the other, as in the table
    table = str(reference.physical_limits_table(old))
    assert "not like for like" in table and "90.0%" not in table and "89.8%" not in table
    new = reference.physical_limits_sentence(_limits(copy_like=True, interleaved=True))
    assert "device-to-device copy: kit 90.0 against CuPy's 95.0, 94.7% of it; kit's whole range" in new
    assert "float32 matmul 8^3: kit 40.0 against CuPy's 50.0, 80.0% of it; kit's whole range" in new
    assert "94.7%" in str(reference.physical_limits_table(_limits(copy_like=True, interleaved=True)))


def test_the_shipped_h100_reference_marks_its_own_flagged_figures():
    runs = [r for r in reference.reference_runs() if "h100" in r.get("file", "")]
    for run in runs:
        pick = "benchmarks.workspaces.result.rows[regime=workspace].ratio_to_plain"
        if reference.lookup(run, pick) is not None and "unreliable" in str(
            reference.lookup(run, "benchmarks.workspaces.result.summary.goal_time")
        ):
            assert reference.reference_flag(run, pick)


def _ch2_cell(start: str) -> str:
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "02_workspaces.ipynb").read_text())
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


def test_ch1_does_not_quote_a_reference_per_op_cost_its_own_report_flags(tmp_path):
    from pathlib import Path

    from kit import prose

    report = _flagged_report(tmp_path)
    report["parts"]["chapters"]["01.ipynb"] = {"figures": {"float16 speed / float32 speed": 0.99}, "mode": "quick"}
    (tmp_path / "g1.json").write_text(json.dumps(report))
    added = "kit added per small op (median, µs)"
    ref = reference.beside(
        {added: 1.1, "float16 speed / float32 speed": 0.13},
        {added: "benchmarks.arrays.result.summary.small_added_us_median"},
        directory=tmp_path,
        device="cpu:0",
    )
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "01_arrays_and_backends.ipynb").read_text())
    (src,) = ["".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith("HALF, ADDED =")]
    shown = []
    env = {"ref": ref, "reference": reference, "prose": prose, "display": shown.append}
    exec(src, {**env, "HALF_QUICK": 1_000_000, "HALF_FULL": 8_000_000})
    text = str(shown[0])
    assert "2.5" not in text and "is one that run's own report flags, so it is not quoted here" in text
