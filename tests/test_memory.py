"""kit.memory: counters, the caching allocator (hits, limits, safety) and the GC window."""

from __future__ import annotations

import contextlib
import gc
import sys
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


# where a result's memory comes from, as chapter 1 section 3 says it: the calls each op makes, traced
# (sys.setprofile on kit.memory.allocate and kit.memory.count, the real functions), op by op, on the
# plain heap, in a workspace, with the cache on and while a memory timeline records


class _Calls:
    """How many times each traced function of kit.memory was entered while the block ran."""

    def __init__(self) -> None:
        self.codes = {memory.allocate.__code__: "allocate", memory.count.__code__: "count"}
        self.n = dict.fromkeys(self.codes.values(), 0)

    def _profile(self, frame, event, arg):
        if event == "call":
            name = self.codes.get(frame.f_code)
            if name is not None:
                self.n[name] += 1

    def __enter__(self) -> _Calls:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)


def _traced(fn):
    with _Calls() as calls:
        result = fn()
    return result, calls.n


def _arrays():
    kit.seed(0)
    x, y = kit.rand((4, 6)) + 0.5, kit.rand((4, 6)) + 0.5
    return x, y, kit.rand((6, 3)), x > 1.0, y > 1.0


NUMPY_ALLOCATES = {
    "x + y": lambda x, y, w, p, q: x + y,
    "x - y": lambda x, y, w, p, q: x - y,
    "x * y": lambda x, y, w, p, q: x * y,
    "x / y": lambda x, y, w, p, q: x / y,
    "x // y": lambda x, y, w, p, q: x // y,
    "x % y": lambda x, y, w, p, q: x % y,
    "x ** y": lambda x, y, w, p, q: x**y,
    "x < y": lambda x, y, w, p, q: x < y,
    "x >= y": lambda x, y, w, p, q: x >= y,
    "x == y": lambda x, y, w, p, q: x == y,
    "p & q": lambda x, y, w, p, q: p & q,
    "p | q": lambda x, y, w, p, q: p | q,
    "x + 1": lambda x, y, w, p, q: x + 1,
    "2.0 * x": lambda x, y, w, p, q: 2.0 * x,
    "1 - x": lambda x, y, w, p, q: 1 - x,
    "-x": lambda x, y, w, p, q: -x,
    "abs(x)": lambda x, y, w, p, q: abs(x),
    "x.exp()": lambda x, y, w, p, q: x.exp(),
    "x.tanh()": lambda x, y, w, p, q: x.tanh(),
    "x.log()": lambda x, y, w, p, q: x.log(),
    "x.sqrt()": lambda x, y, w, p, q: x.sqrt(),
    "x.maximum(y)": lambda x, y, w, p, q: x.maximum(y),
    "x @ w": lambda x, y, w, p, q: x @ w,
    "x.sum()": lambda x, y, w, p, q: x.sum(),
    "x.sum(axis=0)": lambda x, y, w, p, q: x.sum(axis=0),
    "x.mean(axis=1)": lambda x, y, w, p, q: x.mean(axis=1),
    "x.max(axis=1)": lambda x, y, w, p, q: x.max(axis=1),
    "x.min()": lambda x, y, w, p, q: x.min(),
}


ALLOCATE_ALWAYS = {
    "kit.ones((3,))": lambda x, y, w, p, q: kit.ones((3,)),
    "kit.zeros((2, 2))": lambda x, y, w, p, q: kit.zeros((2, 2)),
    "x.clip(0, 1)": lambda x, y, w, p, q: x.clip(0.0, 1.0),
    "x.argmax(axis=1)": lambda x, y, w, p, q: x.argmax(axis=1),
    "float16 sum": lambda x, y, w, p, q: x.astype("float16").sum(),
}


@pytest.mark.parametrize("name", sorted(NUMPY_ALLOCATES))
def test_on_the_plain_cpu_heap_numpy_allocates_and_kit_counts(name):
    x, y, w, p, q = _arrays()
    before = kit.memory.heap_allocations(this_thread=True)
    out, calls = _traced(lambda: NUMPY_ALLOCATES[name](x, y, w, p, q))
    assert calls == {"allocate": 0, "count": 1}, name
    assert kit.memory.heap_allocations(this_thread=True) - before == 1
    assert out._owner is None and out._data.base is None  # NumPy's own array, not a view of one kit made


@pytest.mark.parametrize("name", sorted(ALLOCATE_ALWAYS))
def test_ops_section_3_does_not_name_ask_kit_memory_allocate_on_the_heap(name):
    x, y, w, p, q = _arrays()
    _, calls = _traced(lambda: ALLOCATE_ALWAYS[name](x, y, w, p, q))
    assert calls["allocate"] >= 1, name


@pytest.mark.parametrize("name", sorted(NUMPY_ALLOCATES))
def test_inside_a_workspace_every_op_asks_kit_memory_allocate_and_is_carved(name):
    x, y, w, p, q = _arrays()
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), f"ISSUE45_{name}")
    try:
        for _ in range(2):  # the first cycle learns the arena's size; the second carves from it
            with ws:
                out, calls = _traced(lambda: NUMPY_ALLOCATES[name](x, y, w, p, q))
                assert out._owner is ws
        assert calls == {"allocate": 1, "count": 0}, name  # carved: no heap allocation to count
    finally:
        ws.destroy()


@pytest.mark.parametrize("regime", ["cache", "timeline"])
def test_with_the_cache_on_or_a_timeline_recording_every_op_asks_kit_memory_allocate(regime):
    x, y, w, p, q = _arrays()
    stack = contextlib.ExitStack()
    if regime == "cache":
        kit.memory.set_max_host_cache(16 << 20)
        stack.callback(kit.memory.set_max_host_cache, 0)
    else:
        stack.enter_context(kit.memory_timeline())
    with stack:
        for name, op in NUMPY_ALLOCATES.items():
            _, calls = _traced(lambda op=op: op(x, y, w, p, q))
            assert calls == {"allocate": 1, "count": 1}, name  # allocate_heap counts it


def test_chapter_1_loops_make_one_counted_numpy_result_per_op_and_no_allocate_call():
    # the opening loop, tanh(x @ w + b), and section 3's count, (x + 1) * 2
    kit.seed(0)
    x0, w0, b0 = kit.rand((64, 256)), kit.rand((256, 128)), kit.zeros((128,))
    _, calls = _traced(lambda: (x0 @ w0 + b0).tanh())
    assert calls == {"allocate": 0, "count": 3}
    x = kit.arange(6, dtype="float32").reshape(2, 3)
    _, calls = _traced(lambda: ((x + 1) * 2)[:, 1:].T)
    assert calls == {"allocate": 0, "count": 2}


@pytest.mark.skipif(not kit.backend.gpu_status()[0], reason="no usable GPU here: section 3's GPU sentence")
def test_on_a_gpu_cupy_allocates_operators_of_one_dtype_and_reductions_and_allocate_the_rest():
    dev = next(d for d in kit.devices() if d.kind == "gpu")
    with kit.device(dev):
        x, y = kit.rand((4, 6)) + 0.5, kit.rand((4, 6)) + 0.5
        for op in (lambda: x + y, lambda: x * y, lambda: x < y, lambda: x.sum(), lambda: x.max(axis=1)):
            assert _traced(op)[1] == {"allocate": 0, "count": 1}
        for op in (lambda: x / y, lambda: x + 1, lambda: x.exp(), lambda: x.astype("float16").sum()):
            assert _traced(op)[1]["allocate"] >= 1
