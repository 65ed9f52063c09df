"""kit.parallel.worker: a worker runs its tasks in order on its own thread, pinned to its device;
its caller hears a task's failure, a silent or dead worker and a shutdown as errors naming the
worker, its device and what to expect; `fit` is the replica's own step on a batch sent to its
device, and `encode` then `apply` (SHARED_GRADIENTS) move the replica by what NumPy's residual
arithmetic says. Real threads and a real ParallelWrapper (for its settings); no mocks."""

import re
import threading
import time

import numpy as np
import pytest
from _datasets import random_dataset

from kit.core.devices import as_device
from kit.nn import Sgd, mlp
from kit.parallel import FixedThresholdAlgorithm, ParallelWrapper, TrainingMode
from kit.parallel import worker as worker_module
from kit.parallel.worker import SHUT_DOWN_DURING_FIT, Worker, WorkerError


def _net(seed=0):
    return mlp(6, hidden=(5,), n_out=3, updater=Sgd(0.5), seed=seed)


@pytest.fixture
def wrapper():
    tau = 1e-3
    with ParallelWrapper(
        _net(), workers=1, training_mode=TrainingMode.SHARED_GRADIENTS, threshold_algorithm=FixedThresholdAlgorithm(tau)
    ) as pw:
        yield pw


@pytest.fixture
def worker(wrapper):
    w = Worker(7, _net(), as_device("cpu:0"), wrapper)
    yield w
    w.stop()


def test_tasks_run_in_order_on_the_workers_own_thread(worker):
    seen = []
    for i in range(5):
        worker.submit(lambda w, i=i: seen.append((i, threading.current_thread().name, w.index)) or i * i)
        assert worker.result() == i * i
    assert seen == [(i, "ParallelWrapper training thread 7", 7) for i in range(5)]
    assert threading.current_thread().name != seen[0][1]


def test_a_failing_task_names_the_worker_and_its_device_and_the_worker_goes_on(worker):
    def fails(w):
        raise ValueError(f"batch of worker {w.index} holds NaN")

    worker.submit(fails)
    with pytest.raises(WorkerError) as info:
        worker.result()
    assert str(info.value) == f"worker 7 on {worker.device} failed: ValueError: batch of worker 7 holds NaN"
    assert isinstance(info.value.__cause__, ValueError)
    worker.submit(lambda w: "still here")
    assert worker.result() == "still here"


def test_a_worker_that_does_not_answer_by_the_deadline_is_named_and_its_answer_still_comes(worker):
    release = threading.Event()
    worker.submit(lambda w: release.wait(timeout=30) and "late")
    with pytest.raises(WorkerError, match=rf"^worker 7 on {re.escape(str(worker.device))} did not answer in time$"):
        worker.result(deadline=time.monotonic())  # already past
    release.set()
    assert worker.result(deadline=time.monotonic() + 30) == "late"


def test_a_worker_whose_thread_ended_without_an_answer_is_named(worker):
    worker.tasks.put(worker_module._STOP)  # the thread ends without stop(): nothing will answer
    worker.thread.join(timeout=30)
    with pytest.raises(WorkerError, match=rf"^worker 7 on {re.escape(str(worker.device))} died without reporting$"):
        worker.result()
    with pytest.raises(WorkerError, match="died without reporting"):
        for _ in range(3):  # the queue holds one task: the second put waits, then finds the thread gone
            worker.submit(lambda w: None)


def test_after_stop_the_thread_is_gone_and_calls_say_fit_was_shut_down(worker):
    worker.submit(lambda w: 1)
    assert worker.result() == 1
    worker.stop()
    assert not worker.thread.is_alive() and worker.stopping
    with pytest.raises(RuntimeError) as info:
        worker.submit(lambda w: 2)
    assert str(info.value) == SHUT_DOWN_DURING_FIT and "wrote none of its rounds into the model" in str(info.value)
    with pytest.raises(RuntimeError, match="was shut down while fit"):
        worker.result()
    worker.stop()  # twice: nothing left to stop


def test_fit_is_the_replicas_own_step_on_the_batch(worker):
    ds = random_dataset(16, seed=1)
    alone = _net()
    worker.submit(lambda w: w.fit(ds))
    score = worker.result()
    assert score == pytest.approx(alone.fit_batch(ds), rel=1e-6)
    np.testing.assert_allclose(worker.replica.params().numpy(), alone.params().numpy(), rtol=1e-6)


def test_encode_takes_the_step_back_into_the_residual_and_apply_moves_by_the_sent_part(worker):
    """NumPy's account: the step a replica would take alone is `update`; encode leaves the params
    where they were and splits `update` into the message (entries of at least tau, sent as +-tau)
    and the residual (the rest); apply subtracts the decoded message."""
    ds = random_dataset(16, seed=2)
    alone = _net()
    before = alone.params().numpy().ravel().copy()
    alone.fit_batch(ds)
    update = before - alone.params().numpy().ravel()
    tau = 1e-3
    worker.submit(lambda w: w.encode(ds, 0, 0))
    _, message, stats = worker.result()
    np.testing.assert_array_equal(worker.replica.params().numpy().ravel(), before)  # taken back
    sent = np.where(np.abs(update) >= tau, np.sign(update) * tau, 0.0)
    np.testing.assert_allclose(worker.residual, update - sent, atol=1e-7)
    assert stats == {"worker": 7, "tau": tau, "sparsity": np.count_nonzero(sent) / update.size, "dense": stats["dense"]}
    worker.submit(lambda w: w.apply([(message, w.device), (None, w.device)]))  # a worker with nothing to send
    worker.result()
    np.testing.assert_allclose(worker.replica.params().numpy().ravel(), before - sent, atol=1e-7)
