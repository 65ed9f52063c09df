"""kit.context: the one thread-local slot that says where new arrays go. Workspaces write it as
their scopes open and close (nested, and per thread), set_current_workspace swaps it, and
scope_out_of_workspaces sends a block's arrays to the heap and puts the slot back however the
block ends. (scope_out_of_workspaces in generators: tests/test_scope_out.py.)"""

import threading

import pytest

import kit
from kit import context
from kit.core.context import current_workspace, scope_out_of_workspaces, set_current_workspace


def named(name):
    return kit.get_workspace_for_current_thread(name=name)


def test_the_slot_follows_nested_workspace_scopes_and_is_empty_outside_them():
    outer, inner = named("CTX_OUTER"), named("CTX_INNER")
    assert current_workspace() is None
    with outer:
        assert current_workspace() is outer and kit.zeros((2,)).workspace is outer
        with inner:
            assert current_workspace() is inner and kit.zeros((2,)).workspace is inner
        assert current_workspace() is outer
    assert current_workspace() is None and not kit.zeros((2,)).is_attached


def test_each_thread_has_its_own_slot():
    seen = {}

    def other():
        seen["before"] = current_workspace()
        with named("CTX_THREAD"):
            seen["inside"] = current_workspace().name
        seen["after"] = current_workspace()

    with named("CTX_MAIN") as mine:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert current_workspace() is mine  # the other thread's scope did not touch this one
    assert seen == {"before": None, "inside": "CTX_THREAD", "after": None}


def test_set_current_workspace_swaps_the_slot_and_returns_what_was_there():
    ws = named("CTX_SET")
    with ws:
        assert set_current_workspace(None) is ws
        assert current_workspace() is None and not kit.zeros((2,)).is_attached  # the heap, though ws is open
        assert set_current_workspace(ws) is None
        assert kit.zeros((2,)).workspace is ws
    assert current_workspace() is None


def test_scope_out_sends_the_block_to_the_heap_and_gives_the_workspace_back():
    ws = named("CTX_OUT")
    with ws:
        with scope_out_of_workspaces():
            assert current_workspace() is None
            kept = kit.ones((3,))
        assert current_workspace() is ws and kit.zeros((1,)).workspace is ws
    assert not kept.is_attached and float(kept.sum()) == 3.0  # usable after ws's cycle ended


def test_scope_out_gives_the_workspace_back_when_the_block_raises():
    ws = named("CTX_RAISE")
    with ws:
        with pytest.raises(RuntimeError, match="in the block"):
            with scope_out_of_workspaces():
                raise RuntimeError("in the block")
        assert current_workspace() is ws


def test_scope_out_with_no_workspace_open_leaves_the_slot_alone():
    with scope_out_of_workspaces():
        assert context._tls.ws is None and current_workspace() is None
    assert context._tls.ws is None


def test_a_scope_out_block_nested_in_another_and_a_workspace_opened_inside_one():
    outer, inner = named("CTX_N_OUTER"), named("CTX_N_INNER")
    with outer:
        with scope_out_of_workspaces():
            with scope_out_of_workspaces():
                assert current_workspace() is None
            assert current_workspace() is None
            with inner:  # a workspace opened inside the block is where arrays go while it is open
                assert kit.zeros((1,)).workspace is inner
            assert current_workspace() is None
        assert current_workspace() is outer


def test_a_suspended_generator_s_block_is_seen_through_and_a_running_one_is_not():
    ws = named("CTX_GEN")
    inside = []

    def rows():
        with scope_out_of_workspaces():
            inside.append((current_workspace(), context.suspended_between(context._tls.ws, ws)))
            yield

    with ws:
        gen = rows()
        next(gen)  # suspended inside its block: the slot holds the block, above ws
        assert context._tls.ws is not ws
        assert current_workspace() is ws and context.resolve(context._tls.ws) is ws
        assert context.suspended_between(context._tls.ws, ws)
        next(gen, None)
    assert inside == [(None, False)]  # while the generator ran, its block was in force
    assert current_workspace() is None
