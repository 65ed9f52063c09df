"""A reference report written the way scripts/gpu_check.py writes one, whose own summary flags some
of its figures: for the tests of kit.reference and of the chapters that quote it."""

import json


def flagged_report(folder):
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
