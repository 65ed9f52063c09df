"""ParallelInference timeouts: one rule for every call (output, submit, output_async), every mode
and every value, and shutdown() ends every wait, INPLACE ones included.

The rule: None or math.inf wait without limit (here bounded by a release or a shutdown); a number
>= 0 is the seconds a call may wait (0: no waiting at all); a negative number or NaN raises
ValueError at the call, a non-number TypeError, naming the value, before anything is queued.
`submit` waits only for room in the queue (INPLACE: for a free replica), the others also for
the answer."""

import asyncio
import math
import threading

import numpy as np
import pytest

from kit.nn import Dense, Layer, Network
from kit.nn.workspace_mgr import ArrayType
from kit.parallel import InferenceMode, ParallelInference

KINDS = ["output", "submit", "output_async"]


class TimeoutGate(Layer):
    """An identity layer that holds the thread running it until `release` is set."""

    release = threading.Event()
    entered = threading.Event()

    def forward(self, x, mgr, training):
        TimeoutGate.entered.set()
        TimeoutGate.release.wait(timeout=30)
        y = mgr.create(ArrayType.ACTIVATIONS, x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def call(pi, kind, x, timeout):
    """One call of `kind`, as its caller sees it: the answer (as NumPy) or the exception."""
    try:
        if kind == "output":
            return pi.output(x, timeout=timeout).numpy()
        if kind == "submit":
            future = pi.submit(x, timeout=timeout)
            return future.result(timeout=30).numpy()  # the test's own bound on the answer

        async def awaited():
            return await pi.output_async(x, timeout=timeout)

        return asyncio.run(awaited()).numpy()
    except Exception as exc:
        return exc


def waiters(pi):
    """Callers parked until something changes: for room, for a replica, or (asyncio) on a loop."""
    e = pi._engine
    return e.has_room.count + len(e.room_waiters) + e.has_replica.count


class Busy:
    """A server with one replica, held in the gate by a first request, and, outside INPLACE, a
    full queue (limit 1) behind it: any further call has to wait."""

    def __init__(self, mode):
        TimeoutGate.release.clear()
        TimeoutGate.entered.clear()
        self.net = Network([TimeoutGate(), Dense(2)], (3,), seed=5)
        self.pi = ParallelInference(self.net, workers=1, inference_mode=mode, queue_limit=1)
        self.first = self.pi.submit(np.zeros(3, np.float32)) if mode is not InferenceMode.INPLACE else None
        if self.first is None:  # INPLACE: submit runs in the calling thread, so hold it in another
            self.holder = threading.Thread(target=self.pi.output, args=(np.zeros(3, np.float32),))
            self.holder.start()
        assert TimeoutGate.entered.wait(timeout=10)
        self.queued = self.pi.submit(np.ones(3, np.float32)) if self.first is not None else None
        self.before = 2 if self.first is not None else 1  # requests made before the test's call

    def finish(self, shutdown_first=False, then=None):
        """Release the gate (after a shutdown if asked), wait for `then` (the test's own caller)
        to be answered, check the requests made before it, and shut down."""
        if shutdown_first:
            self.pi.shutdown(timeout=0)  # the worker is in the gate: do not wait for it
        TimeoutGate.release.set()
        if then is not None:
            then.join(timeout=30)
        if self.first is not None:
            assert self.first.result(timeout=30).shape == (2,)
            queued = self.queued.exception(timeout=30)
            assert queued is None or "shut down" in str(queued)
        else:
            self.holder.join(timeout=30)
            assert not self.holder.is_alive()
        self.pi.shutdown()
        for t in self.pi._engine.threads:  # joined also after a shutdown(timeout=0)
            t.join(timeout=30)
        assert self.pi.threads_alive() == 0


def test_an_inplace_call_honours_its_timeout_while_another_client_holds_the_replica():
    """Issue 6: INPLACE ignored output(timeout=...) and waited as long as the replica was held."""
    busy = Busy(InferenceMode.INPLACE)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", call(busy.pi, "output", np.ones(3, np.float32), 0.05)))
    t.start()
    t.join(timeout=10)  # a bound on a hang, not a speed claim: it waited the gate's 30 s before
    timed_out = not t.is_alive()
    busy.finish()
    t.join(timeout=30)
    assert timed_out, "output(timeout=0.05) was still waiting after 10 s"
    assert isinstance(result["r"], TimeoutError) and "no result within 0.05 s" in str(result["r"])
    assert busy.pi.requests_served == busy.before  # it never ran


@pytest.mark.parametrize("kind", KINDS)
def test_an_inplace_caller_waiting_for_a_replica_is_refused_by_shutdown_and_never_runs(kind):
    """Issue 6: an INPLACE caller waiting for a replica when shutdown() was called ran afterwards."""
    busy = Busy(InferenceMode.INPLACE)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", call(busy.pi, kind, np.ones(3, np.float32), None)))
    t.start()
    for _ in range(1000):
        if waiters(busy.pi):
            break
        threading.Event().wait(0.01)
    assert waiters(busy.pi) == 1  # it waits for the replica
    busy.pi.shutdown()  # INPLACE has no worker to join: this returns at once
    t.join(timeout=10)
    refused = not t.is_alive()
    busy.finish()
    t.join(timeout=30)
    assert refused, "the waiting caller was not answered by shutdown()"
    assert isinstance(result["r"], RuntimeError) and "shut down before this request ran" in str(result["r"])
    assert busy.pi.requests_served == 1  # only the holder's request ran


REFUSED = {  # value -> the exception raised at the call
    -1: ValueError,
    -1e-9: ValueError,
    -math.inf: ValueError,
    math.nan: ValueError,
    "1": TypeError,
    True: TypeError,
}
NO_WAIT = [0, 0.0, 1e-9]
NO_LIMIT = [None, math.inf, 1e9, 1e300]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", list(InferenceMode))
@pytest.mark.parametrize("value", list(REFUSED), ids=repr)
def test_a_negative_nan_or_non_number_timeout_is_refused_at_the_call_naming_it(mode, kind, value):
    busy = Busy(mode)
    try:
        got = call(busy.pi, kind, np.ones(3, np.float32), value)
        assert isinstance(got, REFUSED[value]), got
        assert f"ParallelInference.{kind}(timeout={value!r})" in str(got)
        assert busy.pi.queued() == busy.before - 1 and waiters(busy.pi) == 0  # nothing queued, nobody waits
    finally:
        busy.finish()
    assert busy.pi.requests_served == busy.before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", list(InferenceMode))
@pytest.mark.parametrize("value", NO_WAIT, ids=repr)
def test_a_zero_or_tiny_timeout_does_not_wait_for_a_busy_server(mode, kind, value):
    busy = Busy(mode)
    try:
        got = call(busy.pi, kind, np.ones(3, np.float32), value)
        assert isinstance(got, TimeoutError), got
        assert busy.pi.queued() == busy.before - 1 and waiters(busy.pi) == 0
    finally:
        busy.finish()
    assert busy.pi.requests_served == busy.before  # the call that timed out never ran


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", list(InferenceMode))
@pytest.mark.parametrize("value", NO_LIMIT, ids=repr)
@pytest.mark.parametrize("ending", ["release", "shutdown"])
def test_no_limit_waits_until_the_server_can_answer_or_shuts_down(mode, kind, value, ending):
    busy = Busy(mode)
    x = np.full(3, 2.0, np.float32)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", call(busy.pi, kind, x, value)))
    t.start()
    try:
        for _ in range(1000):  # it waits: for room in the full queue, or for the replica
            if waiters(busy.pi) or not t.is_alive():
                break
            threading.Event().wait(0.01)
        assert waiters(busy.pi) == 1 and t.is_alive() and "r" not in result, result
    finally:
        busy.finish(shutdown_first=ending == "shutdown", then=t)
    assert not t.is_alive()
    got = result["r"]
    if ending == "release":
        np.testing.assert_allclose(got, busy.net.output(x[None]).numpy()[0], rtol=1e-6)
        assert busy.pi.requests_served == busy.before + 1
    else:
        assert isinstance(got, RuntimeError) and "shut down" in str(got), got
        assert busy.pi.requests_served <= busy.before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", list(InferenceMode))
@pytest.mark.parametrize("value", [0, 1e-9, 30, math.inf, None], ids=repr)
def test_an_idle_server_answers_within_any_timeout_that_allows_waiting(mode, kind, value):
    """With room in the queue and a free replica: `submit` (which waits only for room) and
    INPLACE `output` (which runs the forward pass in the calling thread once it has a replica)
    get through with any timeout. The others wait for a worker (or an executor) to answer: with
    0 or 1e-9 they time out unless the answer happened to be there already."""
    net = Network([Dense(2)], (3,), seed=5)
    x = np.ones(3, np.float32)
    want = net.output(x[None]).numpy()[0]
    with ParallelInference(net, workers=1, inference_mode=mode) as pi:
        got = call(pi, kind, x, value)
        never_waits = kind == "submit" or (mode is InferenceMode.INPLACE and kind == "output")
        if value in (0, 1e-9) and not never_waits:
            assert isinstance(got, TimeoutError) or np.allclose(got, want, rtol=1e-6), got
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6)
        assert pi.output(x, timeout=30).shape == (2,)  # and the server goes on


@pytest.mark.parametrize("value", [-1, math.nan, "soon"], ids=repr)
def test_shutdown_refuses_a_timeout_it_cannot_honour_and_stays_open(value):
    net = Network([Dense(2)], (3,))
    pi = ParallelInference(net, workers=1)
    with pytest.raises((ValueError, TypeError), match=r"ParallelInference\.shutdown\(timeout="):
        pi.shutdown(timeout=value)
    assert pi.output(np.ones(3, np.float32)).shape == (2,)  # nothing was shut down
    pi.shutdown(timeout=math.inf)
    assert pi.threads_alive() == 0
