"""kit.arrays.ndarray_copies: dup and astype copy within the device, to and assign between devices,
and ND4J's detach, leverage_to, leverage and migrate between workspaces."""

import numpy as np
import pytest

import kit
from kit.workspaces.workspace_errors import NoSuchWorkspaceError, StaleArrayError


def test_leverage_of_a_detached_array_returns_it_unchanged():
    outer = kit.get_workspace_for_current_thread(name="LEV_OUTER")
    heap = kit.ones((3,))
    with outer:
        assert heap.leverage_to("LEV_OUTER") is heap


def test_dup_and_astype_are_independent_copies_with_numpys_casts():
    x = kit.array([1.75, -2.25, 3.5])
    d = x.dup()
    d[0] = 9.0
    assert x.tolist() == [1.75, -2.25, 3.5] and d.dtype == x.dtype
    np.testing.assert_array_equal(x.astype("int32").numpy(), np.array([1.75, -2.25, 3.5], np.float32).astype("int32"))
    assert x.astype("float64").dtype == np.float64


def test_detach_copies_out_of_a_workspace_and_migrate_copies_into_the_open_one():
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 12), "COPIES")
    heap = kit.array([1.0, 2.0])
    try:
        with ws:
            inside = heap.migrate()
            assert inside.is_attached and inside.workspace is ws and inside.tolist() == [1.0, 2.0]
            kept = inside.detach()
            assert not kept.is_attached and kept.workspace is None
        assert kept.tolist() == [1.0, 2.0]  # valid after the scope closed
        assert heap.migrate() is heap  # no workspace open: the array itself
        assert heap.migrate(detach_on_no_ws=True) is heap  # and a heap array's detach() is itself
        with pytest.raises(StaleArrayError):  # the copy in the workspace ended with its scope
            inside.sum()
    finally:
        ws.destroy()


def test_leverage_to_copies_into_the_named_open_workspace_and_enforce_existence_names_it():
    outer = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 12), "COPIES_OUTER")
    inner = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 12), "COPIES_INNER")
    try:
        with outer:
            with inner:
                a = kit.ones((2,)) * 3
                up = a.leverage_to("COPIES_OUTER")
                parent = a.leverage()
            assert up.workspace is outer and parent.workspace is outer and up.tolist() == [3.0, 3.0]
        with pytest.raises(
            NoSuchWorkspaceError, match=r"leverage_to\('COPIES_NONE'\): workspace 'COPIES_NONE' does not exist"
        ):
            kit.ones((1,)).leverage_to("COPIES_NONE", enforce_existence=True)
    finally:
        inner.destroy()
        outer.destroy()
