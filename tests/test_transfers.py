"""Issue 21 item 8, the class: every copy between devices goes through the one counted path
(kit.devices.transfer), so transfer_stats() shows the traffic each feature is about. One case
per kind of copy, on two simulated host devices, ParallelInference's requests and answers included
(they went between the caller's device and a replica's as host arrays, uncounted)."""

import pytest

import kit
from kit.core.devices import reset_transfer_stats, set_host_device_count, transfer_stats
from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Sgd, mlp


@pytest.fixture
def two_hosts():
    previous = set_host_device_count(2)
    reset_transfer_stats()
    yield
    set_host_device_count(previous)


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:256], train.labels.numpy()[:256])


def _net(device):
    return mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), device=device, seed=0)


def _copies(a, b):
    return transfer_stats().get((a, b), (0, 0))


@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_parallel_wrapper_traffic_is_counted_both_ways(two_hosts, digits, mode):
    """SHARED_GRADIENTS applied worker 1's encoded updates on cpu:0 every round while
    transfer_stats() showed no copy from cpu:1 at all."""
    from kit.parallel import ParallelWrapper

    with ParallelWrapper(
        _net("cpu:0"), workers=2, devices=["cpu:0", "cpu:1"], training_mode=mode, prefetch_buffer=0
    ) as pw:
        pw.fit(ArrayIterator(digits, 32))
    assert _copies("cpu:0", "cpu:1")[0] > 0
    assert _copies("cpu:1", "cpu:0")[0] > 0  # worker 1's parameters (AVERAGING) or messages (SHARED)


def test_parameters_and_state_copied_between_devices_are_counted(two_hosts):
    a, b = _net("cpu:0"), _net("cpu:1")
    nbytes = a.flat_params.numpy().nbytes
    b.set_params(a.params())  # an NDArray of another device: was copied through the host uncounted
    assert _copies("cpu:0", "cpu:1") == (1, nbytes)
    reset_transfer_stats()
    b.copy_state_from(a)
    assert _copies("cpu:0", "cpu:1")[1] >= nbytes
    reset_transfer_stats()
    c = a.clone(device="cpu:1")
    assert c.device is kit.Device("cpu:1") and _copies("cpu:0", "cpu:1")[1] >= nbytes
    reset_transfer_stats()
    b.set_params(a.params().numpy())  # host values: no device-to-device copy to count
    assert transfer_stats() == {}


def test_batches_sent_to_another_device_are_counted(two_hosts, digits):
    moved = digits.to("cpu:1")
    assert moved.features.device is kit.Device("cpu:1")
    assert _copies("cpu:0", "cpu:1")[1] >= digits.features.numpy().nbytes


def _pi_calls(pi, x):
    """Every kind of ParallelInference caller, each with `x`; their answers."""
    import asyncio

    return [pi.output(x), pi.submit(x).result(timeout=30), asyncio.run(pi.output_async(x, timeout=30))]


@pytest.mark.parametrize("mode", ["BATCHED", "SEQUENTIAL", "INPLACE"])
def test_inference_requests_and_answers_between_devices_are_counted(two_hosts, mode):
    """A caller on cpu:1 served by a replica on cpu:0: its request is a copy cpu:1 -> cpu:0 and its
    answer one back, for every kind of caller and every mode; host data is no copy to count."""
    import numpy as np

    from kit.parallel import InferenceMode, ParallelInference

    net = _net("cpu:0")
    x = np.random.default_rng(0).random((5, 64)).astype(np.float32)
    want = net.output(x).numpy()
    with ParallelInference(net, workers=1, devices=["cpu:0"], inference_mode=InferenceMode[mode]) as pi:
        pi.output(x)  # warm-up
        reset_transfer_stats()
        with kit.device("cpu:1"):
            answers = _pi_calls(pi, kit.asarray(x, device="cpu:1"))
        for a in answers:
            assert a.device is kit.Device("cpu:1")
            np.testing.assert_allclose(a.numpy(), want, rtol=1e-5, atol=1e-6)
        # the asarray above is one copy of its own: host data onto cpu:1 is no transfer
        assert _copies("cpu:1", "cpu:0") == (3, 3 * x.nbytes)
        assert _copies("cpu:0", "cpu:1") == (3, 3 * want.nbytes)
        reset_transfer_stats()
        same = _pi_calls(pi, x)  # host data, answers on the caller's device cpu:0: nothing moves
        assert all(a.device is kit.Device("cpu:0") for a in same)
        assert transfer_stats() == {}
