"""GPU checks: run wherever CuPy sees a device (skipped elsewhere, see conftest.py)."""

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet, load_digits

pytestmark = pytest.mark.gpu


def test_workspace_on_a_gpu_makes_no_allocations_after_learning():
    g = kit.Device("gpu:0")
    x = kit.rand((64, 128), device=g)
    w = kit.rand((128, 64), device=g)
    ws = kit.get_workspace_for_current_thread(name="GPU_LOOP", device=g)
    with ws:
        (x @ w).tanh().sum()
    before = kit.memory.heap_allocations(this_thread=True)
    for _ in range(10):
        with ws:
            y = (x @ w).tanh().sum()
    assert kit.memory.heap_allocations(this_thread=True) == before
    assert not y.is_valid
    stats = kit.readings.stats()
    assert stats["gpus"] and stats["gpus"][0]["pool_total_bytes"] > 0


def test_network_trains_on_the_gpu_like_on_the_cpu():
    from kit.nn import Sgd, mlp

    train, _ = load_digits()
    results = {}
    for dev in ("cpu:0", "gpu:0"):
        with kit.device(dev):
            tr = DataSet(train.features.numpy(), train.labels.numpy(), device=dev)
            net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), device=dev, seed=0)
            net.fit(ArrayIterator(tr, 64), epochs=2)
            results[dev] = net.params().numpy()
    np.testing.assert_allclose(results["cpu:0"], results["gpu:0"], rtol=1e-3, atol=1e-4)


def test_parallel_wrapper_on_logical_gpu_devices_says_logical():
    from kit.nn import Sgd, mlp
    from kit.parallel import ParallelWrapper

    train, _ = load_digits()
    with kit.device("gpu:0"):
        tr = DataSet(train.features.numpy(), train.labels.numpy(), device="gpu:0")
        net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), device="gpu:0")
        devices = kit.logical_devices(2, "gpu:0")
        with ParallelWrapper(net, workers=2, devices=devices, prefetch_buffer=0) as pw:
            pw.fit(ArrayIterator(tr, 32))
            assert pw.describe().endswith("(logical)")
        assert np.isfinite(net.params().numpy()).all()
