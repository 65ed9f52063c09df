"""ParallelInference: load with many clients, errors reach callers, back-pressure, shutdown."""

import asyncio
import gc
import os
import threading
import time
import weakref
from typing import ClassVar

import numpy as np
import pytest
from _inference_layers import Gate, inference_threads, mgr_type
from threadpoolctl import threadpool_info

from kit.nn import Dense, Layer, Network, mlp
from kit.parallel import InferenceMode, ParallelInference
from kit.parallel.inference.delivery import SHUT_DOWN, SHUT_DOWN_REMEDY


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_64_clients_200_requests_each_get_their_own_answer(mode):
    net = mlp(16, hidden=(32,), n_out=5, seed=3)
    requests = 200 if mode is InferenceMode.BATCHED else 40
    failures, served = [], [0]
    lock = threading.Lock()
    with ParallelInference(net, workers=2, inference_mode=mode, batch_limit=32, queue_limit=64) as pi:

        def client(c):
            rng = np.random.default_rng(c)
            for _ in range(requests):
                x = (
                    rng.standard_normal(16).astype(np.float32)
                    if rng.random() < 0.7
                    else rng.standard_normal((int(rng.integers(2, 5)), 16)).astype(np.float32)
                )
                got = pi.output(x).numpy()
                want = net.output(x.reshape(-1, 16)).numpy()
                want = want[0] if x.ndim == 1 else want
                with lock:
                    served[0] += 1
                    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                        failures.append((c, x.shape))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        if mode is InferenceMode.BATCHED:
            assert max(pi.batch_sizes) > 1  # requests really were merged
    assert not failures and served[0] == 64 * requests
    assert pi.requests_served == 64 * requests
    assert not inference_threads()


def test_worker_errors_reach_the_caller_and_the_worker_survives():
    net = mlp(4, hidden=(4,), n_out=2)
    with ParallelInference(net, workers=1) as pi:
        with pytest.raises(ValueError, match="features contain NaN"):
            pi.output(np.array([1.0, np.nan, 0, 0], dtype=np.float32))
        assert pi.output(np.zeros(4, np.float32)).shape == (2,)
        with pytest.raises(ValueError, match=r"expected one example of shape \(4,\) or a batch \(n, 4\), got \(5,\)"):
            pi.output(np.zeros(5, np.float32))


def test_a_full_queue_makes_callers_wait_and_shutdown_answers_everyone():
    Gate.event.clear()
    net = Network([Gate(), Dense(2)], (3,))
    pi = ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=2)
    results = []

    def client():
        try:
            results.append(pi.output(np.zeros(3, np.float32)).shape)
        except RuntimeError as exc:
            results.append(str(exc))

    clients = [threading.Thread(target=client) for _ in range(4)]
    for t in clients:
        t.start()
    for _ in range(200):  # one request is running, two wait in the queue, one waits for room
        if pi.queued() == 2:
            break
        threading.Event().wait(0.01)
    assert pi.queued() == 2 and len(results) == 0
    Gate.event.set()
    for t in clients:
        t.join(timeout=30)
    assert results == [(2,)] * 4
    Gate.event.clear()
    blocked = [threading.Thread(target=client) for _ in range(3)]
    for t in blocked:
        t.start()
    threading.Event().wait(0.2)
    Gate.event.set()
    pi.shutdown()
    for t in blocked:
        t.join(timeout=30)
    assert len(results) == 7 and not inference_threads()
    with pytest.raises(RuntimeError, match="shut down"):
        pi.output(np.zeros(3, np.float32))


def test_update_model_swaps_parameters():
    a, b = mlp(4, hidden=(4,), n_out=2, seed=1), mlp(4, hidden=(4,), n_out=2, seed=2)
    x = np.ones(4, np.float32)
    with ParallelInference(a, workers=2) as pi:
        np.testing.assert_allclose(pi.output(x).numpy(), a.output(x[None]).numpy()[0], rtol=1e-6)
        pi.update_model(b)
        np.testing.assert_allclose(pi.output(x).numpy(), b.output(x[None]).numpy()[0], rtol=1e-6)


# ---- reliability (issue 13): every caller answered, only the bad one fails, nothing left behind


def blas_thread_counts():
    return [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_complex_and_non_numeric_input_is_refused_as_network_output_refuses_it(mode):
    net = mlp(4, hidden=(4,), n_out=2)
    with ParallelInference(net, workers=2, inference_mode=mode) as pi:
        for bad in (np.array([1 + 2j, 0, 0, 0]), np.ones((2, 4), dtype=bool), np.array(["a", "b", "c", "d"])):
            with pytest.raises(TypeError) as direct:
                net.output(bad[None] if bad.ndim == 1 else bad)
            with pytest.raises(TypeError, match=f"features must be numbers, got dtype {bad.dtype}") as served:
                pi.output(bad)
            assert str(served.value) == str(direct.value)
        assert pi.requests_served == 0  # nothing reached a worker


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_an_empty_batch_gets_an_empty_answer(mode):
    net = mlp(16, hidden=(8,), n_out=5)
    with ParallelInference(net, workers=2, inference_mode=mode) as pi:
        out = pi.output(np.zeros((0, 16)))
        assert out.shape == (0, 5) and out.dtype == net.dtype
        assert pi.output(np.ones(16, np.float32)).shape == (5,)  # and the next request is served


class Poison(Layer):
    """An identity layer that fails on any row containing 7.0, naming that row of its batch."""

    def forward(self, x, mgr, training):
        rows = np.flatnonzero((x.numpy() == 7.0).any(axis=1))
        if rows.size:
            raise ValueError(f"poisoned row {int(rows[0])} of {x.shape[0]}")
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def run_held_batch(pi, inputs, queued=None):
    """Hold the only worker in Gate, queue one request per input, release: they run as one batch.
    `queued`: how many requests must be waiting first (default: all but the one running)."""
    queued = len(inputs) - 1 if queued is None else queued
    Gate.event.clear()
    Gate.entered.clear()
    answers = [None] * len(inputs)

    def client(i):
        try:
            answers[i] = pi.output(inputs[i]).numpy()
        except Exception as exc:
            answers[i] = exc

    blocker = threading.Thread(target=client, args=(0,))
    blocker.start()
    assert Gate.entered.wait(timeout=10)  # the first request is running, held in the gate
    rest = [threading.Thread(target=client, args=(i,)) for i in range(1, len(inputs))]
    for t in rest:
        t.start()
    for _ in range(500):
        if pi.queued() == queued:
            break
        threading.Event().wait(0.01)
    assert pi.queued() == queued
    Gate.event.set()
    for t in [blocker, *rest]:
        t.join(timeout=30)
    return answers


def test_one_bad_request_in_a_merged_batch_fails_only_its_caller_with_its_own_row():
    net = Network([Gate(), Poison(), Dense(3)], (4,))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(12)]
    inputs[9][2, 1] = 7.0  # row 2 of its own request; row 29 of the merged batch
    with ParallelInference(net, workers=1, inference_mode="BATCHED", batch_limit=32) as pi:
        answers = run_held_batch(pi, inputs)
        assert isinstance(answers[9], ValueError) and str(answers[9]) == "poisoned row 2 of 3"
        for i, got in enumerate(answers):
            if i != 9:
                np.testing.assert_allclose(got, net.output(inputs[i]).numpy(), rtol=1e-5, atol=1e-6)
        answers = run_held_batch(pi, inputs[:9])  # without the bad one: merged, as before
        assert max(pi.batch_sizes) == 8
    Gate.event.set()


def test_a_nan_request_among_merged_ones_fails_alone_with_its_own_index():
    net = Network([Gate(), Dense(3)], (4,))
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(12)]
    inputs[7][2, 1] = np.nan  # row 2 of its own request; row 20 of the merged batch
    with ParallelInference(net, workers=1, inference_mode="BATCHED", batch_limit=32) as pi:
        answers = run_held_batch(pi, inputs)
        # the merged batch of 11 failed the worker's check; the NaN request alone was refused and
        # the other ten ran again as one batch, not one by one
        assert pi.batch_sizes == [1, 10]
    Gate.event.set()
    assert isinstance(answers[7], ValueError)
    assert str(answers[7]) == "features contain NaN or infinity (1 values; first at index [2, 1])"
    for i, got in enumerate(answers):
        if i != 7:
            np.testing.assert_allclose(got, net.output(inputs[i]).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [InferenceMode.BATCHED, InferenceMode.SEQUENTIAL])
def test_a_nan_request_fails_alone_with_the_index_into_its_own_rows(mode):
    net = mlp(4, hidden=(8,), n_out=3, seed=1)
    rng = np.random.default_rng(1)
    errors, results = [], []
    lock = threading.Lock()
    with ParallelInference(net, workers=2, inference_mode=mode) as pi:

        def client(c):
            for k in range(20):
                x = rng.standard_normal((4, 4)).astype(np.float32)
                if c == 5 and k == 10:
                    x[2, 1] = np.nan
                try:
                    got = pi.output(x).numpy()
                    with lock:
                        results.append(np.allclose(got, net.output(x).numpy(), rtol=1e-5, atol=1e-6))
                except ValueError as exc:
                    with lock:
                        errors.append((c, k, str(exc)))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert errors == [(5, 10, "features contain NaN or infinity (1 values; first at index [2, 1])")]
    assert len(results) == 32 * 20 - 1 and all(results)


def shutdown_with_clients_in_flight(net, mode, clients):
    pi = ParallelInference(net, workers=2, inference_mode=mode, queue_limit=8)
    started, answered, wrong = [0] * clients, [0] * clients, []
    going = threading.Barrier(clients + 1)

    def client(c):
        rng = np.random.default_rng(c)
        going.wait()
        while True:
            started[c] += 1
            try:
                pi.output(rng.standard_normal(32).astype(np.float32))
            except RuntimeError as exc:
                answered[c] += 1
                if not str(exc).startswith(SHUT_DOWN) or SHUT_DOWN_REMEDY not in str(exc):
                    wrong.append(str(exc))  # every refusal, queued or not yet admitted, says what to do
                return
            answered[c] += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    going.wait()
    while pi.requests_served < 2 * clients:
        threading.Event().wait(0.005)
    t0 = time.monotonic()
    pi.shutdown()
    for t in threads:
        t.join(timeout=10)
    elapsed = time.monotonic() - t0
    assert not any(t.is_alive() for t in threads), "a caller never got an answer"
    assert elapsed < 10  # a bound on a hang, not a speed claim
    assert started == answered and not wrong
    assert pi.threads_alive() == 0 and not inference_threads()
    with pytest.raises(RuntimeError, match="shut down"):
        pi.output(np.zeros(32, np.float32))


@pytest.mark.parametrize("mode", [InferenceMode.SEQUENTIAL, InferenceMode.BATCHED])
@pytest.mark.parametrize("clients", [32, 64])
def test_shutdown_with_clients_in_flight_answers_everyone_and_leaves_no_thread(mode, clients):
    """Load test: clients keep calling (a small queue, so many wait for room) while shutdown()
    runs. Every call returns or raises the shut-down error; no thread is left; no hang."""
    net = mlp(32, hidden=(64,), n_out=4, seed=0)
    for _ in range(3):  # several rounds: the race lands at different moments
        shutdown_with_clients_in_flight(net, mode, clients)


def test_output_timeout_takes_the_request_back():
    Gate.event.clear()
    Gate.entered.clear()
    net = Network([Gate(), Dense(2)], (3,))
    with ParallelInference(net, workers=1, inference_mode="SEQUENTIAL") as pi:
        first = threading.Thread(target=lambda: pi.output(np.zeros(3, np.float32)))
        first.start()
        assert Gate.entered.wait(timeout=10)  # the worker is busy with the first request
        with pytest.raises(TimeoutError, match=r"no result within 0\.2 s"):
            pi.output(np.ones(3, np.float32), timeout=0.2)
        assert pi.queued() == 0  # withdrawn: no worker will run it
        Gate.event.set()
        first.join(timeout=30)
        assert pi.requests_served == 1


@pytest.mark.parametrize("mode", [InferenceMode.BATCHED, InferenceMode.INPLACE])
def test_dropping_the_last_reference_shuts_down_and_restores_the_blas_limit(mode):
    before = blas_thread_counts()
    net = mlp(8, hidden=(8,), n_out=2)
    pi = ParallelInference(net, workers=2, inference_mode=mode)
    pi.output(np.ones(8, np.float32))
    share = max(1, (os.cpu_count() or 1) // 2)
    assert blas_thread_counts() == [share] * len(before)
    ref = weakref.ref(pi)
    del pi
    gc.collect()
    assert ref() is None and not inference_threads()
    assert blas_thread_counts() == before


def test_the_blas_limit_lasts_while_any_instance_lives():
    before = blas_thread_counts()
    net = mlp(8, hidden=(8,), n_out=2)
    share = max(1, (os.cpu_count() or 1) // 2)
    a = ParallelInference(net, workers=2)
    b = ParallelInference(net, workers=2, inference_mode="SEQUENTIAL")
    a.shutdown()
    assert blas_thread_counts() == [share] * len(before)  # b still runs on its share
    assert b.output(np.ones(8, np.float32)).shape == (2,)
    del b
    gc.collect()
    assert blas_thread_counts() == before and not inference_threads()


@pytest.mark.parametrize("mode", [InferenceMode.SEQUENTIAL, InferenceMode.BATCHED])
def test_a_batch_is_counted_before_any_of_its_callers_has_its_answer(mode):
    """A caller holding its answer finds it counted (counted after the release, a test read 160
    of 192 under load). Deterministic: a Future's done-callback runs in the worker's thread the
    moment its answer is settled, so it reads the counters exactly at the release."""
    Gate.event.clear()
    Gate.entered.clear()
    net = Network([Gate(), Dense(2)], (3,))
    seen = []
    with ParallelInference(net, workers=1, inference_mode=mode) as pi:
        futures = [pi.submit(np.ones(3, np.float32))]
        assert Gate.entered.wait(timeout=10)  # the worker holds the first request in the gate
        futures += [pi.submit(np.full((2, 3), k, np.float32)) for k in range(4)]
        for f in futures:  # none is answered yet: every callback runs at its release
            f.add_done_callback(lambda f: seen.append((pi.batches_run, pi.requests_served)))
        Gate.event.set()
        for f in futures:
            f.result(timeout=30)
        if mode is InferenceMode.BATCHED:  # the gated request alone, then the four queued as one batch
            assert seen == [(1, 1)] + [(2, 5)] * 4
        else:
            assert seen == [(k, k) for k in range(1, 6)]
        pi.output(np.ones(3, np.float32))
        assert pi.requests_served == 6  # read right after output() returns


# ---- many requests in flight without a thread each: output_async (asyncio) and submit (Futures)


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_64_asyncio_clients_on_one_loop_each_get_their_own_answer(mode):
    net = mlp(16, hidden=(32,), n_out=5, seed=4)
    rng = np.random.default_rng(0)
    inputs = [
        rng.standard_normal(16).astype(np.float32) if k % 3 else rng.standard_normal((3, 16)).astype(np.float32)
        for k in range(64 * 5)
    ]

    async def client(c):
        return [(await pi.output_async(inputs[c * 5 + k])).numpy() for k in range(5)]

    async def main():
        return await asyncio.gather(*(client(c) for c in range(64)))

    with ParallelInference(net, workers=2, inference_mode=mode) as pi:
        answers = [a for per_client in asyncio.run(main()) for a in per_client]
        assert pi.requests_served == 64 * 5
        if mode is InferenceMode.BATCHED:
            assert max(pi.batch_sizes) > 1
    for x, got in zip(inputs, answers):
        want = net.output(x.reshape(-1, 16)).numpy()
        np.testing.assert_allclose(got, want[0] if x.ndim == 1 else want, rtol=1e-5, atol=1e-6)
    assert not inference_threads()


def test_output_async_errors_timeouts_and_cancellation():
    net = Network([Gate(), Poison(), Dense(3)], (4,))
    Gate.event.clear()
    Gate.entered.clear()

    async def main():
        with pytest.raises(ValueError, match=r"features contain NaN or infinity \(1 values; first at index \[0, 2\]\)"):
            await pi.output_async(np.array([[0, 0, np.nan, 0]], np.float32))
        with pytest.raises(ValueError, match=r"expected one example of shape \(4,\) or a batch \(n, 4\), got \(5,\)"):
            await pi.output_async(np.zeros(5, np.float32))
        held = asyncio.ensure_future(pi.output_async(np.ones(4, np.float32)))
        while not Gate.entered.is_set():
            await asyncio.sleep(0.005)
        with pytest.raises(TimeoutError, match=r"no result within 0\.1 s"):
            await pi.output_async(np.ones(4, np.float32), timeout=0.1)
        assert pi.queued() == 0  # the timed-out request was taken back
        cancelled = asyncio.ensure_future(pi.output_async(np.ones(4, np.float32)))
        while pi.queued() < 1:
            await asyncio.sleep(0.005)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert pi.queued() == 0  # so was the cancelled one
        poisoned = asyncio.ensure_future(pi.output_async(np.array([1, 7, 1, 1], np.float32)))
        Gate.event.set()
        assert (await held).shape == (3,)
        with pytest.raises(ValueError, match="poisoned row 0 of 1"):  # the worker's error reaches its awaiter
            await poisoned

    with ParallelInference(net, workers=1, inference_mode="BATCHED") as pi:
        asyncio.run(main())
        assert pi.requests_served == 1  # the held one (the poisoned one failed); nothing else ran
        assert pi.output(np.zeros(4, np.float32)).shape == (3,)  # the worker survived


def test_a_full_queue_does_not_block_the_event_loop_and_shutdown_answers_every_awaiter():
    net = Network([Gate(), Dense(2)], (3,))
    Gate.event.clear()
    Gate.entered.clear()
    ticks = [0]

    async def ticker(stop):
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0.005)

    async def main():
        stop = asyncio.Event()
        tick = asyncio.ensure_future(ticker(stop))
        calls = [asyncio.ensure_future(pi.output_async(np.full(3, i, np.float32))) for i in range(6)]
        while pi.queued() < 2:  # one runs (held), two queued, three wait for room off the loop
            await asyncio.sleep(0.005)
        before = ticks[0]
        await asyncio.sleep(0.2)
        assert ticks[0] > before + 5  # the loop kept running while callers waited for room
        Gate.event.set()
        answers = await asyncio.gather(*calls)
        Gate.event.clear()
        late = [asyncio.ensure_future(pi.output_async(np.zeros(3, np.float32))) for _ in range(4)]
        while pi.queued() < 2:
            await asyncio.sleep(0.005)
        await asyncio.get_running_loop().run_in_executor(None, lambda: (Gate.event.set(), pi.shutdown()))
        refused = await asyncio.gather(*late, return_exceptions=True)
        stop.set()
        await tick
        return answers, refused

    pi = ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=2)
    answers, refused = asyncio.run(main())
    for i, got in enumerate(answers):
        np.testing.assert_allclose(got.numpy(), net.output(np.full((1, 3), i, np.float32)).numpy()[0], rtol=1e-6)
    assert len(refused) == 4
    for r in refused:  # each one ran before the shutdown, or was refused with a clear error
        assert (isinstance(r, RuntimeError) and "shut down" in str(r)) or r.shape == (2,)
    assert any(isinstance(r, RuntimeError) for r in refused)
    assert not inference_threads()


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_submit_keeps_many_requests_in_flight_from_one_thread(mode):
    net = mlp(8, hidden=(16,), n_out=3, seed=5)
    x = np.random.default_rng(3).standard_normal((100, 8)).astype(np.float32)
    with ParallelInference(net, workers=2, inference_mode=mode) as pi:
        futures = [pi.submit(row) for row in x]
        assert pi.submit(np.zeros((0, 8))).result().shape == (0, 3)
        with pytest.raises(ValueError, match=r"expected one example of shape \(8,\)"):  # raises at once
            pi.submit(np.zeros(9, np.float32))
        with pytest.raises(ValueError, match=r"features contain NaN or infinity \(8 values; first at index \[0, 0\]\)"):
            pi.submit(np.full(8, np.nan, np.float32)).result(timeout=30)  # found by the worker
        got = np.stack([f.result(timeout=30).numpy() for f in futures])
        assert not any(f.cancel() for f in futures)  # queued work cannot be called off
    np.testing.assert_allclose(got, net.output(x).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="shut down"):
        pi.submit(x[0])


class Slow(Layer):
    """An identity layer that takes 10 ms: keeps a small queue full."""

    def forward(self, x, mgr, training):
        time.sleep(0.01)
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


class Recorder(Layer):
    """An identity layer that remembers every row it ran."""

    rows: ClassVar[list] = []

    def forward(self, x, mgr, training):
        Recorder.rows.extend(np.array(x.numpy(), copy=True))
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


class Raiser(Layer):
    """Raises `Raiser.error` on a row whose first value is 9."""

    error: BaseException = TimeoutError("device sync timed out")

    def forward(self, x, mgr, training):
        if (x.numpy()[:, 0] == 9.0).any():
            raise Raiser.error
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def test_a_done_callback_that_submits_again_is_queued_even_past_a_full_queue():
    """Done-callbacks run in a worker's thread; one that asks again must not wait for room only
    that worker can make (it would wait for itself)."""
    net = Network([Slow(), Dense(2)], (3,))
    x = np.ones(3, np.float32)
    answered, finished = [], threading.Event()

    def chain(future, left):
        answered.append(future.exception() is None)
        if left:
            pi.submit(x).add_done_callback(lambda f: chain(f, left - 1))
        elif len(answered) == 3 * 8:
            finished.set()

    with ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=2) as pi:
        for _ in range(3):
            pi.submit(x).add_done_callback(lambda f: chain(f, 7))
        assert finished.wait(timeout=60), f"{len(answered)} of 24 answered"
    assert all(answered)


def test_a_task_cancelled_while_waiting_for_room_is_never_run_and_no_thread_waits_for_it():
    Gate.event.clear()
    Gate.entered.clear()
    Recorder.rows = []
    net = Network([Gate(), Recorder(), Dense(2)], (3,))
    marked = np.full(3, 42.0, np.float32)

    async def main():
        busy = [asyncio.ensure_future(pi.output_async(np.zeros(3, np.float32))) for _ in range(2)]
        while pi.queued() < 1:  # one held in the gate, one queued: the queue (limit 1) is full
            await asyncio.sleep(0.005)
        waiting = asyncio.ensure_future(pi.output_async(marked))
        timed_out = asyncio.ensure_future(pi.output_async(marked, timeout=0.05))
        await asyncio.sleep(0.1)
        helpers = [t.name for t in threading.enumerate() if not t.name.startswith(("InferenceThread", "MainThread"))]
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(TimeoutError, match=r"the request queue stayed full \(1\)"):
            await timed_out
        Gate.event.set()
        await asyncio.gather(*busy)
        return helpers

    with ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=1) as pi:
        before = [t.name for t in threading.enumerate() if not t.name.startswith(("InferenceThread", "MainThread"))]
        helpers = asyncio.run(main())
        assert pi.output(np.ones(3, np.float32)).shape == (2,)
    assert helpers == before  # the waits for room were on the loop, in no executor thread
    assert len(Recorder.rows) == 3 and not any((r == 42.0).all() for r in Recorder.rows)


def test_a_models_own_errors_reach_every_kind_of_caller_as_raised():
    net = Network([Raiser(), Dense(2)], (3,))
    bad = np.array([9.0, 0, 0], np.float32)

    async def awaited():
        return await pi.output_async(bad, timeout=30)

    with ParallelInference(net, workers=1) as pi:
        Raiser.error = TimeoutError("device sync timed out")  # the answer's own, not a wait's
        with pytest.raises(TimeoutError, match="device sync timed out"):
            pi.output(bad)
        with pytest.raises(TimeoutError, match="device sync timed out"):
            pi.submit(bad).result(timeout=30)
        with pytest.raises(TimeoutError, match="device sync timed out"):
            asyncio.run(awaited())
        Raiser.error = StopIteration()  # asyncio refuses it in a Future: it arrives wrapped
        with pytest.raises(RuntimeError, match="could not be delivered") as got:
            asyncio.run(awaited())
        assert isinstance(got.value.__cause__, StopIteration)
        assert pi.output(np.zeros(3, np.float32)).shape == (2,)  # the worker carries on


def test_inplace_output_async_times_out_with_the_usual_message():
    Gate.event.clear()
    Gate.entered.clear()
    net = Network([Gate(), Dense(2)], (3,))

    async def main():
        with pytest.raises(TimeoutError, match=r"no result within 0\.05 s"):
            await pi.output_async(np.ones(3, np.float32), timeout=0.05)
        Gate.event.set()  # the executor thread still running it finishes (asyncio.run waits for it)

    with ParallelInference(net, workers=1, inference_mode="INPLACE") as pi:
        asyncio.run(main())
        assert pi.requests_served == 1  # it had started: it ran, for nobody


def test_an_inplace_call_that_timed_out_waiting_for_a_replica_never_runs():
    Gate.event.clear()
    Gate.entered.clear()
    net = Network([Gate(), Dense(2)], (3,))

    async def main():
        first = asyncio.ensure_future(pi.output_async(np.zeros(3, np.float32)))
        while not Gate.entered.is_set():  # the only replica is busy in the gate
            await asyncio.sleep(0.005)
        with pytest.raises(TimeoutError, match=r"no result within 0\.05 s"):
            await pi.output_async(np.ones(3, np.float32), timeout=0.05)
        Gate.event.set()
        return await first

    with ParallelInference(net, workers=1, inference_mode="INPLACE") as pi:
        assert asyncio.run(main()).shape == (2,)  # asyncio.run waits for its executor's threads
        assert pi.requests_served == 1  # the timed-out call got the replica afterwards and let it go
