"""kit.state: the process-wide state in one object, and the one reset the test suite calls."""

import threading

import numpy as np
import pytest

import kit
from kit import memory
from kit.state import STATE


def _change_everything() -> kit.Workspace:
    """Move every setting, counter and registry kit keeps away from its fresh value."""
    kit.devices.set_host_device_count(3)
    kit.set_default_dtype("float64")
    kit.backend.set_matmul_precision("high")
    kit.set_debug_mode("SPILL_EVERYTHING")
    kit.workspace.track_allocation_sites(True)
    memory.toggle_periodic_gc(True)
    memory.set_auto_gc_window(5)
    memory.set_max_host_cache(1 << 20)
    kit.seed(1234)
    kit.attach_thread_to_device("cpu:1")
    kit.zeros((4,)).to("cpu:2")  # one copy between devices, counted
    ws = kit.get_workspace_for_current_thread(name="STATE_TEST")
    ws.__enter__()  # left open, as a failing test would leave it
    return ws


def test_reset_puts_every_setting_counter_and_registry_back():
    kit.state.reset()
    fresh_rand = kit.rand((3,)).numpy()  # the first draw after a reset
    ws = _change_everything()
    assert STATE.host_devices == 3 and STATE.transfers and memory.heap_allocations() > 0
    kit.state.reset()
    assert kit.devices.host_device_count() == 1
    assert kit.get_default_dtype() == np.float32
    assert kit.backend.get_matmul_precision() == "highest"
    assert kit.workspace.get_debug_mode() is kit.DebugMode.DISABLED and not STATE.track_sites
    assert memory.gc_stats()["enabled"] is False and memory.gc_stats()["window_ms"] == 100
    assert memory.cache_stats()["max_host_cache"] == 0 and not STATE.cache.on
    assert kit.devices.transfer_stats() == {} and memory.heap_allocations() == 0
    assert kit.device_for_current_thread().name == "cpu:0"
    assert kit.context.current_workspace() is None and ws.destroyed
    assert np.array_equal(kit.rand((3,)).numpy(), fresh_rand)  # generators start again from the seed


def test_reset_keeps_the_machine_s_probed_facts():
    usable, why = kit.backend.gpu_status()
    kit.state.reset()
    assert STATE.probes["gpu_status"] == (usable, why)


def test_reset_keeps_devices_interned_and_drops_the_executor_s_networks():
    x = kit.zeros((2,))
    STATE.executor_nets["config"] = object()
    kit.state.reset()
    assert kit.devices.Device("cpu:0") is x.device and STATE.devices["cpu:0"] is x.device
    assert STATE.executor_nets == {}


def test_unique_names_stay_unique_across_threads_and_resets():
    names: list[str] = []

    def take():
        for _ in range(200):
            names.append(STATE.unique_name("t"))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    kit.state.reset()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(set(names)) == 800


def test_no_kit_module_keeps_mutable_state_of_its_own():
    """Dicts, lists, sets, counters and thread-locals at module level or in a class body, outside
    kit.state (memo caches of pure functions excepted, by name): the state lives in one place. An
    UPPER_CASE name is a constant table, unless it starts empty: then something fills it later."""
    import ast
    from pathlib import Path

    allowed = {"_bcast_cache", "_dtype_cache", "reduction_plans", "_CUPY_UFUNCS"}  # memo caches of pure functions
    # the classes a saved configuration may name (Layer, Loss, Updater), filled as subclasses are
    # defined: part of the code, as the classes are, not state a reset could put back
    allowed |= {"registry"}
    mutable_calls = {
        "dict",
        "list",
        "set",
        "count",
        "local",
        "WeakSet",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "defaultdict",
        "deque",
        "Counter",
        "OrderedDict",
    }

    def mutable(value: ast.expr) -> bool:
        if isinstance(value, (ast.Dict, ast.List, ast.Set)):
            return True
        func = value.func if isinstance(value, ast.Call) else None
        return getattr(func, "attr", getattr(func, "id", "")) in mutable_calls

    def empty(value: ast.expr) -> bool:
        if isinstance(value, ast.Dict):
            return not value.keys
        if isinstance(value, (ast.List, ast.Set)):
            return not value.elts
        return isinstance(value, ast.Call) and not value.args and not value.keywords

    found = []
    for path in sorted((Path(kit.__file__).parent).rglob("*.py")):
        if path.name == "state.py":
            continue
        tree = ast.parse(path.read_text())
        bodies = [tree.body] + [node.body for node in tree.body if isinstance(node, ast.ClassDef)]
        for node in (node for body in bodies for node in body):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = getattr(target, "id", "")
            if not mutable(node.value) or name in allowed or name == "__all__" or name.startswith("__"):
                continue
            if not name.isupper() or empty(node.value):
                found.append(f"{path.relative_to(Path(kit.__file__).parent.parent)}: {name}")
    assert found == []


@pytest.mark.parametrize("fixture_left", ["open workspace", "host devices"])
def test_the_suite_s_fixture_resets_between_tests(fixture_left):
    # each test of this pair finds kit as fresh, whatever the other left behind
    assert STATE.host_devices == 1 and kit.context.current_workspace() is None
    if fixture_left == "open workspace":
        kit.get_workspace_for_current_thread(name="LEFT_OPEN").__enter__()
    else:
        kit.devices.set_host_device_count(2)


def test_reset_tells_this_thread_s_device_and_the_blas_limits_too():
    """What kit told libraries below it follows a reset: BLAS-thread shares are given back (the
    limits from before come back), and this thread is detached (CuPy's device and stream too,
    where there is a GPU)."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas_threads()
    share = kit.devices.BlasThreadShare(workers=64)  # one thread each
    assert all(n == 1 for n in blas_threads()) and STATE.blas_holders
    kit.attach_thread_to_device("cpu:0")
    kit.state.reset()
    assert blas_threads() == before and not STATE.blas_holders and STATE.affinity == {}
    share.release()  # late: changes nothing
    assert blas_threads() == before
