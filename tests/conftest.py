"""Shared test set-up: quick mode for notebooks, and GPU tests skipped where CuPy sees no GPU."""

import os

os.environ.setdefault("KIT_QUICK", "1")

import pytest

from kit import backend
from kit.devices import set_host_device_count


def pytest_collection_modifyitems(config, items):
    ok, why = backend.gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_kit_state():
    """Each test starts with no open workspaces, no host cache and default debug modes."""
    import kit

    yield
    kit.memory.set_max_host_cache(0)
    kit.workspace.set_debug_mode("DISABLED")
    kit.workspace.track_allocation_sites(False)
    kit.memory.toggle_periodic_gc(False)
    kit.context.set_current_workspace(None)
    for ws in list(kit.workspace.get_manager().workspaces.values()):
        ws._open = False
    kit.destroy_all_workspaces_for_current_thread()


@pytest.fixture(params=[1, 2, 3], ids=["1-host-device", "2-host-devices", "3-host-devices"])
def host_devices(request):
    """Run a multi-device test on the CPU as one device (logical slots), then as 2 and 3
    simulated host devices: separate placement domains, like separate GPUs (JAX's trick)."""
    previous = set_host_device_count(request.param)
    yield request.param
    set_host_device_count(previous)
