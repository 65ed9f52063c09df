"""kit.measure: autorange, interleaving, spread, load readings and the verdicts (no timing asserted)."""

import subprocess
import sys
import time

import pytest

from kit import measure


def test_autorange_reaches_the_minimum_time_with_the_fewest_calls():
    calls = []
    assert measure.autorange(lambda: calls.append(1), min_time=0.02) >= 10  # a no-op needs many calls
    slow = measure.autorange(lambda: time.sleep(0.03), min_time=0.02)
    assert slow == 1  # one call already lasts long enough
    with pytest.raises(ValueError, match="min_time"):
        measure.autorange(lambda: None, min_time=0)


def test_compare_interleaves_and_rotates_the_order():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "abc"}
    out = measure.compare(fns, repeats=3, number=1, warmup=False)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {k: len(t.seconds) for k, t in out.items()} == {"a": 3, "b": 3, "c": 3}
    same = measure.compare(fns, repeats=2, min_time=0.001, same_number=True)
    assert len({t.number for t in same.values()}) == 1
    with pytest.raises(ValueError, match="repeats"):
        measure.compare(fns, repeats=0)
    with pytest.raises(ValueError, match="at least one variant"):
        measure.compare({})


def test_median_spread_and_flags_follow_the_numbers():
    t = measure.Timing("x", [1.0, 1.1, 0.9, 1.0, 1.0], number=1, load=0.0)
    assert t.median == 1.0 and t.spread == pytest.approx(0.1) and t.reliable
    assert "±10%" in str(t) and "UNRELIABLE" not in str(t)
    wide = measure.Timing("x", [1.0, 2.0, 0.5], number=1)
    assert not wide.reliable and "spread" in wide.warnings[0]
    busy = measure.Timing("x", [1.0, 1.0], number=1, load=0.6)
    assert not busy.reliable and "60%" in busy.warnings[0] and "UNRELIABLE" in str(busy)


def test_speedup_above_the_device_count_is_flagged():
    assert measure.speedup_warnings(1.8, 2) == []
    assert measure.speedup_warnings(2.01, 2) == []  # within timer tolerance
    flagged = measure.speedup_warnings(9.0, 2, shared=True)
    assert any("exceeds the 2 device" in w for w in flagged) and any("efficiency 4.50 > 1" in w for w in flagged)
    assert measure.speedup_warnings(3.0, 4, shared=True, cores=2)  # 4 slots cannot beat 2 shared cores


def test_goal_says_met_or_not_with_the_figure():
    assert measure.goal("added per op", 1.3, "<=", 2, "us") == "added per op: 1.3 us -> met (goal <= 2 us)"
    assert "NOT met" in measure.goal("overhead", 3.5, "<=", 2, "%")
    assert "unreliable" in measure.goal("x", 1, "<", 2, reliable=False)
    with pytest.raises(ValueError, match="op"):
        measure.goal("x", 1, "==", 1)


def test_load_reading_sees_a_busy_competing_process():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with measure.machine_load() as load:
            time.sleep(1.0)  # this process idles; the spinner runs
    finally:
        spinner.kill()
        spinner.wait()
    assert load.wall >= 1.0
    assert load.busy_cores > 0.3  # a spinning process gets well over a third of a core in a second
    assert load.own < 0.05


def test_format_seconds():
    assert measure.format_seconds(1.5) == "1.5 s"
    assert measure.format_seconds(0.0123) == "12.3 ms"
    assert measure.format_seconds(4.2e-6) == "4.2 us"
