"""kit.parallel.inference.delivery: a request's answer reaches its caller, whichever way it waits
(a blocking call, a concurrent Future, an asyncio Future in its own loop), once, as an array on the
caller's device; a batch's answers wake each event loop once; an answer nobody can take is dropped
or arrives as an error saying so; the features of several requests are gathered in order."""

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest
from _inference_layers import Gate

import kit
from kit.core.devices import as_device
from kit.nn import Dense, Network, mlp
from kit.parallel import InferenceMode, ParallelInference
from kit.parallel.inference import delivery
from kit.parallel.inference.delivery import (
    SHUT_DOWN,
    SHUT_DOWN_REMEDY,
    Request,
    answer_batch,
    deliver,
    gather,
    shut_down_error,
)


def test_a_batch_of_asyncio_requests_is_settled_with_one_call_into_the_loop(monkeypatch):
    """The worker wakes the event loop once per batch, not once per request."""
    calls = []
    real = delivery._settle_all
    monkeypatch.setattr(delivery, "_settle_all", lambda requests: (calls.append(len(requests)), real(requests)))
    net = Network([Gate(), Dense(3)], (4,))
    x = np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32)
    Gate.event.clear()
    Gate.entered.clear()

    async def main():
        first = asyncio.ensure_future(pi.output_async(x[0]))
        while not Gate.entered.is_set():  # the worker holds the first request in the gate
            await asyncio.sleep(0.005)
        rest = [asyncio.ensure_future(pi.output_async(row)) for row in x[1:]]
        while pi.queued() < 11:
            await asyncio.sleep(0.005)
        Gate.event.set()
        return [a.numpy() for a in await asyncio.gather(first, *rest)]

    with ParallelInference(net, workers=1, inference_mode="BATCHED") as pi:
        answers = asyncio.run(main())
        assert pi.batch_sizes == [1, 11]
    assert calls == [1, 11]  # two batches, two calls into the loop for 12 answers
    np.testing.assert_allclose(np.stack(answers), net.output(x).numpy(), rtol=1e-5, atol=1e-6)


def test_an_answer_for_a_closed_event_loop_is_dropped_and_the_worker_goes_on():
    net = Network([Gate(), Dense(2)], (3,))
    Gate.event.clear()
    Gate.entered.clear()
    with ParallelInference(net, workers=1, inference_mode="BATCHED") as pi:
        loop = asyncio.new_event_loop()
        task = loop.create_task(pi.output_async(np.ones(3, np.float32)))
        loop.run_until_complete(asyncio.sleep(0))  # submitted: the worker runs it, held in the gate
        assert Gate.entered.wait(timeout=10)
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()
        Gate.event.set()  # the worker's answer now has nowhere to go
        assert pi.output(np.ones(3, np.float32)).shape == (2,)
        assert pi.requests_served == 2


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_an_answer_is_wrapped_on_the_device_its_caller_was_on(host_devices, mode):
    if host_devices < 2:
        pytest.skip("needs two simulated host devices")
    net = mlp(8, hidden=(8,), n_out=3)
    x = np.ones(8, np.float32)

    async def on(dev):
        with kit.device(dev):
            return await pi.output_async(x)

    with ParallelInference(net, workers=1, devices="cpu:0", inference_mode=mode) as pi:  # one device, by name
        assert [d.name for d in pi.devices] == ["cpu:0"]
        with kit.device("cpu:1"):
            future = pi.submit(x)
            assert pi.output(x).device.name == "cpu:1"
        assert future.result().device.name == "cpu:1"
        assert asyncio.run(on("cpu:1")).device.name == "cpu:1"  # INPLACE too: it runs in an executor thread
        assert pi.submit(x).result().device.name == "cpu:0"


# ---- one request, each way of waiting for it ---------------------------------------------------


def test_a_blocking_caller_waits_until_another_thread_answers_and_gets_its_rows():
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = Request(rows, single=False)
    assert not request.answered() and request.wait(0) is False  # nothing yet: no wait
    answerer = threading.Thread(target=request.answer, kwargs={"result": rows * 2})
    answerer.start()
    assert request.wait(30) is True
    answerer.join(timeout=30)
    assert request.answered()
    got = request.received()
    assert isinstance(got, kit.NDArray) and got.device.name == kit.devices.current_device().name
    np.testing.assert_array_equal(got.numpy(), rows * 2)


def test_a_blocking_caller_gets_its_requests_error_raised():
    request = Request(np.ones((1, 3), np.float32), single=True)
    request.answer(error=ValueError("row 0 holds NaN"))
    assert request.wait(None) and request.answered()
    with pytest.raises(ValueError, match="row 0 holds NaN"):
        request.received()


def test_a_future_is_answered_once_and_one_its_caller_cancelled_is_left_alone():
    answered = Request(np.ones((1, 2), np.float32), single=True, future=concurrent.futures.Future())
    answered.answer(result=np.full((1, 2), 3.0, np.float32))
    np.testing.assert_array_equal(answered.future.result(timeout=0).numpy(), [[3.0, 3.0]])
    answered.answer(error=RuntimeError("too late"))  # settled already: the first answer stands
    assert answered.future.exception(timeout=0) is None
    cancelled = Request(np.ones((1, 2), np.float32), single=True, future=concurrent.futures.Future())
    assert cancelled.future.cancel()
    cancelled.answer(result=np.zeros((1, 2), np.float32))  # nobody waits: no error either
    assert cancelled.future.cancelled()


def test_an_error_an_asyncio_future_refuses_arrives_as_one_saying_it_could_not_be_delivered():
    async def main():
        loop = asyncio.get_running_loop()
        request = Request(np.ones((1, 2), np.float32), single=True, future=loop.create_future(), loop=loop)
        stop = StopIteration("a model's own StopIteration")
        threading.Thread(target=request.answer, kwargs={"error": stop}).start()
        with pytest.raises(RuntimeError, match=r"the answer could not be delivered: TypeError") as info:
            await asyncio.wait_for(request.future, timeout=30)
        assert info.value.__cause__ is stop

    asyncio.run(main())


def test_a_batch_answers_every_kind_of_caller_with_its_own_slice():
    async def main():
        loop = asyncio.get_running_loop()
        features = [np.full((n, 2), i, np.float32) for i, n in enumerate((1, 2, 1, 3))]
        blocking = Request(features[0], single=True)
        pooled = Request(features[1], single=False, future=concurrent.futures.Future())
        awaited = [Request(f, single=False, future=loop.create_future(), loop=loop) for f in features[2:]]
        requests = [blocking, pooled, *awaited]
        results = [f * 10 for f in features]
        worker = threading.Thread(target=answer_batch, args=(requests, results))
        worker.start()
        worker.join(timeout=30)
        assert all(r.answered() for r in requests)  # the asyncio ones are on their way
        assert blocking.wait(0)
        got = [
            blocking.received(),
            pooled.future.result(timeout=0),
            *(await asyncio.gather(*(r.future for r in awaited))),
        ]
        for answer, expected in zip(got, results):
            np.testing.assert_array_equal(answer.numpy(), expected)

    asyncio.run(main())


def test_the_shut_down_error_says_what_happened_and_what_to_do():
    assert str(shut_down_error()) == f"{SHUT_DOWN}; {SHUT_DOWN_REMEDY}"
    late = str(shut_down_error(" before this request ran"))
    assert late.startswith("ParallelInference was shut down before this request ran; ")
    assert "make a new one, ParallelInference(net, ...)" in late


# ---- the copies between devices -------------------------------------------------------------------


def test_gather_stacks_the_requests_features_in_order_and_passes_one_through():
    parts = [np.full((n, 3), i, np.float32) for i, n in enumerate((2, 1, 3))]
    here = as_device("cpu:0")
    np.testing.assert_array_equal(gather([(p, None) for p in parts], here), np.concatenate(parts))
    assert gather([(parts[0], None)], here) is parts[0]  # one request on the replica's device: no copy


def test_deliver_wraps_an_answer_on_the_device_asked_for():
    result = np.arange(4, dtype=np.float32)
    got = deliver(result, as_device("cpu:0"), as_device("cpu:0"))
    assert got.device.name == "cpu:0"
    np.testing.assert_array_equal(got.numpy(), result)
