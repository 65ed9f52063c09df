"""LayerWorkspaceMgr: which workspace each ArrayType lives in for each WorkspaceMode, the scopes it
opens (an iteration, a layer call, the updater), SEPARATE's per-layer reset of working memory, and the
debug bypass."""

import threading

import numpy as np
import pytest

import kit
from kit.core.devices import as_device
from kit.nn import mlp
from kit.nn.workspace_mgr import (
    WS_ACTIVATION_GRAD,
    WS_ALL_LAYERS_ACT,
    WS_LAYER_WORKING_MEM,
    WS_SINGLE,
    WS_UPDATER_WORKING_MEM,
    ArrayType,
    LayerWorkspaceMgr,
    WorkspaceMode,
)
from kit.workspaces.workspace import ArrayFromClosedScopeError, WorkspaceScopeError

DEV = as_device(None)
F32 = np.dtype(np.float32)

# where SEPARATE puts each type: activations live the whole iteration, each activation gradient
# in a slot until it is read, working memory one layer call, the updater's its own step
SEPARATE_HOME = {
    ArrayType.INPUT: WS_ALL_LAYERS_ACT,
    ArrayType.ACTIVATIONS: WS_ALL_LAYERS_ACT,
    ArrayType.ACTIVATION_GRAD: WS_ACTIVATION_GRAD + "_0",
    ArrayType.FF_WORKING_MEM: WS_LAYER_WORKING_MEM,
    ArrayType.BP_WORKING_MEM: WS_LAYER_WORKING_MEM,
    ArrayType.UPDATER_WORKING_MEM: WS_UPDATER_WORKING_MEM,
}


def made_in(mgr, array_type):
    """The name of the workspace an array of `array_type` is made in (None: the heap), inside the
    scope that type is used in."""
    scope = {
        ArrayType.FF_WORKING_MEM: mgr.layer_call,
        ArrayType.BP_WORKING_MEM: mgr.layer_call,
        ArrayType.UPDATER_WORKING_MEM: mgr.updater,
    }.get(array_type)
    with mgr.iteration():
        if scope is None:
            a = mgr.create(array_type, (4,), F32, DEV)
        else:
            with scope():
                a = mgr.create(array_type, (4,), F32, DEV)
        return a.workspace.name if a.is_attached else None


@pytest.mark.parametrize("array_type", list(ArrayType))
def test_each_array_type_lives_where_its_mode_says(array_type):
    assert made_in(LayerWorkspaceMgr(WorkspaceMode.NONE, device=DEV), array_type) is None
    assert made_in(LayerWorkspaceMgr(WorkspaceMode.SINGLE, "A_", DEV), array_type) == "A_" + WS_SINGLE
    assert made_in(LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "A_", DEV), array_type) == "A_" + SEPARATE_HOME[array_type]


def test_a_mode_may_be_named_by_its_string_and_a_wrong_name_is_refused():
    assert LayerWorkspaceMgr("SEPARATE", device=DEV).mode is WorkspaceMode.SEPARATE
    assert LayerWorkspaceMgr("SEPARATE", device=DEV).separate and not LayerWorkspaceMgr("SINGLE", device=DEV).separate
    with pytest.raises(ValueError, match="'BOTH' is not a valid WorkspaceMode"):
        LayerWorkspaceMgr("BOTH", device=DEV)


def test_an_array_asked_for_outside_its_scope_names_the_workspace_and_the_type():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "OUT_", DEV)
    with pytest.raises(WorkspaceScopeError, match=r"workspace 'OUT_WS_ALL_LAYERS_ACT' for array type ACTIVATIONS"):
        mgr.create(ArrayType.ACTIVATIONS, (2,), F32, DEV)
    with mgr.iteration():  # the iteration is open, the layer call is not
        with pytest.raises(WorkspaceScopeError, match=r"'OUT_WS_LAYER_WORKING_MEM' for array type BP_WORKING_MEM"):
            mgr.create(ArrayType.BP_WORKING_MEM, (2,), F32, DEV)


def test_separate_resets_working_memory_after_each_layer_call_but_keeps_activations():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "RESET_", DEV)
    with mgr.iteration():
        act = mgr.create(ArrayType.ACTIVATIONS, (3,), F32, DEV)
        act.data[...] = 2.0
        with mgr.layer_call():
            scratch = mgr.zeros(ArrayType.FF_WORKING_MEM, (3,), F32, DEV)
            assert scratch.numpy().tolist() == [0.0, 0.0, 0.0]
        with pytest.raises(ArrayFromClosedScopeError, match="'RESET_WS_LAYER_WORKING_MEM'"):
            scratch.sum()
        assert float(act.sum()) == 6.0  # the activation outlives the layer call


def run_iterations(mgr, call_sizes, iterations=6):
    """Each iteration: one layer call per size, each asking for that many float32 of working memory."""
    for _ in range(iterations):
        with mgr.iteration():
            mgr.create(ArrayType.ACTIVATIONS, (8,), F32, DEV)
            for n in call_sizes:
                with mgr.layer_call():
                    mgr.create(ArrayType.FF_WORKING_MEM, (n,), F32, DEV)


def test_separate_working_memory_peaks_at_the_largest_layer_call_single_at_the_sum():
    sizes = (1024, 256, 512)  # 4096, 1024 and 2048 bytes: whole multiples of any alignment
    separate = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "PEAK_SEP_", DEV, layer_calls=len(sizes))
    single = LayerWorkspaceMgr(WorkspaceMode.SINGLE, "PEAK_ONE_", DEV, layer_calls=len(sizes))
    run_iterations(separate, sizes)
    run_iterations(single, sizes)
    assert separate.stats()[WS_LAYER_WORKING_MEM]["peak_used"] == 4 * max(sizes)
    assert single.stats()[WS_SINGLE]["peak_used"] >= 4 * sum(sizes)
    assert separate.peak_bytes() == sum(s["peak_used"] for s in separate.stats().values())


def test_each_thread_gets_its_own_workspaces_and_each_prefix_its_own():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SINGLE, "THREAD_", DEV)
    other = LayerWorkspaceMgr(WorkspaceMode.SINGLE, "OTHER_", DEV)
    found = {}

    def use(key):
        with mgr.iteration():
            found[key] = mgr.create(ArrayType.ACTIVATIONS, (2,), F32, DEV).workspace

    use("main")
    t = threading.Thread(target=use, args=("worker",))
    t.start()
    t.join()
    assert found["main"] is not found["worker"] and found["main"].name == found["worker"].name == "THREAD_WS_SINGLE"
    assert other.workspace(WS_SINGLE) is not mgr.workspace(WS_SINGLE)


def test_destroy_frees_the_workspaces_and_the_next_iteration_makes_them_again():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "DESTROY_", DEV)
    run_iterations(mgr, (64,), iterations=2)
    old = mgr.workspace(WS_ALL_LAYERS_ACT)
    mgr.destroy()
    assert old.destroyed and mgr.stats() == {}
    run_iterations(mgr, (64,), iterations=1)
    assert not mgr.workspace(WS_ALL_LAYERS_ACT).destroyed and mgr.workspace(WS_ALL_LAYERS_ACT) is not old


def test_a_workspace_destroyed_behind_the_managers_back_is_made_again_at_the_next_iteration():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "BEHIND_", DEV)
    run_iterations(mgr, (64,), iterations=1)
    kit.destroy_all_workspaces_for_current_thread()
    with mgr.iteration():  # resolved again: no array from a destroyed workspace
        with mgr.layer_call():
            a = mgr.zeros(ArrayType.FF_WORKING_MEM, (2,), F32, DEV)
            assert not a.workspace.destroyed and float(a.sum()) == 0.0


def test_bypass_everything_then_output_works():
    net = mlp(6, hidden=(4,), n_out=3)
    kit.set_debug_mode("BYPASS_EVERYTHING")
    out = net.output(np.zeros((2, 6)))
    assert out.shape == (2, 3)


def test_bypass_everything_puts_every_array_type_on_the_heap():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "BYPASS_", DEV)
    kit.set_debug_mode("BYPASS_EVERYTHING")
    assert all(made_in(mgr, t) is None for t in ArrayType)
