"""kit.workspaces.workspace_registry: the per-thread table of workspaces. A name is found on its
thread only, forgetting keeps a newer workspace of that name, destroying all refuses open ones
(and its remedy, leaving the scope, lets it run), leverage's target is an open workspace or an
error that says why, the parent is the workspace open outside, and all_workspaces sees every thread.
Workspaces on several devices: test_workspace_devices.py."""

import threading

import pytest

import kit
from kit.workspaces.workspace import WorkspaceConfig
from kit.workspaces.workspace_errors import NoSuchWorkspaceError, WorkspaceScopeError
from kit.workspaces.workspace_registry import (
    all_workspaces,
    destroy_all_workspaces_for_current_thread,
    get_manager,
    leverage_target,
    parent_of_current_workspace,
)

CFG = WorkspaceConfig(initial_size=1024)


@pytest.fixture(autouse=True)
def no_workspaces_left():
    yield
    destroy_all_workspaces_for_current_thread()


def test_the_table_finds_a_workspace_by_name_and_forgets_it_when_destroyed():
    ws = kit.get_workspace_for_current_thread(CFG, "REG_A")
    mgr = get_manager()
    assert mgr is get_manager() and mgr.named("REG_A") == [ws] and mgr.get("REG_A", ws.device) is ws
    assert mgr.named("REG_B") == [] and mgr.get("REG_B", ws.device) is None
    ws.destroy()
    assert mgr.named("REG_A") == [] and ws not in all_workspaces()


def test_forgetting_an_old_workspace_keeps_the_newer_one_of_its_name():
    old = kit.get_workspace_for_current_thread(CFG, "REG_A")
    old.destroy()
    new = kit.get_workspace_for_current_thread(CFG, "REG_A")
    get_manager().forget(old)  # a second destroy() of the old one must not drop the new one
    assert get_manager().named("REG_A") == [new]


def test_another_thread_has_a_table_of_its_own_and_all_workspaces_sees_both():
    mine = kit.get_workspace_for_current_thread(CFG, "REG_T")
    seen = {}

    def other():
        seen["named"] = get_manager().named("REG_T")
        theirs = kit.get_workspace_for_current_thread(CFG, "REG_T")
        seen["theirs"], seen["all"] = theirs, [ws for ws in all_workspaces() if ws.name == "REG_T"]
        seen["destroyed"] = destroy_all_workspaces_for_current_thread()

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()
    assert seen["named"] == [] and seen["theirs"] is not mine
    assert set(map(id, seen["all"])) == {id(mine), id(seen["theirs"])}
    assert seen["destroyed"] == 1 and not mine.destroyed  # the other thread destroyed only its own
    assert [ws for ws in all_workspaces() if ws.name == "REG_T"] == [mine]


def test_destroying_all_refuses_open_workspaces_and_runs_once_their_scopes_are_left():
    a = kit.get_workspace_for_current_thread(CFG, "REG_A")
    b = kit.get_workspace_for_current_thread(CFG, "REG_B")
    with a:
        with pytest.raises(WorkspaceScopeError) as error:
            destroy_all_workspaces_for_current_thread()
    assert str(error.value) == (
        f"cannot destroy workspaces that are open: ['REG_A ({a.device.name})']; leave their scopes first"
    )
    assert not a.destroyed and not b.destroyed  # nothing destroyed by the refused call
    assert destroy_all_workspaces_for_current_thread() == 2  # the scope left: the remedy
    assert a.destroyed and b.destroyed and get_manager().workspaces == {}


def test_leverage_targets_only_an_open_workspace_of_this_thread():
    ws = kit.get_workspace_for_current_thread(CFG, "REG_OUT")
    assert leverage_target("REG_OUT") is None  # closed: the array stays where it is (ND4J)
    assert leverage_target("NOWHERE") is None
    with pytest.raises(NoSuchWorkspaceError, match=r"leverage_to\('REG_OUT'\): workspace 'REG_OUT' is not open on "):
        leverage_target("REG_OUT", enforce_existence=True)
    with pytest.raises(NoSuchWorkspaceError, match=r"workspace 'NOWHERE' does not exist on .* on this thread"):
        leverage_target("NOWHERE", enforce_existence=True)
    with ws:
        assert leverage_target("REG_OUT") is ws and leverage_target("REG_OUT", enforce_existence=True) is ws


def test_the_parent_is_the_workspace_open_outside_the_current_one():
    outer = kit.get_workspace_for_current_thread(CFG, "REG_OUTER")
    inner = kit.get_workspace_for_current_thread(CFG, "REG_INNER")
    assert parent_of_current_workspace() is None
    with outer:
        assert parent_of_current_workspace() is None  # outer has nothing outside it
        with inner:
            assert parent_of_current_workspace() is outer
        assert parent_of_current_workspace() is None


def test_resetting_kits_state_closes_and_destroys_this_threads_workspaces():
    ws = kit.get_workspace_for_current_thread(CFG, "REG_RESET")
    ws.__enter__()  # left open, as an interrupted cell leaves it
    from kit.state import STATE

    STATE.reset()
    assert ws.destroyed and get_manager().named("REG_RESET") == []


def test_two_devices_of_one_name_have_their_own_workspaces():
    """The table keyed a workspace by its device's name: two sets of logical devices both have a
    "cpu:0/logical0of2", and the second slot got the first's workspace (on a GPU, another stream's)."""
    (a, _), (b, _) = kit.logical_devices(2), kit.logical_devices(2)
    assert a is not b and a.name == b.name
    wa = kit.get_workspace_for_current_thread(name="SLOT", device=a)
    wb = kit.get_workspace_for_current_thread(name="SLOT", device=b)
    try:
        assert wa is not wb and wa.device is a and wb.device is b
        assert kit.get_workspace_for_current_thread(name="SLOT", device=a) is wa  # the same device: the same one
    finally:
        wa.destroy()
        wb.destroy()
