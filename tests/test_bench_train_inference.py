"""kit.bench.train_inference: the MLP inference rows of `python -m kit bench train`."""

import sys

import pytest

from kit.bench import train_inference
from kit.bench.train_inference import SLICES, inference_rows


@pytest.fixture(scope="module")
def measured() -> tuple[list[str], list[dict], dict[str, str]]:
    """The variants in the order their calls ran while `inference_rows(quick=True)` measured them
    (one entry per run of consecutive calls of one variant), the rows and the summary."""
    runs: list[str] = []
    variants = {
        (train_inference.__file__, "numpy_mlp_forward"): "numpy",
        ("network_inference.py", "output"): "output",
        ("replay_inference.py", "output"): "planned",
    }

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        for (path, name), variant in variants.items():
            if code.co_name == name and code.co_filename.endswith(path) and (not runs or runs[-1] != variant):
                runs.append(variant)

    sys.setprofile(profile)
    try:
        rows, summary = inference_rows(quick=True)
    finally:
        sys.setprofile(None)
    return runs, rows, summary


def test_the_inference_variants_take_turns_within_each_repeat(measured):
    """Batch 1 answers in tens of microseconds: timed 0.2 s a variant one after another, each met
    other moments of the machine and full runs were flagged for spread. Each repeat runs in SLICES
    parts now, the variants in turn (a part of each as long as a repeat has calls to cut)."""
    runs, rows, _ = measured
    assert {r["case"].rsplit(": ", 1)[1] for r in rows} == {"NumPy (hand-written)", "Network.output", "planned"}
    assert SLICES >= 10
    # one turn a variant a warm-up, a calibration and each of the 3 repeats, for 2 batch sizes: 30
    # turns when each variant's calls of a repeat ran at once; twice that at the least in parts
    once = 3 * (1 + 1 + 3) * 2
    assert len(runs) >= 2 * once, f"{len(runs)} turns between variants"


def test_a_goal_line_without_a_verdict_has_its_reasons_in_the_summary(measured):
    """The goal lines said "see the warnings" and the bench printed none: which timing kit.measure
    flagged, and for what (spread, load), is now the summary's `inference_warnings`, row by row."""
    _, rows, summary = measured
    reasons = summary["inference_warnings"]
    said = reasons.split(" | ") if reasons != "none" else []
    goals = {"goal_inference_b1": (1, "planned"), "goal_output_b1": (1, "Network.output")}
    goals["goal_output_b256"] = (256, "Network.output")
    for key, (batch, variant) in goals.items():
        row, baseline = (f"MLP 784-256-10 inference b{batch}: {v}: " for v in (variant, "NumPy (hand-written)"))
        flagged_by = [w for w in said if w.startswith((row, baseline))]  # a ratio to a flagged NumPy too
        assert ("(flagged)" in summary[key]) == bool(flagged_by), (summary[key], reasons)
    cases = [r["case"] for r in rows]
    assert all(any(w.startswith(f"{c}: ") for c in cases) for w in said), said
