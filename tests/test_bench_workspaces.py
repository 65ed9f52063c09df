"""kit.bench.workspaces: the goal line reads the per-repeat ratios, and the summary under the HTML
table reads as words."""

from kit import bench, measure


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
