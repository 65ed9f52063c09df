"""kit.arrays.ops: concatenate, stack, where, maximum and minimum give NumPy's answers on kit arrays,
inside a workspace as on the heap, and refuse mismatched shapes, devices and conditions in words."""

import numpy as np
import pytest

import kit
from kit.core.devices import set_host_device_count
from kit.core.shapes import ShapeError

RNG = np.random.default_rng(0)
A, B = RNG.random((2, 3)).astype(np.float32), RNG.random((2, 3)).astype(np.float32)

# name -> (kit's call, NumPy's answer), over the same two arrays
CASES = {
    "concatenate axis 0": (lambda a, b: kit.concatenate([a, b]), np.concatenate([A, B])),
    "concatenate axis -1": (lambda a, b: kit.concatenate([a, b, a], axis=-1), np.concatenate([A, B, A], axis=-1)),
    "concatenate with NumPy": (lambda a, b: kit.concatenate([a, B]), np.concatenate([A, B])),
    "stack axis 0": (lambda a, b: kit.stack([a, b]), np.stack([A, B])),
    "stack axis 2": (lambda a, b: kit.stack([a, b], axis=2), np.stack([A, B], axis=2)),
    "where arrays": (lambda a, b: kit.where(a > b, a, b), np.where(A > B, A, B)),
    "where scalars": (lambda a, b: kit.where(a > 0.5, 1.0, 0.0), np.where(A > 0.5, 1.0, 0.0)),
    "where broadcast": (lambda a, b: kit.where(a > 0.5, a, b[0]), np.where(A > 0.5, A, B[0])),
    "maximum": (lambda a, b: kit.maximum(a, b), np.maximum(A, B)),
    "minimum": (lambda a, b: kit.minimum(a, b), np.minimum(A, B)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_function_gives_numpys_answer_on_the_heap_and_in_a_workspace(name):
    call, expected = CASES[name]
    got = call(kit.asarray(A), kit.asarray(B))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got.numpy(), expected)
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(), "OPS_WS")
    try:
        with ws:
            inside = call(kit.asarray(A), kit.asarray(B))
            assert inside.workspace is ws
            np.testing.assert_array_equal(inside.numpy(), expected)
    finally:
        ws.destroy()


@pytest.mark.parametrize(
    ("call", "error", "said"),
    [
        (lambda: kit.concatenate([]), ValueError, "concatenate: needs at least one array"),
        (lambda: kit.stack([]), ValueError, "stack: needs at least one array"),
        (lambda: kit.concatenate([kit.ones((2, 3)), kit.ones((3, 2))]), ShapeError, r"differ off axis 0"),
        (lambda: kit.concatenate([kit.ones((2,)), kit.ones((2, 2))]), ShapeError, "the same number"),
        (lambda: kit.stack([kit.ones((2,)), kit.ones((3,))]), ShapeError, r"the same shape, got \[\(2,\), \(3,\)\]"),
        (lambda: kit.where(A > 0.5, 1.0, 0.0), TypeError, "the condition must be an NDArray, got ndarray"),
        (lambda: kit.where(kit.ones((2, 3)) > 0, kit.ones((4,)), 0.0), ShapeError, "where"),
    ],
    ids=["concatenate-none", "stack-none", "concatenate-off-axis", "concatenate-ndim", "stack-shapes",
         "where-numpy-condition", "where-broadcast"],
)  # fmt: skip
def test_what_cannot_be_combined_is_refused_naming_the_shapes(call, error, said):
    with pytest.raises(error, match=said):
        call()


@pytest.mark.parametrize("name", ["concatenate", "stack", "where"])
def test_arrays_on_two_devices_are_refused_naming_both(name):
    previous = set_host_device_count(2)
    try:
        a, b = kit.ones((2,), device="cpu:0"), kit.ones((2,), device="cpu:1")
        call = {"concatenate": lambda: kit.concatenate([a, b]), "stack": lambda: kit.stack([a, b]),
                "where": lambda: kit.where(a > 0, a, b)}[name]  # fmt: skip
        with pytest.raises(Exception, match=r"cpu:0.*cpu:1|cpu:1.*cpu:0") as info:
            call()
        assert name in str(info.value)
    finally:
        set_host_device_count(previous)
