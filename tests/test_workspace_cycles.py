"""kit.workspaces.workspace_cycles: an array used after its cycle raises the error of its kind,
naming the op, the workspace, the cycle or lap it was carved in and the remedy (which runs); a
circular workspace's last lap stays valid until the write pointer reaches it; a scope closed out
of order is closed anyway and says so; another thread may not touch a workspace's arrays."""

import inspect
import threading

import numpy as np
import pytest
from _workspace_ring import _full_ring, ws_named

import kit
from kit.workspaces.workspace import (
    ArrayFromClosedScopeError,
    ArrayFromDestroyedWorkspaceError,
    ArrayFromOldCycleError,
    ArrayOverwrittenError,
    StaleArrayError,
    WorkspaceScopeError,
    WorkspaceThreadError,
)


def test_message_names_op_cycles_and_remedy():
    ws = ws_named("LOOP")
    for _ in range(3):
        with ws:
            kept = kit.ones((2, 2))
    with ws:
        with pytest.raises(ArrayFromOldCycleError) as info:
            kept + 1
    msg = str(info.value)
    assert msg.startswith("add: this array (shape (2, 2), float32) lives in workspace 'LOOP' on cpu:0")
    assert "allocated in cycle 3; cycle 3 ended when the scope closed" in msg
    assert "reopened 1 time(s) since" in msg and "now in cycle 4 (open)" in msg


def test_debug_switch_adds_the_allocation_site():
    kit.workspace.track_allocation_sites(True)
    ws = ws_named("SITES")
    with ws:
        x = kit.zeros((4,)) + 1  # the site is this line
    with pytest.raises(StaleArrayError, match=r"allocated at .*test_workspace_cycles\.py:\d+"):
        x.sum()


def test_reentrant_scope_is_one_cycle_and_out_of_order_close_is_an_error():
    a, b = ws_named("A"), ws_named("B")
    with a:
        with a:
            x = kit.ones(2)
        assert x.is_valid and a.cycles == 0
    assert a.cycles == 1
    b.__enter__()
    with pytest.raises(WorkspaceScopeError, match="reverse order"):
        a.__enter__()
        b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)


def test_circular_buffer_keeps_arrays_until_the_pointer_laps_them():
    ws, batches = _full_ring("RING")
    assert all(b.is_valid for b in batches) and ws.resets == 0  # valid after their scopes closed
    with ws:
        newest = kit.full((256,), 9.0)  # wraps: overwrites batch 0's memory
    assert ws.resets == 1 and newest.is_valid
    with pytest.raises(ArrayOverwrittenError, match="wrapped around"):
        batches[0].sum()
    assert batches[1].sum().item() == 256.0  # not reached yet
    with ws:
        kit.full((256,), 10.0)
    with pytest.raises(ArrayOverwrittenError):
        batches[1].numpy()
    assert batches[3].is_valid


@pytest.mark.parametrize(
    "make_view",
    [lambda a: a.reshape(16, 16), lambda a: a.T, lambda a: a[3:], lambda a: a[None]],
    ids=["reshape", "transpose", "slice", "new_axis"],
)
def test_a_view_of_a_last_lap_array_stops_when_its_base_is_overwritten(make_view):
    """A view taken while a circular workspace's array of the previous lap is still valid carried
    the workspace's current generation, so once the ring overwrote the memory the base raised and
    the view silently read the new data."""
    ws, batches = _full_ring("RING_VIEW")
    with ws:
        kit.full((256,), 9.0)  # lap 2 overwrites batch 0
    view = make_view(batches[1])  # batch 1 is still valid: so is its view, for now
    assert view.is_valid and float(view.sum().item()) == view.size * 1.0  # batch 1 holds ones
    with ws:
        kit.full((256,), 10.0)  # lap 2 overwrites batch 1
    for stale in (batches[1], view):
        assert not stale.is_valid
        with pytest.raises(ArrayOverwrittenError):
            stale.sum()


def test_cross_thread_use_of_a_workspace_array_raises():
    ws = kit.get_workspace_for_current_thread(name="OWNER")
    errors = []
    with ws:
        x = kit.ones((4,))

        def other():
            try:
                x.sum()
            except WorkspaceThreadError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other, name="intruder")
        t.start()
        t.join()
        assert float(x.sum()) == 4.0  # the owner still may
    assert len(errors) == 1 and "'intruder' may not use it" in errors[0] and ".detach()" in errors[0]


# ---- each kind of stale use: its error, its wording, and that its remedy runs ----------------------


def _closed_scope():
    ws = ws_named("KIND_CLOSED")
    with ws:
        x = kit.arange(6, dtype="float32").reshape(2, 3)
    return x


def _old_cycle():
    ws = ws_named("KIND_OLD")
    with ws:
        x = kit.arange(6, dtype="float32").reshape(2, 3)
    ws.__enter__()  # reopened: x is from cycle 1, the workspace is in cycle 2
    return x


def _destroyed():
    ws = ws_named("KIND_GONE")
    with ws:
        x = kit.arange(6, dtype="float32").reshape(2, 3)
    ws.destroy()
    return x


KINDS = {
    "closed scope": (
        _closed_scope,
        ArrayFromClosedScopeError,
        [
            "sum: this array (shape (2, 3), float32) lives in workspace 'KIND_CLOSED'",
            "allocated in cycle 1",
            "cycle 1 ended when the scope closed",
            "the workspace is now closed after cycle 1",
        ],
    ),
    "old cycle": (
        _old_cycle,
        ArrayFromOldCycleError,
        ["workspace 'KIND_OLD'", "allocated in cycle 1", "reopened 1 time(s) since", "now in cycle 2 (open)"],
    ),
    "destroyed": (
        _destroyed,
        ArrayFromDestroyedWorkspaceError,
        ["workspace 'KIND_GONE'", "then the workspace was destroyed", "the workspace is now destroyed"],
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_stale_kind_raises_its_error_naming_the_values_and_the_remedy(kind):
    make, error, parts = KINDS[kind]
    x = make()
    assert not x.is_valid
    with pytest.raises(error) as info:
        x.sum()
    assert isinstance(info.value, StaleArrayError)
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    assert ".detach() inside the scope" in message and ".leverage_to('<outer workspace>')" in message
    assert "kit.workspace.track_allocation_sites(True)" in message  # the hint while sites are not tracked


def test_the_remedies_the_message_names_keep_the_values():
    """.detach() inside the scope (a heap copy) and .leverage_to(outer) both outlive the inner cycle,
    holding what NumPy computes for the same expression."""
    expected = np.arange(6, dtype=np.float32).reshape(2, 3) * 2
    outer, inner = ws_named("REMEDY_OUT"), ws_named("REMEDY_IN")
    with outer:
        with inner:
            y = kit.arange(6, dtype="float32").reshape(2, 3) * 2
            kept, lifted = y.detach(), y.leverage_to("REMEDY_OUT")
        with pytest.raises(StaleArrayError):
            y.sum()
        np.testing.assert_array_equal(lifted.numpy(), expected)  # valid while the outer scope is open
    np.testing.assert_array_equal(kept.numpy(), expected)  # valid for good: on the heap
    assert not kept.is_attached


def test_the_tracking_hint_runs_and_names_the_line_the_array_was_carved_at():
    ws = ws_named("HINT")
    with ws:
        untracked = kit.ones((3,))
    with pytest.raises(StaleArrayError) as before:
        untracked.sum()
    assert "kit.workspace.track_allocation_sites(True) adds where it was allocated" in str(before.value)
    kit.workspace.track_allocation_sites(True)  # the remedy, as the message spells it
    with ws:
        line = inspect.currentframe().f_lineno + 1
        tracked = kit.ones((3,))
    with pytest.raises(StaleArrayError) as after:
        tracked.sum()
    assert f"It was allocated at {__file__}:{line}." in str(after.value)
    assert "track_allocation_sites(True) adds" not in str(after.value)


def test_a_scope_closed_out_of_order_is_closed_all_the_same_and_names_both_workspaces():
    a, b = ws_named("FIRST_OPENED"), ws_named("SECOND_OPENED")
    a.__enter__()
    x = kit.ones((2,))
    b.__enter__()
    with pytest.raises(WorkspaceScopeError) as info:
        a.__exit__(None, None, None)  # a closed while b is current
    message = str(info.value)
    assert "workspace 'FIRST_OPENED' closed while 'SECOND_OPENED' is current" in message
    assert "'FIRST_OPENED' is closed now and its arrays are invalid" in message
    assert a.cycles == 1 and not x.is_valid
    b.__exit__(None, None, None)
    with a:  # both usable again, in the right order
        with b:
            assert float(kit.ones((2,)).sum()) == 2.0
