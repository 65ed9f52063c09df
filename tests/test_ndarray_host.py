"""kit.arrays.ndarray_host: reads to the host and to Python. numpy() shares heap memory on the CPU
and copies an array in a workspace (whose arena holds other data after its cycle); item, tolist,
float, int, bool and index read one value; repr names where the array lives."""

import numpy as np

import kit


def test_conversions():
    x = kit.array([[1.5, 2.5]])
    assert float(x.sum()) == 4.0 and x.tolist() == [[1.5, 2.5]] and len(x) == 1
    assert x.astype("int32").numpy().tolist() == [[1, 2]]
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert "NDArray(" in repr(x) and "heap" in repr(x)
    same = x.to("cpu:0")
    assert same is x


def test_numpy_shares_a_heap_array_and_copies_one_in_a_workspace():
    heap = kit.zeros((3,))
    heap.numpy()[0] = 7.0
    assert heap.tolist() == [7.0, 0.0, 0.0]  # the same memory
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 12), "HOST_READ")
    try:
        with ws:
            inside = kit.ones((3,))
            read = inside.numpy()
            read[0] = 5.0
            assert inside.tolist() == [1.0, 1.0, 1.0]  # a copy: the arena is not handed out
            assert "HOST_READ" in repr(inside)
    finally:
        ws.destroy()


def _outcome(convert, array):
    try:
        return convert(array)
    except (TypeError, ValueError) as exc:
        return type(exc)


def test_one_value_reads_as_python_numbers_as_numpys_would():
    x = kit.array(3.0)
    assert x.item() == 3.0 and float(x) == 3.0 and int(x) == 3 and bool(x) is True
    assert [10, 20, 30, 40][kit.array(2, dtype="int64")] == 30  # __index__
    assert bool(kit.array([0.0])) is False
    for shape in ((1,), (2,)):  # what NumPy converts (or refuses, and how), kit does too
        for convert in (float, int, bool):
            assert _outcome(convert, kit.ones(shape)) == _outcome(convert, np.ones(shape, np.float32))


def test_repr_says_where_the_array_lives_and_which_cycle_made_it():
    """repr() of any array in a workspace raised AttributeError (Workspace.cycle_of had been removed as unused)."""
    assert repr(kit.array([1.0, 2.0])) == "NDArray(shape=(2,), dtype=float32, device=cpu:0, heap)\n  [1., 2.]"
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 12), "HOST_REPR")
    try:
        with ws:
            first = kit.ones((2,))
        with ws:
            second = kit.ones((2,))
            assert repr(second).startswith(
                "NDArray(shape=(2,), dtype=float32, device=cpu:0, workspace 'HOST_REPR' cycle 2)"
            )
        assert repr(first).endswith("workspace 'HOST_REPR' cycle 1, STALE: its workspace moved on)")
    finally:
        ws.destroy()
