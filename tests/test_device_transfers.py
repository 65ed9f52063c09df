"""kit.core.device_transfers: the one transfer path. A copy between two devices is counted per
ordered pair with its bytes, a copy within a device is not, the counters reset; host reads of CPU
data are the array itself; host memory counts as the CPU device's own. Traffic of whole runs
(ParallelWrapper, inference): test_transfers.py."""

import numpy as np
import pytest

from kit.core.device_objects import Device, set_host_device_count
from kit.core.device_transfers import host_source, reset_transfer_stats, scalar, to_host, transfer, transfer_stats


@pytest.fixture
def two_hosts():
    previous = set_host_device_count(2)
    reset_transfer_stats()
    yield Device("cpu:0"), Device("cpu:1")
    reset_transfer_stats()
    set_host_device_count(previous)


def test_each_copy_between_devices_is_counted_per_ordered_pair_with_its_bytes(two_hosts):
    a, b = two_hosts
    src, dst = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((2, 3), np.float32)
    transfer(dst, b, src, a)
    np.testing.assert_array_equal(dst, src)
    transfer(dst, b, src, a)
    back = np.zeros(3, np.float64)
    transfer(back, a, np.ones(3), b)
    assert transfer_stats() == {("cpu:0", "cpu:1"): (2, 48), ("cpu:1", "cpu:0"): (1, 24)}
    transfer(dst, a, src, a)  # within one device: a copy, not a transfer
    assert transfer_stats() == {("cpu:0", "cpu:1"): (2, 48), ("cpu:1", "cpu:0"): (1, 24)}
    reset_transfer_stats()
    assert transfer_stats() == {}


def test_host_arrays_are_copied_on_the_host_and_still_counted(two_hosts):
    a, b = two_hosts
    dst = np.zeros(4, np.float32)
    transfer(dst, b, np.full(4, 2.0, np.float32), a, host_arrays=True)
    assert dst.tolist() == [2.0] * 4 and transfer_stats() == {("cpu:0", "cpu:1"): (1, 16)}


def test_the_stats_are_a_copy_the_caller_cannot_change(two_hosts):
    a, b = two_hosts
    transfer(np.zeros(1), b, np.ones(1), a)
    stats = transfer_stats()
    stats[("cpu:0", "cpu:1")] = (99, 99)
    assert transfer_stats() == {("cpu:0", "cpu:1"): (1, 8)}


def test_host_reads_of_cpu_data_are_the_array_itself_and_host_memory_is_the_cpus_own(two_hosts):
    a, b = two_hosts
    raw = np.arange(3.0)
    assert to_host(raw, b) is raw and transfer_stats() == {}  # no copy, nothing counted
    assert scalar(np.array(2.5), a) == 2.5 and isinstance(scalar(np.array(7), a), int)
    assert host_source(a) is a and host_source(b) is b  # a host-to-host copy is no transfer
