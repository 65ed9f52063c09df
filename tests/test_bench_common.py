"""kit.bench.common: what the benchmark modules share. Seconds per call from a real clock over a
counted number of calls; variants side by side, each called and timed per repeat; a range of
timings and a row's goal verdict worked by hand; a baseline in another dtype refused naming both;
the environment a stored result records (the commit as git itself says)."""

import datetime
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kit
from kit.bench import common
from kit.bench.common import min_max_ms, row_verdict, run_metadata, side_by_side, time_calls


def test_same_dtype_refuses_a_float64_baseline_beside_float32_kit():
    from kit.bench.train import same_dtype

    w = np.ones((4, 3), np.float32)
    same_dtype("NumPy forward", np.float32, np.ones((1, 4), np.float32), w)  # like for like: no error
    with pytest.raises(TypeError, match=r"NumPy forward: the baseline holds float64 beside kit's float32"):
        same_dtype("NumPy forward", np.float32, np.ones((1, 4)), w)
    with pytest.raises(TypeError, match="float64"):  # the answer gives a float64 computation away too
        same_dtype("NumPy forward", "float32", w, np.ones((1, 4)) @ w)


def test_time_calls_makes_the_calls_it_is_asked_for_and_no_others():
    calls = []
    seconds = time_calls(lambda: calls.append(sum(range(100))), number=7)
    assert len(calls) == 7 and seconds > 0  # no warm-up call


def test_side_by_side_times_every_variant_once_per_repeat():
    calls = {"a": 0, "b": 0}

    def variant(name):
        def fn():
            calls[name] += 1

        return fn

    seconds = side_by_side({"a": variant("a"), "b": variant("b")}, number=4, repeats=3)
    assert set(seconds) == {"a", "b"} and all(len(s) == 3 and min(s) > 0 for s in seconds.values())
    assert calls["a"] == calls["b"] >= 3 * 4  # each repeat runs `number` calls (plus a warm-up)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [([0.0012, 0.0034, 0.002], "1.2-3.4"), ([0.5], "500-500"), ([1.23456, 0.000123], "0.123-1.23e+03")],
)
def test_min_max_ms_is_the_range_in_milliseconds_to_3_figures(seconds, text):
    assert min_max_ms(seconds) == text


@pytest.mark.parametrize(
    ("ratio", "paired", "verdict"),
    [
        (0.9, [0.85, 0.9, 0.95, 0.92, 0.88], "met"),  # every repeat under the limit
        (1.2, [1.1, 1.2, 1.3, 1.15, 1.25], "NOT met"),  # every repeat over it
        (0.99, [0.9, 0.99, 1.1, 0.95, 1.05], "within the spread: not shown either way"),  # on both sides
    ],
)
def test_a_rows_verdict_is_the_goal_rule_on_the_median_of_its_paired_ratios(ratio, paired, verdict):
    assert row_verdict(ratio, 1.03, paired) == verdict


def test_a_baseline_in_a_torch_dtype_is_named_without_the_torch_prefix():
    torch = pytest.importorskip("torch")
    common.same_dtype("PyTorch step", "float32", torch.ones(2, dtype=torch.float32))  # like for like
    with pytest.raises(TypeError, match=r"PyTorch step: the baseline holds float64 beside kit's float32"):
        common.same_dtype("PyTorch step", np.float32, torch.ones(2, dtype=torch.float64), np.ones(2, np.float32))


def test_run_metadata_records_the_versions_the_backend_and_when():
    meta = run_metadata()
    assert meta["numpy"] == np.__version__ and meta["backend"] == kit.backend.name()
    when = datetime.datetime.fromisoformat(meta["utc"])
    assert when.tzinfo is not None and abs(datetime.datetime.now(datetime.UTC) - when).total_seconds() < 3600
    assert common.device_label() == kit.current_device().describe()


def test_git_commit_is_the_checkouts_head_as_git_says_it():
    root = Path(kit.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("kit runs from an install, not a checkout")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    commit = common.git_commit()
    assert commit in (head.stdout.strip(), head.stdout.strip() + "-dirty")
    assert run_metadata()["git_commit"] == commit
