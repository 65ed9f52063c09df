"""kit.memory: counters, the caching allocator (hits, limits, safety) and the GC window."""

import gc
import threading

import numpy as np
import pytest

import kit
from kit import memory


def test_counters_count_calls_and_bytes_per_device():
    before_n, before_b = memory.heap_allocations(this_thread=True), memory.heap_bytes(this_thread=True)
    kit.zeros((10, 10), dtype="float64")
    assert memory.heap_allocations(this_thread=True) - before_n == 1
    assert memory.heap_bytes(this_thread=True) - before_b == 800
    assert "cpu:0" in memory.counters()


def test_counters_of_threads_add_up():
    memory.reset_counters()

    def work():
        for _ in range(50):
            kit.ones((4,))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert memory.heap_allocations("cpu:0") == 150


def test_ended_threads_leave_their_counts_and_no_slot():
    """A thread's counters retire when it ends: its counts stay in the totals, the list of live
    threads' counters does not grow by one per thread (a server starting a thread per request)."""
    from kit.state import STATE

    memory.reset_counters()
    gc.collect()
    live_before = len(STATE.thread_counters)

    def work():
        for _ in range(5):
            kit.ones((4,))

    for _ in range(40):
        t = threading.Thread(target=work)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive()
    gc.collect()
    assert memory.heap_allocations("cpu:0") == 200  # 40 threads x 5, none lost
    assert memory.heap_bytes("cpu:0") == 200 * 4 * np.dtype(kit.get_default_dtype()).itemsize
    assert len(STATE.thread_counters) <= live_before + 1  # at most a thread still being torn down
    memory.reset_counters()
    assert memory.heap_allocations("cpu:0") == 0  # a reset clears the retired counts too


def test_cache_reuses_freed_blocks_and_counts_hits():
    memory.set_max_host_cache(1 << 20)
    memory.purge_cache()
    s0 = memory.cache_stats()
    for _ in range(10):
        x = kit.ones((256,))
        del x
    s1 = memory.cache_stats()
    assert s1["misses"] - s0["misses"] == 1 and s1["hits"] - s0["hits"] == 9


def test_cache_never_recycles_a_block_something_still_points_to():
    memory.set_max_host_cache(1 << 20)
    memory.purge_cache()
    x = kit.full((64,), 5.0)
    raw = x.numpy()  # a NumPy view of the cached block
    view = x[:8]  # a kit view of it
    del x
    gc.collect()
    y = kit.full((64,), 7.0)  # must not land in the block `raw` still shows
    assert raw[0] == 5.0 and view.numpy()[0] == 5.0 and y.numpy()[0] == 7.0
    assert not np.shares_memory(raw, y.numpy())


def test_a_cached_block_returns_exactly_when_the_last_array_over_it_is_gone():
    """The lease owns the block: not back while any NDArray, kit view or raw NumPy view of it
    lives, and back (reused by the next request of its size) as soon as the last one goes --
    the old guess by reference count kept a block out of the cache for good once a raw view
    had outlived its NDArray."""
    memory.set_max_host_cache(1 << 20)
    memory.purge_cache()
    cached = lambda: memory.cache_stats()["cached_bytes"].get("cpu:0", 0)  # noqa: E731
    x = kit.full((64,), 5.0)  # 256 bytes: one bucket
    raw = x.numpy()[3:]  # a raw NumPy view of a view of the block
    view = x[:8]
    del x
    assert cached() == 0  # the kit view still points into it
    del view
    gc.collect()
    assert cached() == 0 and raw[0] == 5.0  # the raw view still does
    del raw
    assert cached() == 256  # the last one is gone: the block is free again, at once
    hits = memory.cache_stats()["hits"]
    y = kit.zeros((64,))
    assert memory.cache_stats()["hits"] == hits + 1 and cached() == 0 and y.numpy().sum() == 0


def test_cache_limits():
    memory.set_max_host_cache(1024)
    memory.purge_cache()
    x = kit.ones((4096,))  # 16 KiB: larger than the whole cache
    del x
    assert memory.cache_stats()["cached_bytes"].get("cpu:0", 0) == 0
    memory.set_max_host_cache(1 << 20)
    memory.set_max_cacheable_length(512)
    y = kit.ones((1024,))  # 4 KiB > cacheable length: plain heap
    assert "cached" not in repr(y)
    memory.set_max_cacheable_length(96 << 20)
    with pytest.raises(ValueError, match="set_max_host_cache"):
        memory.set_max_host_cache(-1)


def test_cache_off_is_plain_allocation():
    memory.set_max_host_cache(0)
    s0 = memory.cache_stats()
    kit.ones((10,))
    assert memory.cache_stats()["misses"] == s0["misses"]


def test_periodic_gc_window():
    memory.reset_gc_stats()
    assert memory.maybe_gc() is False  # off by default (ND4J since beta4)
    memory.toggle_periodic_gc(True)
    memory.set_auto_gc_window(10_000)
    calls = [memory.maybe_gc() for _ in range(50)]
    assert calls.count(True) == 1  # at most one collection per window
    memory.set_auto_gc_window(0)
    assert memory.maybe_gc() is False
    stats = memory.gc_stats()
    assert stats["calls"] == 1 and stats["seconds"] > 0
    with pytest.raises(ValueError, match="milliseconds"):
        memory.set_auto_gc_window(-5)


def test_stats_has_every_reading():
    ws = kit.get_workspace_for_current_thread(name="STATS")
    with ws:
        kit.ones((4,))
    s = kit.readings.stats()
    assert s["rss_bytes"] > 10 << 20 and s["heap_allocations"] >= 0
    assert any(w["name"] == "STATS" and w["cycles"] == 1 for w in s["workspaces"])
    assert set(s) >= {"cache", "gpus", "gc", "heap_by_device"}


def test_empty_goes_through_the_one_allocation_function():
    before = memory.heap_allocations(this_thread=True)
    x = kit.empty((2, 3), dtype="float64")
    assert isinstance(x, kit.NDArray) and x.shape == (2, 3) and x.dtype == np.float64
    assert memory.heap_allocations(this_thread=True) == before + 1


def test_a_block_that_comes_back_while_its_thread_holds_the_cache_lock_does_not_deadlock():
    """The weak-reference callback that gives a block back can run (from the garbage collector)
    on a thread inside alloc, stats or purge, which hold the cache's lock: it must not wait for
    itself. Here the last view goes while this thread holds the lock, in a thread bounded by a
    timeout so that a deadlock fails the test instead of hanging it."""
    from kit.state import STATE

    memory.set_max_host_cache(1 << 20)
    memory.purge_cache()
    done = threading.Event()

    def give_back_under_the_lock():
        view = kit.ones((64,)).numpy()[1:]
        with STATE.cache._lock:
            del view  # the block comes back here, inside the lock
        done.set()

    worker = threading.Thread(target=give_back_under_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert done.is_set(), "giving a block back under the cache's own lock deadlocked"
    assert memory.cache_stats()["cached_bytes"].get("cpu:0", 0) == 256


def test_the_heap_path_of_a_workspace_manager_with_the_cache_on_trains():
    """LayerWorkspaceMgr.create's heap path (mode NONE, or BYPASS_EVERYTHING) with the host cache
    on built its array with the device where the owner goes (AttributeError: 'Device' object has no
    attribute '_gen'); it is the path every NONE-mode step takes on a GPU."""
    from kit.data import ArrayIterator, DataSet
    from kit.nn import Sgd, mlp

    rng = np.random.default_rng(0)
    data = DataSet(rng.random((48, 8)), rng.integers(0, 3, 48), num_classes=3)
    memory.set_max_host_cache(1 << 20)
    scores = {}
    for mode in ("NONE", "SEPARATE"):
        net = mlp(8, hidden=(8,), n_out=3, updater=Sgd(0.05), seed=1, training_workspace_mode=mode)
        net.fit(ArrayIterator(data, 16), epochs=1)
        scores[mode] = net.score(data)
    kit.set_debug_mode("BYPASS_EVERYTHING")
    net = mlp(8, hidden=(8,), n_out=3, updater=Sgd(0.05), seed=1)
    net.fit(ArrayIterator(data, 16), epochs=1)
    kit.set_debug_mode("DISABLED")
    assert np.isclose(scores["NONE"], scores["SEPARATE"]) and np.isclose(net.score(data), scores["NONE"])
    assert memory.cache_stats()["hits"] > 0


def _address(raw):
    return raw.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_an_aligned_heap_buffer_starts_on_a_cache_line_and_counts_what_it_allocated(dtype):
    """allocate_aligned: the start on an ALIGNMENT boundary whatever NumPy's allocator gave (it
    aligns to 16 bytes), every element of the buffer usable, the room to move the start counted."""
    dev = kit.devices.as_device("cpu:0")  # the host: CuPy's pool aligns on its own
    for n in (1, 7, 1000, 535_818):  # sizes NumPy places differently
        before = memory.heap_allocations(this_thread=True), memory.heap_bytes(this_thread=True)
        raw, owner = memory.allocate_aligned((n,), np.dtype(dtype), dev)
        after = memory.heap_allocations(this_thread=True), memory.heap_bytes(this_thread=True)
        assert owner is None and _address(raw) % memory.ALIGNMENT == 0
        assert raw.shape == (n,) and raw.dtype == np.dtype(dtype) and raw.flags.c_contiguous and raw.flags.writeable
        raw[...] = np.arange(n) % 100  # every element writable, none shared with another buffer
        assert raw[-1] == (n - 1) % 100
        assert after == (before[0] + 1, before[1] + n * np.dtype(dtype).itemsize + memory.ALIGNMENT)


def test_a_network_s_flat_buffers_start_on_cache_lines():
    """The parameters, gradients and updater state BLAS reads and writes: each starts on a line, and
    so do the first layer's weights (the largest matrix product of an MLP reads and writes them)."""
    from kit.nn import Adam, mlp

    net = mlp(784, hidden=(512, 256), n_out=10, updater=Adam(1e-3))
    for name, buf in [("params", net.flat_params), ("grads", net.flat_grads), *net.updater_state.items()]:
        assert _address(buf.data) % memory.ALIGNMENT == 0, name
        assert buf.data.shape == (net.num_params,), name
        assert name == "params" or not buf.data.any(), name  # gradients and updater state start at 0
    first = net.layers[0]
    assert _address(first.params["W"].data) % memory.ALIGNMENT == 0
    assert _address(first.grads["W"].data) % memory.ALIGNMENT == 0


def test_an_aligned_buffer_with_the_cache_on_comes_from_the_cache():
    dev = kit.devices.as_device("cpu:0")
    memory.set_max_host_cache(64 << 20)
    try:
        _, lease = memory.allocate_aligned((4096,), np.dtype("float32"), dev)
        assert lease is not None  # the cache's lease owns it, as every cached block
    finally:
        memory.set_max_host_cache(0)


def test_an_updater_swapped_in_gets_its_state_on_cache_lines():
    from kit.nn import Adam, Sgd, mlp

    net = mlp(784, hidden=(500,), n_out=10, updater=Sgd(0.1))
    net.updater = Adam(1e-3)
    assert sorted(net.updater_state) == ["m", "v"]
    for name, buf in net.updater_state.items():
        assert _address(buf.data) % memory.ALIGNMENT == 0 and not buf.data.any(), name
