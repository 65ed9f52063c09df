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


def test_copies_between_host_and_gpu_go_through_the_transfer_path():
    from kit.core.devices import reset_transfer_stats, transfer_stats

    reset_transfer_stats()
    host = kit.arange(12, dtype="float32", device="cpu:0").reshape(3, 4)
    on_gpu = kit.Device("gpu:0").send(host)
    back = on_gpu.to("cpu:0")
    np.testing.assert_array_equal(back.numpy(), host.numpy())
    assert transfer_stats() == {("cpu:0", "gpu:0"): (1, 48), ("gpu:0", "cpu:0"): (1, 48)}
    with pytest.raises(kit.DeviceMismatchError):
        host + on_gpu


def test_float16_reductions_on_the_gpu_match_the_cpu_and_float64():
    """The sweep of tests/test_ndarray.py on the GPU: float16 sum, mean, var, max and min agree
    with the float64 answer cast to float16, and with kit on the CPU (NumPy's own float16 var of
    100,000 ones is inf; CuPy's was NaN)."""
    from tests.test_ndarray import float16_cases, float16_reference

    for x in float16_cases():
        for op in ("sum", "mean", "var", "max", "min"):
            for axis in (None, 0):
                got = getattr(kit.asarray(x, device="gpu:0"), op)(axis=axis).numpy()
                on_cpu = getattr(kit.asarray(x, device="cpu:0"), op)(axis=axis).numpy()
                want = float16_reference(x, op, axis)
                assert got.dtype == np.float16, (op, axis)
                np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=1e-3, err_msg=f"{op} {axis}")
                np.testing.assert_allclose(got, on_cpu, rtol=2e-3, atol=1e-3, err_msg=f"{op} {axis} vs CPU")


def test_a_host_copy_of_a_gpu_workspace_array_does_not_change_later():
    g = kit.Device("gpu:0")
    ws = kit.get_workspace_for_current_thread(name="GPU_COPY", device=g)
    with ws:
        kept = kit.full((8,), 3.0, device=g).numpy()
    with ws:
        kit.full((8,), 7.0, device=g)
    assert kept.tolist() == [3.0] * 8


def test_averaging_across_a_gpu_and_the_cpu_equals_one_model():
    from kit.nn import Sgd, mlp
    from kit.parallel import ParallelWrapper

    train, _ = load_digits()
    n = 20 * 2 * 5
    data = DataSet(train.features.numpy()[:n], train.labels.numpy()[:n])
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    ref = net.clone()
    with ParallelWrapper(net, devices=["cpu:0", "gpu:0"], prefetch_buffer=0) as pw:
        pw.fit(ArrayIterator(data, 20), epochs=2)
    ref.fit(ArrayIterator(data, 40), epochs=2)
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-4, atol=1e-5)


def test_parallel_inference_on_the_gpu_answers_like_the_model():
    from kit.nn import mlp
    from kit.parallel import InferenceMode, ParallelInference

    train, _ = load_digits()
    x = train.features.numpy()[:64]
    net = mlp(64, hidden=(32,), n_out=10, device="gpu:0")
    expected = net.output(kit.asarray(x.astype(np.float32), device="gpu:0")).numpy()
    with ParallelInference(net, workers=2, inference_mode=InferenceMode.BATCHED) as pi:
        got = pi.output(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_early_stopping_on_the_gpu_keeps_the_best_model():
    from kit.nn import Sgd, mlp
    from kit.training.earlystopping import (
        DataSetLossCalculator,
        EarlyStoppingConfig,
        EarlyStoppingTrainer,
        MaxEpochsTerminationCondition,
    )

    train, test = load_digits()
    tr = DataSet(train.features.numpy(), train.labels.numpy(), device="gpu:0")
    va = DataSet(test.features.numpy(), test.labels.numpy(), device="gpu:0")
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), device="gpu:0")
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)], score_calculator=DataSetLossCalculator(va)
    )
    result = EarlyStoppingTrainer(cfg, net, ArrayIterator(tr, 64)).fit()
    assert result.total_epochs == 3 and result.best_model.device.kind == "gpu"
    assert result.best_model.epoch == result.best_model_epoch


def test_copies_between_gpu_streams_wait_for_the_writer_both_ways():
    """A logical slot's stream does not wait for the default stream: a copy queued there right
    after a long kernel on the default stream read the memory before the kernel wrote it (a
    worker's labels read as zeros, then NaN losses in chapter 4 on an H100). Every copy path
    between GPU streams and to the host is swept: default -> slot, slot -> slot, slot -> host,
    slot -> default, and a scalar read."""
    import threading

    from kit.core.devices import detach_thread

    cupy = kit.backend.cupy()
    g = kit.Device("gpu:0")
    slots = kit.logical_devices(2, "gpu:0")
    a = kit.asarray(np.full((4096, 4096), 1 / 4096, np.float32), device=g)
    for round_ in range(5):
        big = a @ a  # ~0.1 TFLOP queued on the default stream; the copy is queued at once
        big = big + float(round_)
        on_slot = big.to(slots[0])
        want = 1 / 4096 + round_
        assert float(on_slot[4095, 4095]) == pytest.approx(want, rel=1e-5)
        other = on_slot.to(slots[1])  # slot -> slot
        back = other.to(g)  # slot -> default
        np.testing.assert_allclose(back.numpy()[::512, ::512], want, rtol=1e-5)

    seen = {}

    def worker():
        kit.attach_thread_to_device(slots[1])
        try:
            seen["stream"] = cupy.cuda.get_current_stream()
            x = kit.asarray(np.full((4096, 4096), 1 / 4096, np.float32), device=slots[1])
            seen["result"] = (x @ x) * 2.0  # still running on the slot's stream when handed over
        finally:
            detach_thread()
        seen["after"] = cupy.cuda.get_current_stream()

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert seen["stream"] == slots[1]._stream_for_activate()  # the attached thread launches there
    assert seen["after"] == cupy.cuda.Stream.null
    np.testing.assert_allclose(seen["result"].numpy()[::512, ::512], 2 / 4096, rtol=1e-5)  # slot -> host
    assert float(seen["result"][0, 0]) == pytest.approx(2 / 4096, rel=1e-5)  # a scalar read


def test_a_device_cache_limit_does_not_cap_what_may_be_allocated():
    cupy = kit.backend.cupy()
    kit.memory.set_max_device_cache(1 << 20)
    try:
        assert cupy.get_default_memory_pool().get_limit() == 0
        x = kit.zeros((64 << 20,), device="gpu:0")  # 256 MiB > the 1 MiB cache limit
        assert x.shape == (64 << 20,)
    finally:
        kit.memory.set_max_device_cache(0)


def test_heap_shortcuts_on_the_gpu_count_and_match_the_general_path():
    """Heap results that CuPy allocates itself (same-dtype operators, reductions) are counted like
    every allocation and equal what the general path (inside a workspace) gives."""
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((33, 17)).astype(np.float32) for _ in range(2))
    a, b = kit.asarray(x, device="gpu:0"), kit.asarray(y, device="gpu:0")
    before = kit.memory.heap_allocations("gpu:0", this_thread=True)
    results = [a + b, b - a, a * b, a / b, a < b, a.sum(), a.mean(axis=0), a.var(axis=1), a.max(), a.min(axis=0)]
    assert kit.memory.heap_allocations("gpu:0", this_thread=True) - before == len(results)
    with kit.get_workspace_for_current_thread(name="GPU_SHORTCUT", device="gpu:0"):
        general = [a + b, b - a, a * b, a / b, a < b, a.sum(), a.mean(axis=0), a.var(axis=1), a.max(), a.min(axis=0)]
        general = [g.numpy() for g in general]
    for got, want in zip(results, general):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_matmul_precision_high_uses_tf32_and_highest_restores_float32():
    """TF32 keeps 10 mantissa bits: 1 + 2**-12 rounds to 1 in the inputs, so a 1024-term dot
    product of those values gives exactly 1024 with 'high' and about 1024.25 with 'highest'."""
    a = kit.full((256, 1024), 1 + 2.0**-12, device="gpu:0")
    b = kit.ones((1024, 256), device="gpu:0")
    previous = kit.backend.set_matmul_precision("high")
    try:
        fast = float((a @ b).numpy()[0, 0])
    finally:
        kit.backend.set_matmul_precision(previous)
    assert kit.backend.get_matmul_precision() == previous == "highest"
    full = float((a @ b).numpy()[0, 0])
    assert fast == 1024.0
    assert full == pytest.approx(1024 * (1 + 2.0**-12), rel=1e-6)


def test_a_resnet_step_in_tf32_stays_close_to_float32():
    """kit's convolutions are matmuls: with 'high' a ResNet-18 step's loss stays within TF32's
    precision of the float32 one, and the parameters move by about the same amounts."""
    from kit.nn import Sgd, resnet18

    rng = np.random.default_rng(0)
    x = rng.random((32, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 32)
    out = {}
    for precision in ("highest", "high"):
        net = resnet18(device="gpu:0", updater=Sgd(0.1), seed=0)
        before = net.params().numpy()
        previous = kit.backend.set_matmul_precision(precision)
        try:
            score = net.fit_batch(DataSet(x, y, num_classes=10, device="gpu:0"))
        finally:
            kit.backend.set_matmul_precision(previous)
        out[precision] = score, net.params().numpy() - before
    assert out["high"][0] == pytest.approx(out["highest"][0], rel=1e-2)
    moved_32, moved_tf = out["highest"][1], out["high"][1]
    assert np.linalg.norm(moved_tf - moved_32) < 0.05 * np.linalg.norm(moved_32)


def test_a_learned_arena_takes_the_memory_cupy_cached_for_its_learning_cycle():
    """Issue 40: the d2l run's pool held 37.7 GB. When a workspace's arena is allocated on a GPU,
    CuPy's cached free blocks (the learning cycle's spills, an outgrown arena) go back first."""
    import cupy

    pool = cupy.get_default_memory_pool()
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), "POOLED", "gpu:0")
    with ws:  # the learning cycle spills
        for _ in range(4):
            kit.zeros((1 << 20,), device="gpu:0")
    assert ws.capacity > 0
    assert pool.free_bytes() == 0  # nothing cached beside the arena that replaced the spills
    ws.destroy()


def test_a_resnet18_step_on_the_gpu_reserves_no_more_than_pytorch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    from kit.bench.memory import step_memory

    kit_side = step_memory("kit", "resnet18", 64)
    torch_side = step_memory("torch", "resnet18", 64)
    assert kit_side["peak_growth"] <= torch_side["peak_growth"], (kit_side, torch_side)
