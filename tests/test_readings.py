"""kit.readings: one dictionary with every reading a panel or a test asks "how much?" about, each taken
from the counter it names."""

import kit
from kit import memory
from kit.monitor import readings


def test_stats_holds_every_reading():
    stats = readings.stats()
    assert set(stats) == {"heap_allocations", "heap_bytes", "heap_by_device", "cache", "workspaces", "rss_bytes",
                          "gpus", "gc"}  # fmt: skip
    assert stats["gc"] == memory.gc_stats() and stats["cache"] == memory.cache_stats()
    assert isinstance(stats["gpus"], list) and stats["rss_bytes"] == int(stats["rss_bytes"]) > 0


def test_the_heap_figures_add_up_the_per_device_counters():
    before = readings.stats()
    x = kit.zeros((1000,), dtype="float32")
    after = readings.stats()
    assert after["heap_bytes"] - before["heap_bytes"] == x.nbytes == 4000
    assert after["heap_allocations"] - before["heap_allocations"] == 1
    assert after["heap_bytes"] == sum(b for _, b in after["heap_by_device"].values())
    assert after["heap_allocations"] == sum(n for n, _ in after["heap_by_device"].values())


def test_a_workspace_open_is_read_with_its_stats():
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), "READINGS_WS")
    try:
        with ws:
            kit.ones((16,))
        names = [w["name"] for w in readings.stats()["workspaces"]]
        assert "READINGS_WS" in names
    finally:
        ws.destroy()


def test_gpu_memory_has_one_entry_per_gpu():
    gpus = readings.gpu_memory()
    assert [g["device"] for g in gpus] == [f"gpu:{i}" for i in range(len(gpus))]
    for g in gpus:
        assert 0 <= g["pool_used_bytes"] <= g["pool_total_bytes"]
