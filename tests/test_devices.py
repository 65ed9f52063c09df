import threading

import numpy as np
import pytest

import kit
from kit.core.devices import (
    BlasThreadShare,
    blas_threads,
    default_device,
    detach_thread,
    reset_transfer_stats,
    set_host_device_count,
    transfer_stats,
)
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.nn import Sgd, mlp
from kit.parallel import ParallelWrapper


def test_devices_are_interned_and_listed():
    assert kit.Device("cpu:0") is kit.Device("cpu") is kit.Device(" CPU:0 ")
    listed = kit.devices()
    assert listed[0] is kit.Device("cpu:0")
    assert all(d.kind == "gpu" for d in listed[1:])


def test_device_context_places_arrays_and_nests():
    a, b = kit.logical_devices(2, "cpu:0")
    with kit.device(a):
        x = kit.zeros((2,))
        with kit.device(b):
            y = kit.zeros((2,))
        z = kit.zeros((2,))
    assert x.device is a and y.device is b and z.device is a
    assert kit.zeros((1,)).device is default_device()


def test_thread_affinity_is_per_thread():
    a, b = kit.logical_devices(2, "cpu:0")
    seen = {}

    def worker(dev, key):
        kit.attach_thread_to_device(dev)
        seen[key] = (kit.device_for_current_thread(), kit.zeros((1,)).device)
        detach_thread()

    threads = [threading.Thread(target=worker, args=(d, i)) for i, d in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen[0] == (a, a) and seen[1] == (b, b)
    assert kit.device_for_current_thread() is default_device()


def test_logical_devices_always_say_they_are_logical():
    group = kit.logical_devices(3, "cpu:0")
    assert [d.slot for d in group] == [0, 1, 2]
    for d in group:
        assert "logical" in d.name and "logical" in repr(d)
        assert "NOT a separate device" in d.describe()
        assert d.physical is kit.Device("cpu:0")
        assert d.blas_threads >= 1


def test_logical_devices_validate_n():
    with pytest.raises(kit.DeviceError, match="positive integer"):
        kit.logical_devices(0)
    with pytest.raises(kit.DeviceError, match="already logical"):
        kit.logical_devices(2, kit.logical_devices(2, "cpu:0")[0])


def test_blas_threads_limit_is_applied_and_restored():
    from threadpoolctl import threadpool_info

    def current():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = current()
    with blas_threads(1):
        assert all(n == 1 for n in current())
    assert current() == before


def test_blas_thread_shares_apply_the_smallest_and_the_last_one_released_restores():
    from threadpoolctl import threadpool_info

    def current():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = current()
    wide = BlasThreadShare(workers=2)  # half the cores each
    with BlasThreadShare(workers=10_000) as narrow:  # one thread: the smallest applies
        assert narrow.threads == 1 and all(n == 1 for n in current())
    assert current() == [wide.threads] * len(before)  # the narrow one gone: the wide one's limit again
    wide.release()
    wide.release()  # once released, nothing more
    assert current() == before


def test_seed_makes_random_reproducible_per_device():
    kit.seed(7)
    a = kit.randn((5,)).numpy().copy()
    kit.seed(7)
    b = kit.randn((5,)).numpy().copy()
    kit.seed(8)
    c = kit.randn((5,)).numpy().copy()
    assert (a == b).all() and not (a == c).all()


# ---- simulated host devices: separate placement domains on one CPU -------------------------


@pytest.fixture
def three_hosts():
    previous = set_host_device_count(3)
    reset_transfer_stats()
    yield [kit.Device(f"cpu:{i}") for i in range(3)]
    set_host_device_count(previous)


def test_simulated_host_devices_are_listed_and_say_so(three_hosts):
    assert kit.devices()[:3] == three_hosts
    for d in three_hosts:
        assert "simulated on the host" in str(d) and "simulated on the host" in d.describe()
        assert d.physical is d and not d.logical and d.blas_threads >= 1
    with pytest.raises(kit.DeviceError, match=r"3 simulated host devices, cpu:0\.\.cpu:2"):
        kit.Device("cpu:3")


def test_arrays_on_two_host_devices_never_mix_and_copies_are_counted(three_hosts):
    a = kit.ones((4, 5), device="cpu:0")
    b = kit.ones((4, 5), device="cpu:1")
    with pytest.raises(kit.DeviceMismatchError, match=r"cpu:0 \(simulated on the host\)|cpu:0 and cpu:1"):
        a + b
    assert transfer_stats() == {}
    moved = kit.Device("cpu:1").send(a)
    assert moved.device is three_hosts[1] and (moved + b).numpy().tolist() == [[2.0] * 5] * 4
    assert transfer_stats() == {("cpu:0", "cpu:1"): (1, 4 * 5 * 4)}
    assert moved.to("cpu:1") is moved and transfer_stats()[("cpu:0", "cpu:1")][0] == 1  # no copy to itself


def test_each_host_device_has_its_own_counters_generator_and_workspaces(three_hosts):
    before = kit.memory.counters().get("cpu:1", (0, 0))[0]
    kit.zeros((3,), device="cpu:1")
    assert kit.memory.counters()["cpu:1"][0] == before + 1
    kit.seed(3)
    r0, r1 = kit.randn((4,), device="cpu:0").numpy(), kit.randn((4,), device="cpu:1").numpy()
    assert not np.array_equal(r0, r1)
    ws = kit.get_workspace_for_current_thread(name="ON_CPU1", device="cpu:1")
    with ws:
        inside = kit.zeros((3,), device="cpu:1")
        elsewhere = kit.zeros((3,), device="cpu:0")  # another device's array never lands in this arena
    assert inside.workspace is ws and elsewhere.workspace is None


def test_a_batch_left_on_the_wrong_device_raises_instead_of_copying(three_hosts):
    net = mlp(6, hidden=(4,), n_out=3, device="cpu:1")
    ds = DataSet(np.random.default_rng(0).random((8, 6)), np.arange(8) % 3, num_classes=3, device="cpu:0")
    with pytest.raises(ValueError, match=r"features are on cpu:0.* but the network is on cpu:1"):
        net.fit_batch(ds)
    assert transfer_stats() == {}  # nothing was copied behind the user's back
    net.fit_batch(ds.to("cpu:1"))  # the explicit transfer works
    assert transfer_stats() == {("cpu:0", "cpu:1"): (2, ds.features.nbytes + ds.labels.nbytes)}


def test_prefetch_delivers_batches_on_its_device(three_hosts):
    data = DataSet(np.random.default_rng(1).random((64, 6)), np.arange(64) % 3, num_classes=3)
    plain = [b.features.numpy().copy() for b in ArrayIterator(data, 16)]
    with AsyncPrefetchIterator(ArrayIterator(data, 16), prefetch=2, device="cpu:2", min_size=0) as it:
        got = [(b.features.device, b.features.numpy().copy()) for b in it]
    assert all(dev is three_hosts[2] for dev, _ in got)
    assert all(np.array_equal(a, b) for a, (_, b) in zip(plain, got))
    assert transfer_stats()[("cpu:0", "cpu:2")][0] == 2 * len(plain)  # features and labels per batch


def test_averaging_costs_exactly_the_copies_it_needs(three_hosts):
    rng = np.random.default_rng(2)
    data = DataSet(rng.random((80, 6)), rng.integers(0, 3, 80), num_classes=3)
    net = mlp(6, hidden=(4,), n_out=3, updater=Sgd(0.1))
    rounds = 80 // (2 * 8)
    with ParallelWrapper(net, devices=["cpu:0", "cpu:1"], prefetch_buffer=0) as pw:
        built = transfer_stats()
        assert built == {("cpu:0", "cpu:1"): (1, net.num_params * 4)}  # the replica on cpu:1
        reset_transfer_stats()
        pw.fit(ArrayIterator(data, 8), epochs=1)
    stats = transfer_stats()
    params = net.num_params * 4
    batch = 8 * 6 * 8 + 8 * 3 * 8  # float64 data travel as given, cast where they meet the network
    # per round: worker 1's batch goes to cpu:1, its parameters come to cpu:0 for the mean, the
    # mean goes back to cpu:1 (Sgd keeps no updater state to average)
    assert stats[("cpu:1", "cpu:0")] == (rounds, rounds * params)
    assert stats[("cpu:0", "cpu:1")] == (3 * rounds, rounds * (params + batch))


@pytest.mark.parametrize(("made_with", "now"), [(2, 1), (3, 1), (3, 2), (4, 2)])
def test_an_array_on_a_simulated_device_never_prints_as_a_physical_cpu_after_the_count_goes_down(made_with, now):
    """After set_host_device_count(1) an array made on cpu:1 printed as a physical second CPU."""
    before = kit.devices.host_device_count()
    try:
        kit.devices.set_host_device_count(made_with)
        arrays = [kit.zeros((2,), device=f"cpu:{i}") for i in range(made_with)]
        kit.devices.set_host_device_count(now)
        for i, a in enumerate(arrays):
            simulated = i > 0 or now > 1
            assert a.device.simulated is simulated
            assert ("simulated on the host" in repr(a)) is simulated
            assert ("(physical)" in a.device.describe()) is not simulated
            if i >= now:
                assert "no longer listed" in a.device.describe()
    finally:
        kit.devices.set_host_device_count(before)
