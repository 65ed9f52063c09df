"""kit.core.gc_window: ND4J's periodic GC window, off by default; on, at most one gc.collect() a window."""

import pytest

from kit import memory


def test_off_by_default_it_never_collects():
    assert memory.gc_stats()["enabled"] is False
    assert [memory.maybe_gc() for _ in range(5)] == [False] * 5
    assert memory.gc_stats()["calls"] == 0


def test_on_it_collects_once_then_waits_for_the_window():
    memory.toggle_periodic_gc(True)
    memory.set_auto_gc_window(60_000)  # a minute: no second collection inside this test
    assert memory.maybe_gc() is True
    assert [memory.maybe_gc() for _ in range(5)] == [False] * 5
    stats = memory.gc_stats()
    assert stats["calls"] == 1 and stats["seconds"] >= 0 and stats["window_ms"] == 60_000
    memory.reset_gc_stats()
    assert memory.gc_stats()["calls"] == 0 and memory.maybe_gc() is True  # a reset window opens again


def test_a_window_of_zero_turns_it_off():
    memory.toggle_periodic_gc(True)
    memory.set_auto_gc_window(0)
    assert memory.maybe_gc() is False and memory.gc_stats()["calls"] == 0


@pytest.mark.parametrize("ms", [-1, "100", None])
def test_a_window_that_is_not_milliseconds_is_refused_naming_it(ms):
    with pytest.raises(ValueError, match=rf"set_auto_gc_window\({ms!r}\): give milliseconds >= 0"):
        memory.set_auto_gc_window(ms)
