"""kit.arrays.ndarray_operators: every operator NDArray gets from its table, against NumPy's ufunc,
on heap arrays and inside a workspace (the two paths `binary_method` chooses between), reflected
with a Python number on the left, in place for + - * /, and the comparisons' boolean results."""

import operator

import numpy as np
import pytest

import kit

A = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], np.float32)
B = np.array([2.0, -3.0, 0.25], np.float32)  # broadcasts along A's rows
BINARY = {
    "+": (lambda a, b: a + b, np.add),
    "-": (lambda a, b: a - b, np.subtract),
    "*": (lambda a, b: a * b, np.multiply),
    "/": (lambda a, b: a / b, np.true_divide),
    "//": (lambda a, b: a // b, np.floor_divide),
    "%": (lambda a, b: a % b, np.remainder),
    "**": (lambda a, b: abs(a) ** b, lambda a, b: np.power(np.abs(a), b)),
    "<": (lambda a, b: a < b, np.less),
    "<=": (lambda a, b: a <= b, np.less_equal),
    ">": (lambda a, b: a > b, np.greater),
    ">=": (lambda a, b: a >= b, np.greater_equal),
    "==": (lambda a, b: a == b, np.equal),
    "!=": (lambda a, b: a != b, np.not_equal),
}


@pytest.fixture(params=["heap", "workspace"])
def where(request):
    if request.param == "heap":
        yield None
        return
    ws = kit.get_workspace_for_current_thread(kit.WorkspaceConfig(initial_size=1 << 14), "OPERATORS")
    with ws:
        yield ws
    ws.destroy()


@pytest.mark.parametrize("op", sorted(BINARY))
def test_each_operator_is_numpys_ufunc_with_arrays_and_with_numbers_either_side(op, where):
    f, ufunc = BINARY[op]
    a, b = kit.array(A), kit.array(B)
    for got, want in (
        (f(a, b), ufunc(A, B)),
        (f(a, 2), ufunc(A, np.float32(2))),
        (f(3, a) if op != "**" else 3 ** abs(a), ufunc(np.float32(3), A) if op != "**" else 3 ** np.abs(A)),
    ):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        assert got.workspace is where  # the result is made where the operands live


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_in_place_operators_write_into_the_array_itself(op, where):
    a = kit.array(A)
    data = a.numpy() if where is None else None
    expect = {"+=": A + B, "-=": A - B, "*=": A * B, "/=": A / B}[op]
    result = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv}[op](
        a, kit.array(B)
    )
    assert result is a
    np.testing.assert_allclose(a.numpy(), expect, rtol=1e-6)
    if data is not None:
        np.testing.assert_allclose(data, expect, rtol=1e-6)  # the same memory, not a new array


def test_unary_minus_abs_and_the_logical_operators():
    a = kit.array(A)
    np.testing.assert_array_equal((-a).numpy(), -A)
    np.testing.assert_array_equal(abs(a).numpy(), np.abs(A))
    p, q = a > 0, a < 2
    np.testing.assert_array_equal((p & q).numpy(), (A > 0) & (A < 2))
    np.testing.assert_array_equal((p | q).numpy(), (A > 0) | (A < 2))
    assert (p & q).dtype == np.bool_


def test_shapes_that_do_not_broadcast_are_refused_naming_both():
    with pytest.raises(kit.ShapeError, match=r"\(2, 3\).*\(2,\)|\(2,\).*\(2, 3\)"):
        kit.array(A) + kit.ones((2,))
