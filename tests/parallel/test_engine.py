"""kit.parallel.inference.engine: the queue behind ParallelInference. Requests queued before any
worker runs are merged, oldest first, into batches of the engine's limit and of one shape; a full
queue makes a caller wait, and says so once its deadline passes; a request taken back leaves room;
a request of another shape or after close is refused saying why; close answers every waiting
request and leaves no thread. Driven here directly, with real worker threads."""

import asyncio
import threading
import time

import numpy as np
import pytest
from _inference_layers import Gate, inference_threads, mgr_type

from kit.nn import Dense, Layer, Network, mlp
from kit.parallel import ParallelInference
from kit.parallel.inference import engine
from kit.parallel.inference.delivery import SHUT_DOWN, SHUT_DOWN_REMEDY, Request
from kit.parallel.inference.engine import Counts, Engine


def test_shutdown_from_a_worker_or_inside_the_engine_lock_does_not_deadlock():
    """The garbage collector may finalize a ParallelInference in any thread, at any allocation:
    in one of its own workers, or in a thread that holds its queue lock."""
    done = threading.Event()

    class ShutsItsServerDown(Layer):
        server = None

        def forward(self, x, mgr, training):
            ShutsItsServerDown.server.shutdown()  # from a worker thread of that server
            y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
            y.data[...] = x.data
            return y

    net = Network([ShutsItsServerDown(), Dense(2)], (3,))
    pi = ParallelInference(net, workers=2, inference_mode="SEQUENTIAL")
    ShutsItsServerDown.server = pi
    assert pi.output(np.zeros(3, np.float32)).shape == (2,)  # its own batch still answered
    for _ in range(500):
        if not inference_threads():
            break
        threading.Event().wait(0.01)
    assert pi.threads_alive() == 0 and not inference_threads()
    ShutsItsServerDown.server = None

    other = ParallelInference(mlp(4, hidden=(4,), n_out=2), workers=2)

    def locked_shutdown():
        with other._engine.lock:
            other.shutdown()
        done.set()

    threading.Thread(target=locked_shutdown, daemon=True).start()
    assert done.wait(timeout=10), "shutdown inside the engine's lock deadlocked"
    for _ in range(500):
        if not inference_threads():
            break
        threading.Event().wait(0.01)
    assert other.threads_alive() == 0 and not inference_threads()


def test_batch_sizes_keep_only_the_latest_batches(monkeypatch):
    """A server running for days must not grow a list per batch (DL4J's grew, dl4j#4018)."""
    monkeypatch.setattr(engine, "BATCH_SIZES_KEPT", 10)
    net = mlp(4, hidden=(4,), n_out=2)
    with ParallelInference(net, workers=1, inference_mode="SEQUENTIAL") as pi:
        for _ in range(30):
            pi.output(np.ones(4, np.float32))
        assert pi.requests_served == 30 and pi.batches_run == 30
        assert pi.batch_sizes == [1] * 10


def test_a_task_parked_on_a_stopped_loop_does_not_take_the_room_from_a_running_one():
    """Room goes to asyncio callers whose loop is running; one on a loop that is stopped (not
    closed) keeps its place for later without using the wake up."""
    Gate.event.clear()
    Gate.entered.clear()
    net = Network([Gate(), Dense(2)], (3,))
    x = np.zeros(3, np.float32)
    answered = {}

    def other_loop():
        async def main():
            answered["running loop"] = (await pi.output_async(x, timeout=20)).shape

        asyncio.run(main())

    with ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=1) as pi:
        held = pi.submit(x)
        assert Gate.entered.wait(timeout=10)
        queued = pi.submit(x)  # the queue (limit 1) is full
        parked_loop = asyncio.new_event_loop()
        parked = parked_loop.create_task(pi.output_async(x))
        parked_loop.run_until_complete(asyncio.sleep(0.05))  # waits for room, then its loop stops
        thread = threading.Thread(target=other_loop)
        thread.start()
        while len(pi._engine.room_waiters) < 2:
            threading.Event().wait(0.005)
        Gate.event.set()
        thread.join(timeout=30)
        assert answered == {"running loop": (2,)}
        assert held.result(timeout=10).shape == queued.result(timeout=10).shape == (2,)
        assert parked_loop.run_until_complete(parked).shape == (2,)  # served once its loop runs again
        parked_loop.close()


# ---- the engine driven directly ----------------------------------------------------------------


def _engine(batch_limit, queue_limit, workers=1):
    net = mlp(4, hidden=(5,), n_out=3, seed=0)
    return net, Engine(net, [net.clone() for _ in range(workers)], [net.device] * workers, batch_limit, queue_limit)


def _rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_counts_keep_batches_requests_and_the_size_of_each_batch():
    counts = Counts()
    for n in (3, 1, 4):
        counts.add_batch(n)
    assert (counts.batches_run, counts.requests_served, list(counts.batch_sizes)) == (3, 8, [3, 1, 4])


@pytest.mark.parametrize(("batch_limit", "sizes"), [(1, [1] * 5), (2, [2, 2, 1]), (8, [5])])
def test_waiting_requests_are_merged_oldest_first_up_to_the_batch_limit(batch_limit, sizes):
    net, eng = _engine(batch_limit, queue_limit=5)
    x = _rows(5)
    requests = [Request(x[i : i + 1], single=True) for i in range(5)]
    for r in requests:
        eng.submit(r, None)  # no worker yet: all five wait
    eng.start(["engine-test-0"])
    assert all(r.wait(30) for r in requests)
    assert list(eng.counts.batch_sizes) == sizes and eng.counts.requests_served == 5
    np.testing.assert_allclose(
        np.stack([r.received().numpy() for r in requests]), net.output(x).numpy(), rtol=1e-5, atol=1e-6
    )
    assert eng.close(30) == []


def test_requests_of_one_row_and_of_many_merge_into_one_batch_each_answered_with_its_own_rows():
    net, eng = _engine(batch_limit=8, queue_limit=8)
    one, many, other = _rows(1, seed=1), _rows(3, seed=2), _rows(1, seed=3)
    requests = [Request(one[0:1], single=True), Request(many, single=False), Request(other[0:1], single=True)]
    for r in requests:
        eng.submit(r, None)
    eng.start(["engine-test-0"])
    assert all(r.wait(30) for r in requests)
    assert list(eng.counts.batch_sizes) == [3] and eng.counts.batches_run == 1  # three requests, five rows
    want = net.output(np.concatenate([one, many, other])).numpy()
    got = [r.received().numpy() for r in requests]
    assert [g.shape for g in got] == [(3,), (3, 3), (3,)]  # a single example's answer is one row
    np.testing.assert_allclose(np.concatenate([got[0][None], got[1], got[2][None]]), want, rtol=1e-5, atol=1e-6)
    assert eng.close(30) == []


def test_a_full_queue_says_so_at_the_deadline_and_a_request_taken_back_leaves_room():
    _, eng = _engine(batch_limit=1, queue_limit=2)
    first, second = Request(_rows(1), single=True), Request(_rows(1), single=True)
    eng.submit(first, None)
    eng.submit(second, None)
    third = Request(_rows(1), single=True)
    with pytest.raises(TimeoutError) as info:
        eng.submit(third, time.monotonic())  # already past: no wait
    assert str(info.value) == "ParallelInference: the request queue stayed full (2)"
    assert eng.withdraw(first) and not eng.withdraw(first)  # taken back once; then it is not queued
    eng.submit(third, time.monotonic())  # room now
    assert list(eng.pending) == [second, third]
    assert eng.close(30) == []
    for r in (second, third):  # close answers every request still waiting
        assert r.wait(0)
        with pytest.raises(RuntimeError) as refused:
            r.received()
        assert str(refused.value) == f"{SHUT_DOWN} before this request ran; {SHUT_DOWN_REMEDY}"


def test_a_caller_waiting_for_room_is_let_in_when_a_worker_takes_a_request():
    _, eng = _engine(batch_limit=1, queue_limit=1)
    eng.submit(Request(_rows(1), single=True), None)
    late = Request(_rows(1, seed=1), single=True)
    caller = threading.Thread(target=eng.submit, args=(late, time.monotonic() + 30))
    caller.start()
    while eng.has_room.count == 0:  # the caller waits on the full queue
        threading.Event().wait(0.005)
    eng.start(["engine-test-0"])  # the worker takes the first: room for the caller
    caller.join(timeout=30)
    assert not caller.is_alive() and late.wait(30) and late.received().shape == (3,)
    eng.close(30)


def test_the_engine_refuses_another_shape_and_anything_after_close_saying_why():
    _, eng = _engine(batch_limit=4, queue_limit=4, workers=2)
    with pytest.raises(ValueError) as info:
        eng.submit(Request(np.ones((2, 5), np.float32), single=False), None)
    assert str(info.value).startswith("output: expected one example of shape (4,) or a batch (n, 4), got (2, 5)")
    eng.start(["engine-test-0", "engine-test-1"])
    assert eng.close(30) == [] and not any(t.is_alive() for t in eng.threads)
    with pytest.raises(RuntimeError, match=f"^{SHUT_DOWN}; "):
        eng.submit(Request(_rows(1), single=True), None)


def test_a_waiter_past_its_deadline_raises_saying_what_it_waited_for():
    lock = threading.RLock()
    waiters = engine._Waiters(lock)
    with lock, pytest.raises(TimeoutError, match=r"^ParallelInference: no replica came free$"):
        waiters.wait_until(time.monotonic() - 1, "no replica came free")
    assert waiters.count == 0

    def notify():
        with lock:
            waiters.notify()

    with lock:
        threading.Timer(0.01, notify).start()
        waiters.wait_until(time.monotonic() + 30, "never")  # woken by the other thread (or the deadline)
    assert waiters.count == 0
