"""kit.parallel.inference.facade: ParallelInference's constructor checks its numbers at the call
naming the value, places worker i on the i-th device given (round robin) or by kit's rule; it
counts what it served; a timeout is read by one rule; a shut-down server says what to do, and
that remedy serves. The three ways to ask, under load, are in test_inference*.py."""

import math
import threading
import time

import numpy as np
import pytest
from _inference_layers import inference_threads

from kit.core.devices import as_device
from kit.nn import mlp
from kit.parallel import InferenceMode, ParallelInference
from kit.parallel.inference import facade
from kit.parallel.inference.delivery import SHUT_DOWN, SHUT_DOWN_REMEDY


def test_invalid_settings():
    net = mlp(4, hidden=(2,), n_out=2)
    with pytest.raises(ValueError, match=r"batch_limit=0\)"):
        ParallelInference(net, batch_limit=0)
    with pytest.raises(ValueError, match="'FAST' is not a valid InferenceMode"):
        ParallelInference(net, inference_mode="FAST")
    assert not inference_threads()


def test_a_shut_down_server_says_what_to_do_and_the_remedy_serves():
    """It said "ParallelInference was shut down" and no more (issue 45): the words name the remedy,
    and the remedy as printed (a new ParallelInference on the same network) answers."""
    net = mlp(32, hidden=(8,), n_out=4, seed=0)
    x = np.ones(32, np.float32)
    for leave in ("shutdown", "with"):
        if leave == "shutdown":
            pi = ParallelInference(net, workers=1)
            pi.shutdown()
        else:
            with ParallelInference(net, workers=1) as pi:
                pass
        with pytest.raises(RuntimeError) as err:
            pi.output(x)
        assert str(err.value) == f"{SHUT_DOWN}; {SHUT_DOWN_REMEDY}"
        with pytest.raises(RuntimeError) as err:  # update_model was accepted and served nothing
            pi.update_model(net)
        assert str(err.value) == f"{SHUT_DOWN}; {SHUT_DOWN_REMEDY}"
        assert "ParallelInference(net, ...)" in str(err.value)
        with ParallelInference(net, workers=1) as fresh:  # the remedy
            np.testing.assert_allclose(fresh.output(x).numpy(), net.output(x[None]).numpy()[0], rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "ParallelInference(workers=0): must be a whole number >= 1"),
        ({"workers": 2.0}, "ParallelInference(workers=2.0): must be a whole number >= 1"),
        ({"queue_limit": -1}, "ParallelInference(queue_limit=-1): must be a whole number >= 1"),
        ({"batch_limit": True}, "ParallelInference(batch_limit=True): must be a whole number >= 1"),
    ],
)
def test_each_count_is_refused_at_the_call_naming_it_and_the_value(kwargs, message):
    with pytest.raises(ValueError) as info:
        ParallelInference(mlp(4, hidden=(2,), n_out=2), **kwargs)
    assert str(info.value) == message
    assert not inference_threads()


def test_only_a_network_is_served():
    with pytest.raises(TypeError, match=r"^ParallelInference needs a kit.nn.Network, got ndarray$"):
        ParallelInference(np.ones((4, 2)))


@pytest.mark.parametrize(
    ("workers", "devices", "placed"),
    [
        (3, ["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:0"]),  # round robin over the devices given
        (None, ["cpu:1", "cpu:0"], ["cpu:1", "cpu:0"]),  # one worker per device given
        (2, "cpu:1", ["cpu:1", "cpu:1"]),  # one device, by name
        (1, as_device("cpu:0"), ["cpu:0"]),  # or as an object
    ],
)
def test_workers_are_placed_on_the_devices_given_in_turn(host_devices, workers, devices, placed):
    if host_devices < 2 and "cpu:1" in placed:
        pytest.skip("needs two simulated host devices")
    assert [d.name for d in facade._worker_devices(workers, devices, 32, 64)] == placed


def test_without_devices_two_workers_are_placed_by_kits_rule():
    assert len(facade._worker_devices(None, None, 32, 64)) == 2


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_a_server_has_a_replica_per_worker_counts_what_it_served_and_ends_its_threads(mode):
    net = mlp(4, hidden=(6,), n_out=3, seed=1)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    pi = ParallelInference(net, workers=2, inference_mode=mode.value)  # the mode's name will do
    assert pi.mode is mode and len(pi.replicas) == 2 and all(r is not net for r in pi.replicas)
    for replica in pi.replicas:
        np.testing.assert_array_equal(replica.params().numpy(), net.params().numpy())
    assert pi.threads_alive() == (0 if mode is InferenceMode.INPLACE else 2)
    got = np.stack([pi.output(row).numpy() for row in x])
    np.testing.assert_allclose(got, net.output(x).numpy(), rtol=1e-5, atol=1e-6)
    assert (pi.requests_served, pi.batches_run, pi.batch_sizes, pi.queued()) == (5, 5, [1] * 5, 0)
    pi.shutdown()
    assert pi.threads_alive() == 0 and not inference_threads()
    pi.shutdown()  # twice: nothing left to stop


@pytest.mark.parametrize(
    ("timeout", "no_limit"), [(None, True), (math.inf, True), (1e300, True), (0, False), (5, False)]
)
def test_a_timeout_becomes_a_deadline_or_none_for_no_limit(timeout, no_limit):
    assert threading.TIMEOUT_MAX < 1e300  # 1e300 s is past what a lock can wait: no limit
    before = time.monotonic()
    deadline = facade._deadline(timeout, "output")
    assert (deadline is None) == no_limit
    if not no_limit:
        assert before + timeout <= deadline <= time.monotonic() + timeout
        assert facade._left(deadline) <= timeout
    assert facade._left(None) is None and facade._left(time.monotonic() - 1) == 0.0


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (-1, ValueError, "ParallelInference.submit(timeout=-1): must be a number of seconds >= 0 (0: do not wait)"),
        (math.nan, ValueError, "ParallelInference.submit(timeout=nan): must be a number of seconds >= 0"),
        ("5", TypeError, "ParallelInference.submit(timeout='5'): must be a number of seconds >= 0, or None"),
        (True, TypeError, "ParallelInference.submit(timeout=True): must be a number of seconds"),
    ],
)
def test_a_timeout_that_is_no_number_of_seconds_is_refused_naming_it(timeout, error, message):
    with pytest.raises(error) as info:
        facade._deadline(timeout, "submit")
    assert str(info.value).startswith(message)


def test_output_from_a_done_callback_says_so_and_leaves_the_server_serving():
    """A Future's done-callback runs on the worker that answered; output() there waited for that
    very worker, and every later request timed out until shutdown()."""
    net = mlp(32, hidden=(8,), n_out=4, seed=0)
    x = np.ones(32, np.float32)
    errors = []

    def again(_future):
        try:
            pi.output(x)
        except RuntimeError as exc:
            errors.append(str(exc))

    with ParallelInference(net, workers=1) as pi:
        pi.submit(x).add_done_callback(again)
        answer = pi.output(x, timeout=10)  # the server still answers
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
    assert errors and "from one of the server's own threads" in errors[0] and "call submit() there" in errors[0]
    np.testing.assert_allclose(answer.numpy(), net.output(x[None]).numpy()[0], rtol=1e-6)
