"""Every test of kit.parallel runs three times: one CPU device (logical slots), then 2 and 3
simulated host devices (see the `host_devices` fixture in tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True)
def _each_host_device_count(host_devices):
    return host_devices
