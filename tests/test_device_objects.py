"""kit.core.device_objects: a Device is interned and refuses a bad spec or a missing device with
advice that runs; simulated host devices are bounded; a LogicalDevice is a labelled slot of one
physical device. Which device a thread uses, and the BLAS threads: test_devices.py."""

import pytest

import kit
from kit.core.device_objects import Device, LogicalDevice, host_device_count
from kit.core.devices import gpu_count, set_host_device_count


@pytest.mark.parametrize("spec", ["tpu:0", "cpu:x", "gpu:-1", ""])
def test_bad_specs_are_rejected(spec):
    with pytest.raises(kit.DeviceError, match="bad device spec"):
        kit.Device(spec)


def test_missing_devices_say_what_exists():
    with pytest.raises(kit.DeviceError, match="the CPU is one device"):
        kit.Device("cpu:1")
    with pytest.raises(kit.DeviceError, match="does not exist"):
        kit.Device(f"gpu:{gpu_count()}")


def test_the_advice_for_a_missing_host_device_runs_as_printed():
    """kit.devices is the module and, called, the list: the advice used to raise AttributeError."""
    with pytest.raises(kit.DeviceError) as info:
        kit.Device("cpu:2")
    message = str(info.value)
    assert message == (
        "device 'cpu:2' does not exist: the CPU is one device, 'cpu:0'; "
        "KIT_HOST_DEVICES=3 or kit.devices.set_host_device_count(3) simulates 3 host devices"
    )
    advice = message.split(" or ", 1)[1].split(" simulates", 1)[0]
    previous = eval(advice, {"kit": kit})
    try:
        assert kit.Device("cpu:2").simulated and len(kit.devices()) >= 3
    finally:
        set_host_device_count(previous)


def test_host_devices_are_bounded():
    for bad in (0, 65, 100_000, 2.0, True):
        with pytest.raises(kit.DeviceError, match=r"kit simulates 1 to 64 host devices; e\.g\. kit\.devices\.set_h"):
            set_host_device_count(bad)
    previous = set_host_device_count(3)
    try:
        with pytest.raises(
            kit.DeviceError, match=r"3 simulated host devices, cpu:0\.\.cpu:2; kit simulates at most 64"
        ):
            kit.Device("cpu:64")
    finally:
        set_host_device_count(previous)


def test_memory_info_reports_sane_numbers():
    free, total = kit.Device("cpu:0").memory_info()
    assert 0 < free <= total


@pytest.mark.parametrize("spec", ["cpu", "CPU", " cpu:0 ", "Cpu:0"])
def test_every_spelling_of_a_device_is_the_one_interned_object(spec):
    assert Device(spec) is Device("cpu:0") and Device(Device(spec)) is Device("cpu:0")
    assert Device(spec).name == "cpu:0" and Device(spec).kind == "cpu" and not Device(spec).is_gpu


def test_a_logical_device_is_a_labelled_slot_of_its_physical_device():
    d = LogicalDevice(Device("cpu:0"), 1, 3)
    assert repr(d) == "LogicalDevice('cpu:0/logical1of3')" and d.physical is Device("cpu:0")
    assert (d.slot, d.logical) == (1, True) and d.kind == "cpu"
    assert d is not LogicalDevice(Device("cpu:0"), 1, 3)  # slots are not interned: each group its own


def test_the_host_device_count_is_set_and_restored_and_devices_past_it_cease_to_exist():
    previous = set_host_device_count(2)
    try:
        assert host_device_count() == 2 and Device("cpu:1").simulated
        assert set_host_device_count(1) == 2  # returns the count it replaces
        with pytest.raises(kit.DeviceError, match="device 'cpu:1' does not exist"):
            Device("cpu:1")
    finally:
        set_host_device_count(previous)
    assert host_device_count() == previous
