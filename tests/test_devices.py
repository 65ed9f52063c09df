import threading

import pytest

import kit
from kit.devices import blas_threads, default_device, detach_thread, gpu_count


def test_devices_are_interned_and_listed():
    assert kit.Device("cpu:0") is kit.Device("cpu") is kit.Device(" CPU:0 ")
    listed = kit.devices()
    assert listed[0] is kit.Device("cpu:0")
    assert all(d.kind == "gpu" for d in listed[1:])


@pytest.mark.parametrize("spec", ["tpu:0", "cpu:x", "gpu:-1", ""])
def test_bad_specs_are_rejected(spec):
    with pytest.raises(kit.DeviceError, match="bad device spec"):
        kit.Device(spec)


def test_missing_devices_say_what_exists():
    with pytest.raises(kit.DeviceError, match="the CPU is one device"):
        kit.Device("cpu:1")
    with pytest.raises(kit.DeviceError, match="does not exist"):
        kit.Device(f"gpu:{gpu_count()}")


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


def test_seed_makes_random_reproducible_per_device():
    kit.seed(7)
    a = kit.randn((5,)).numpy().copy()
    kit.seed(7)
    b = kit.randn((5,)).numpy().copy()
    kit.seed(8)
    c = kit.randn((5,)).numpy().copy()
    assert (a == b).all() and not (a == c).all()


def test_memory_info_reports_sane_numbers():
    free, total = kit.Device("cpu:0").memory_info()
    assert 0 < free <= total
