"""kit.parallel.inference.lending: INPLACE inference lends each caller a replica. A borrower is counted
as running until it gives the replica back, waits (boundedly) while every replica is lent, and is
refused in words once the server is shut down or when its features do not fit the model."""

import threading
import time

import numpy as np
import pytest

from kit.nn import Dense, Network
from kit.parallel import ParallelInference

X = np.zeros((1, 3), np.float32)


def _server(workers=2):
    return ParallelInference(Network([Dense(2)], (3,)), workers=workers, inference_mode="INPLACE")


def test_a_borrowed_replica_is_running_until_given_back_and_then_counted_as_served():
    with _server() as pi:
        engine = pi._engine
        i = engine.borrow(X, deadline=None, timeout=None)
        assert engine.running == 1 and i not in engine.free and len(engine.free) == 1
        engine.give_back(i, served=True)
        assert engine.running == 0 and i in engine.free and pi.requests_served == 1
        j = engine.borrow(X, deadline=None, timeout=None)
        engine.give_back(j, served=False)  # a forward that raised: given back, not counted
        assert pi.requests_served == 1


def test_run_borrowed_answers_from_the_lent_replica_and_gives_it_back():
    with _server() as pi:
        engine = pi._engine
        i = engine.borrow(X, deadline=None, timeout=None)
        out, on = engine.run_borrowed(i, X, None)
        assert out.shape == (1, 2) and on is engine.devices[i]
        np.testing.assert_allclose(out, pi.output(X[0])[None], rtol=1e-6)
        assert engine.running == 0 and sorted(engine.free) == [0, 1]


def test_with_every_replica_lent_a_borrower_times_out_saying_why():
    with _server(workers=1) as pi:
        engine = pi._engine
        i = engine.borrow(X, deadline=None, timeout=None)
        with pytest.raises(TimeoutError, match=r"no result within 0\.05 s \(every replica in use\)"):
            engine.borrow(X, deadline=time.monotonic() + 0.05, timeout=0.05)
        assert engine.running == 1  # the one that timed out is not counted
        engine.give_back(i, served=False)


def test_a_borrower_whose_caller_is_gone_gets_no_replica():
    with _server(workers=1) as pi:
        engine = pi._engine
        i = engine.borrow(X, deadline=None, timeout=None)
        gone, got = threading.Event(), []
        waiter = threading.Thread(target=lambda: got.append(engine.borrow(X, time.monotonic() + 20, 20, gone)))
        waiter.start()
        gone.set()
        engine.wake_borrowers()
        waiter.join(20)
        assert got == [None] and engine.running == 1
        engine.give_back(i, served=False)


def test_a_borrower_is_refused_once_shut_down_and_one_of_another_shape_at_once():
    with _server() as pi:
        engine = pi._engine
        with pytest.raises(ValueError, match=r"expected one example of shape \(3,\) or a batch \(n, 3\), got \(1, 4\)"):
            engine.borrow(np.zeros((1, 4), np.float32), deadline=None, timeout=None)
        assert engine.running == 0
    with pytest.raises(RuntimeError, match="shut down"):
        engine.borrow(X, deadline=None, timeout=None)
