"""kit.timeline: the memory timeline agrees with the workspaces' and the heap's own counters, and
records nothing once it is off."""

import gc
import json
import threading
import weakref

import pytest
from _timeline_run import batches, trained_in_timeline

import kit
from kit import memory
from kit.data import ArrayIterator, DataSet, load_digits
from kit.monitor.timeline import FIELDS, KINDS, TimelineError
from kit.nn import ArrayType, Sgd, mlp
from kit.parallel import ParallelWrapper
from kit.state import STATE
from kit.workspaces.workspace import AllocationPolicy, LearningPolicy, ResetPolicy, SpillPolicy, WorkspaceConfig


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture
def trained(digits):
    return trained_in_timeline(digits[0])


def test_cycle_bytes_and_peak_agree_with_each_workspace(trained):
    tl, workspaces = trained
    assert {n.rsplit("/", 1)[1] for n in workspaces} == {
        "WS_ALL_LAYERS_ACT",
        "WS_LAYER_WORKING_MEM",
        "WS_UPDATER_WORKING_MEM",
        "WS_ACTIVATION_GRAD_0",  # the gradients' two slots, lent in turn
        "WS_ACTIVATION_GRAD_1",
    }
    for name, ws in workspaces.items():
        mine = [e for e in tl.events if e["workspace"] == name]
        assert max(e["cycle"] for e in mine) == ws.cycles
        last = [e for e in mine if e["cycle"] == ws.cycles and e["kind"] in ("alloc", "spill")]
        assert sum(e["nbytes"] for e in last) == ws.last_cycle_bytes > 0, name
        carved = [e["offset"] + e["nbytes"] for e in mine if e["kind"] == "alloc"]
        assert max(carved) == ws.peak_used, name
    acts = next(ws for n, ws in workspaces.items() if n.endswith("WS_ALL_LAYERS_ACT"))
    last = [e for e in tl.events if e["workspace"] == acts.name and e["cycle"] == acts.cycles]
    assert {e["kind"] for e in last} == {"alloc", "reset"}  # learned: the last cycle carved everything
    assert sum(e["nbytes"] for e in last if e["kind"] == "alloc") == acts.last_cycle_bytes


def test_every_event_has_every_key_and_a_known_kind(trained):
    tl, _ = trained
    events = tl.events
    assert len(events) > 50
    type_names = {t.name for t in ArrayType}
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[0] >= 0
    for e in events:
        assert tuple(e) == FIELDS
        assert e["kind"] in KINDS
        assert e["array_type"] is None or e["array_type"] in type_names
        assert (e["workspace"] is None) == (e["cycle"] is None)
        if e["workspace"] is None or e["kind"] in ("spill", "release"):
            assert e["offset"] is None
        assert e["thread"] == "MainThread" and e["device"] == "cpu:0" and e["nbytes"] >= 0
    seen = {e["array_type"] for e in events}
    assert {"ACTIVATIONS", "ACTIVATION_GRAD", "BP_WORKING_MEM", "UPDATER_WORKING_MEM"} <= seen
    outside_layers = [e for e in events if e["workspace"] is None and e["kind"] == "alloc"]
    assert outside_layers and all(e["array_type"] is None for e in outside_layers)  # the arenas


def test_spills_are_recorded_as_spills_and_freed_as_releases():
    cfg = WorkspaceConfig(
        initial_size=1024,
        policy_learning=LearningPolicy.NONE,
        policy_allocation=AllocationPolicy.STRICT,
        policy_spill=SpillPolicy.EXTERNAL,
    )
    ws = kit.get_workspace_for_current_thread(cfg, "TL_SPILL")
    with kit.memory_timeline() as tl, ws:
        a = kit.zeros((64,))  # 256 bytes: carved
        b = kit.zeros((1024,))  # 4 KiB: does not fit, spills to the heap
        del b  # the spill's memory is freed now
    mine = [(e["kind"], e["offset"], e["nbytes"]) for e in tl.events if e["workspace"] == "TL_SPILL"]
    assert mine == [("alloc", 0, 256), ("spill", None, 4096), ("release", None, 4096), ("reset", 0, 256)]
    assert ws.spilled_count == 1 and ws.spilled_bytes == 4096
    assert a.shape == (64,)


def test_heap_events_match_the_heap_counters():
    with kit.memory_timeline() as tl:
        before = memory.heap_allocations(this_thread=True)
        a = kit.ones((100,))  # allocate_heap
        b = a + 1  # NumPy allocates (ndarray.heap_result)
        c = (a * b).sum()
        made = memory.heap_allocations(this_thread=True) - before
        del b
    heap = [e for e in tl.events if e["workspace"] is None]
    allocs = [e for e in heap if e["kind"] == "alloc"]
    assert len(allocs) == made == 4
    assert [e["nbytes"] for e in allocs[:2]] == [400, 400]
    released = [e for e in heap if e["kind"] == "release"]
    assert [e["nbytes"] for e in released] == [400, 400]  # b, and a * b once summed
    assert float(c.numpy()) == pytest.approx(200.0)


def test_recording_sends_numpys_own_allocations_through_allocate_heap_and_no_further():
    assert not STATE.cache.on  # the fast paths' one flag: nothing to record, no cache
    with kit.memory_timeline():
        assert STATE.cache.on  # while recording, heap results go through allocate_heap
        memory.set_max_host_cache(1 << 20)  # a cache switched on and off inside keeps the flag
        memory.set_max_host_cache(0)
        assert STATE.cache.on
        memory.set_max_host_cache(1 << 20)
    assert STATE.cache.on  # the cache still wants it
    memory.set_max_host_cache(0)
    assert not STATE.cache.on


def test_a_circular_workspace_records_a_reset_per_wrap():
    cfg = WorkspaceConfig(
        initial_size=1024,
        policy_learning=LearningPolicy.NONE,
        policy_allocation=AllocationPolicy.STRICT,
        policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
    )
    ws = kit.get_workspace_for_current_thread(cfg, "TL_RING")
    with kit.memory_timeline() as tl:
        for _ in range(10):
            with ws:
                kit.zeros((64,)).detach()  # 256 bytes a cycle: a lap every 4 cycles
    resets = [e for e in tl.events if e["workspace"] == "TL_RING" and e["kind"] == "reset"]
    assert len(resets) == ws.resets == 2
    assert [e["nbytes"] for e in resets] == [1024, 1024]
    assert len([c for c in tl.cycles if c["workspace"] == "TL_RING"]) == 10


def test_recording_off_records_nothing_and_keeps_nothing(digits):
    train, _ = digits
    net = mlp(64, hidden=(16,), n_out=10)
    idle = kit.memory_timeline()  # made, never started
    net.fit(batches(train, 2)[0])
    assert idle.events == [] and idle.cycles == [] and STATE.recorder is None
    with kit.memory_timeline() as tl:
        keep = kit.ones((1000,))  # alive when recording stops
        net.fit(batches(train, 1)[0])
    assert STATE.recorder is None and not STATE.cache.on
    n = len(tl.events)
    net.fit(batches(train, 2)[1])
    assert len(tl.events) == n and not tl.recording
    ref = weakref.ref(tl)
    gc.disable()
    try:
        del tl  # `keep` still alive holds no hook into it, and no cycle is left: refcounting frees it
        assert ref() is None
    finally:
        gc.enable()
    del keep  # collected after the end: nothing to record it in


def test_one_timeline_records_at_a_time():
    with kit.memory_timeline() as tl:
        with pytest.raises(TimelineError, match="another memory timeline"):
            kit.memory_timeline().start()
    with pytest.raises(TimelineError, match="recorded already"):
        tl.start()
    assert STATE.recorder is None


def test_events_from_many_threads_all_arrive():
    def work():
        for _ in range(500):
            kit.ones((8,))

    with kit.memory_timeline() as tl:
        threads = [threading.Thread(target=work, name=f"tl-worker-{i}") for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i in range(4):
        mine = [e for e in tl.events if e["thread"] == f"tl-worker-{i}"]
        assert sum(e["kind"] == "alloc" for e in mine) == 500
        assert sum(e["kind"] == "release" for e in mine) == 500


def test_a_two_worker_parallel_wrapper_shows_each_worker_thread(digits, tmp_path):
    train, _ = digits
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1))
    data = DataSet(train.features.numpy()[:256], train.labels.numpy()[:256])
    with kit.memory_timeline() as tl, ParallelWrapper(net, workers=2, prefetch_buffer=0) as pw:
        pw.fit(ArrayIterator(data, 32), epochs=1)
    workers = {e["thread"] for e in tl.events if e["workspace"] is not None}
    assert workers == {"ParallelWrapper training thread 0", "ParallelWrapper training thread 1"}
    trace = json.loads(tl.save_trace(tmp_path / "pw.json").read_text())["traceEvents"]
    names = {e["args"]["name"]: e["tid"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len({names[w] for w in workers}) == 2
    devices = {e["args"]["device"] for e in trace if e["ph"] in ("X", "i") and e["tid"] in {names[w] for w in workers}}
    assert devices == {d.name for d in pw.devices}


def test_an_aligned_heap_buffer_is_released_when_its_last_view_goes():
    """The timeline watches the block that owns an aligned buffer's memory: a view of the buffer
    that outlives it keeps the block (no release yet); the release comes with the last view."""
    dev = kit.devices.as_device("cpu:0")
    with kit.memory_timeline() as tl:
        raw, _ = memory.allocate_aligned((1000,), kit.backend.resolve_dtype("float32"), dev)
        view = raw[10:20]
        del raw
        gc.collect()
        released_early = [e for e in tl.events if e["kind"] == "release"]
        del view
        gc.collect()
    released = [e for e in tl.events if e["kind"] == "release"]
    assert released_early == [] and [e["nbytes"] for e in released] == [4000 + memory.ALIGNMENT]


def test_two_threads_of_one_name_are_two_rows_never_merged():
    """The timeline keyed threads by name: two threads called "worker" became one row, and plot()
    laid one's allocations over the other's cycle."""
    import numpy as np

    net = mlp(8, hidden=(4,), n_out=2, seed=0)  # one network, trained from two threads in turn
    rng = np.random.default_rng(0)
    ds = DataSet(rng.random((6, 8)).astype(np.float32), rng.integers(0, 2, 6), num_classes=2)
    with kit.memory_timeline() as tl:
        for _ in range(2):  # each thread named "worker": each gets its own workspaces of the same names
            t = threading.Thread(target=lambda: [net.fit_batch(ds) for _ in range(3)], name="worker")
            t.start()
            t.join(timeout=60)
    labels = {e["thread"] for e in tl.events}
    assert {"worker", "worker #2"} <= labels
    acts = [r for r in tl.summary() if (r["workspace"] or "").endswith("WS_ALL_LAYERS_ACT")]
    assert len({r["workspace"] for r in acts}) == 1  # the same name on both threads
    assert sorted(r["thread"] for r in acts) == ["worker", "worker #2"]
    assert all(r["cycles"] == 3 for r in acts)  # each thread's own three iterations
    for label in ("worker", "worker #2"):
        c, _allocs = tl.cycle_events(workspace=acts[0]["workspace"], thread=label)
        assert c["thread"] == label


# every identity the timeline keys on is the object, never a name two can share: a thread named as
# another thread's label, a workspace made again under its old name, a release collected elsewhere
def _in_thread(name, fn):
    t = threading.Thread(target=fn, name=name)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()


def _one_cycle(name="PROBE"):
    ws = kit.get_workspace_for_current_thread(name=name)
    with ws:
        kit.zeros((100,))
    return ws


@pytest.mark.parametrize(
    "names",
    [("w", "w", "w #2"), ("w #2", "w", "w"), ("a", "a", "a", "a #3")],
    ids=["a-name-like-a-label-after", "a-name-like-a-label-first", "four"],
)
def test_every_thread_is_its_own_row_whatever_its_name(names):
    with kit.memory_timeline() as tl:
        for name in names:
            _in_thread(name, _one_cycle)
    rows = [r for r in tl.summary() if r["workspace"] == "PROBE"]
    assert len(rows) == len(names) and len({r["thread"] for r in rows}) == len(names)
    assert all(r["cycles"] == 1 for r in rows)


def test_a_workspace_made_again_under_its_old_name_is_its_own_row():
    with kit.memory_timeline() as tl:
        first = _one_cycle("STEP")
        first.destroy()
        second = _one_cycle("STEP")
        with second:
            kit.zeros((300,))
        second.destroy()
    rows = {r["workspace"]: r["cycles"] for r in tl.summary() if (r["workspace"] or "").startswith("STEP")}
    assert rows == {"STEP": 1, "STEP #2": 2}
    _, allocs = tl.cycle_events(cycle=1, workspace="STEP")
    assert [e["workspace"] for e in allocs] == ["STEP"]  # the first workspace's cycle 1 only


def test_a_release_belongs_to_the_thread_that_allocated():
    kept = []
    with kit.memory_timeline() as tl:
        _in_thread("maker", lambda: kept.append(kit.zeros((1000,)).data.copy()))
        kept.clear()
        gc.collect()
    released = [e["thread"] for e in tl.events if e["kind"] == "release"]
    assert released and set(released) <= {"maker", "MainThread"}
    assert not [t for t in released if t.startswith("Dummy")]
