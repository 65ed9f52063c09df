"""A workspace belongs to one device, and every lookup keys on it.

The defect: `get_workspace_for_current_thread(cfg, "STEP", device="cpu:1")` returned the thread's
cpu:0 workspace "STEP", and every cpu:1 array made inside it went to the heap, silently. Then the
class: every way a workspace is found (get, the config check, destroy, destroy_all, leverage_to,
leverage, migrate, all_workspaces, the training engine's and the async iterator's workspaces) on
two simulated host devices, and the remedy each error prints, run."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kit
from kit.arrays.ndarray import DeviceMismatchError
from kit.core.devices import as_device, set_host_device_count
from kit.core.memory import heap_allocations
from kit.workspaces.workspace import NoSuchWorkspaceError, WorkspaceConfig, WorkspaceConfigError, get_manager


@pytest.fixture(autouse=True)
def two_host_devices():
    previous = set_host_device_count(2)
    yield
    kit.destroy_all_workspaces_for_current_thread()
    set_host_device_count(previous)


def test_the_same_name_on_another_device_is_another_workspace():
    cfg = WorkspaceConfig(initial_size=1 << 16)
    ws0 = kit.get_workspace_for_current_thread(cfg, "STEP")
    ws1 = kit.get_workspace_for_current_thread(cfg, "STEP", device="cpu:1")
    assert ws1 is not ws0
    assert ws0.device is as_device("cpu:0") and ws1.device is as_device("cpu:1")
    assert kit.get_workspace_for_current_thread(cfg, "STEP", device="cpu:1") is ws1
    assert kit.get_workspace_for_current_thread(cfg, "STEP", device="cpu:0") is ws0
    assert kit.get_workspace_for_current_thread(name="STEP") is ws0  # no device: the default one


def test_cpu1_arrays_made_inside_the_cpu1_workspace_live_in_it():
    cfg = WorkspaceConfig(initial_size=1 << 16)
    kit.get_workspace_for_current_thread(cfg, "STEP")  # the thread's cpu:0 "STEP" exists first
    ws1 = kit.get_workspace_for_current_thread(cfg, "STEP", device="cpu:1")
    before = heap_allocations("cpu:1")
    with ws1:
        a = kit.zeros((8, 8), device="cpu:1")
        b = (a + 1) * 2
        assert a.workspace is ws1 and b.workspace is ws1
    assert heap_allocations("cpu:1") == before  # it used to be 3 heap allocations on cpu:1
    assert ws1.stats()["allocations"] == 3


def test_a_config_differs_per_device_only():
    kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1024), "CFG")
    other = WorkspaceConfig(initial_size=2048)
    ws1 = kit.get_workspace_for_current_thread(other, "CFG", device="cpu:1")  # no clash: another device
    assert ws1.config == other
    with pytest.raises(WorkspaceConfigError, match=r"'CFG' already exists on this thread on cpu:1"):
        kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=4096), "CFG", device="cpu:1")


def test_destroying_one_device_s_workspace_leaves_the_other():
    ws0 = kit.get_workspace_for_current_thread(name="D")
    ws1 = kit.get_workspace_for_current_thread(name="D", device="cpu:1")
    ws0.destroy()
    assert kit.get_workspace_for_current_thread(name="D", device="cpu:1") is ws1
    fresh = kit.get_workspace_for_current_thread(name="D")
    assert fresh is not ws0 and not fresh.destroyed
    assert {ws.device.name for ws in kit.workspace.all_workspaces() if ws.name == "D"} == {"cpu:0", "cpu:1"}
    assert kit.destroy_all_workspaces_for_current_thread() == 2
    assert ws1.destroyed and not get_manager().named("D")


def test_destroy_all_names_open_workspaces_with_their_device():
    ws1 = kit.get_workspace_for_current_thread(name="OPEN", device="cpu:1")
    with ws1, pytest.raises(kit.workspace.WorkspaceScopeError, match=r"OPEN \(cpu:1\)"):
        kit.destroy_all_workspaces_for_current_thread()


def test_leverage_to_finds_the_workspace_of_the_array_s_device():
    outer0 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "OUTER")
    outer1 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "OUTER", device="cpu:1")
    inner1 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "INNER", device="cpu:1")
    with outer0, outer1, inner1:
        a = kit.ones((4,), device="cpu:1")
        assert a.workspace is inner1
        kept = a.leverage_to("OUTER")
        assert kept.workspace is outer1 and kept.device is as_device("cpu:1")  # not cpu:0's OUTER
        np.testing.assert_array_equal(kept.numpy(), np.ones(4))
        up = a.leverage()  # the parent of INNER is OUTER on cpu:1
        assert up.workspace is outer1


def test_leverage_to_a_name_open_only_on_another_device_says_so_and_its_remedy_runs():
    outer0 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "ONLY0")
    inner1 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "IN1", device="cpu:1")
    with outer0, inner1:
        a = kit.ones((4,), device="cpu:1")
        assert a.leverage_to("ONLY0") is a  # ND4J: no such workspace here, the array stays
        with pytest.raises(NoSuchWorkspaceError, match=r"does not exist on cpu:1 .*it exists on cpu:0") as e:
            a.leverage_to("ONLY0", enforce_existence=True)
        assert "'ONLY0'" in str(e.value)
        remedy = re.search(r"\.to\('([^']+)'\)", str(e.value)).group(1)
        copy = a.to(remedy)  # current: IN1 on cpu:1, so the copy is on cpu:0's heap
        assert copy.device is as_device("cpu:0") and copy.workspace is None
    with outer0:
        moved = copy.to("cpu:1").to(remedy)  # ONLY0 current: the copy is in it
        assert moved.workspace is outer0 and moved.device is as_device("cpu:0")
        np.testing.assert_array_equal(moved.numpy(), np.ones(4))


def test_migrate_into_another_device_s_workspace_is_refused_and_the_remedy_runs():
    ws0 = kit.get_workspace_for_current_thread(WorkspaceConfig(initial_size=1 << 16), "MIG")
    a = kit.ones((4,), device="cpu:1")
    with ws0:
        with pytest.raises(DeviceMismatchError, match=r"'MIG' is on cpu:0 and this array is on cpu:1") as e:
            a.migrate()
        remedy = re.search(r"\.to\('([^']+)'\)", str(e.value)).group(1)
        moved = a.to(remedy)
        assert moved.workspace is ws0 and moved.device is as_device("cpu:0")
        assert moved.migrate() is moved
        np.testing.assert_array_equal(moved.numpy(), np.ones(4))


def test_the_training_engine_keeps_one_set_of_workspaces_per_device():
    """Two networks on two devices, trained on one thread: each device's arrays in its own arenas."""
    from kit.data import ArrayIterator, DataSet, load_digits
    from kit.nn import Sgd, mlp

    train, _ = load_digits()
    x, y = train.features.numpy()[:128], train.labels.numpy()[:128]
    nets = {d: mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=1, device=d) for d in ("cpu:0", "cpu:1")}
    for d, net in nets.items():
        net.fit(ArrayIterator(DataSet(x, y, device=d), 32), epochs=1)
    by_device: dict[str, set[str]] = {}
    for ws in get_manager().workspaces.values():
        by_device.setdefault(ws.device.name, set()).add(ws.name.split("/", 1)[-1])  # net<k>/... per network
    assert by_device.get("cpu:0") and by_device.get("cpu:1")
    assert by_device["cpu:0"] == by_device["cpu:1"]  # the same names, one arena each
    for ws in get_manager().workspaces.values():
        assert ws.stats()["cycles"] > 0, ws
    np.testing.assert_array_equal(nets["cpu:0"].params().numpy(), nets["cpu:1"].params().numpy())
