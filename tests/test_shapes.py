"""kit.core.shapes: the shape and dtype rules of kit's ops, each against NumPy's own answer over a
table, and every refusal naming the shapes (or values) it refuses."""

import numpy as np
import pytest

from kit.core.shapes import (
    ShapeError,
    accumulator,
    as_shape,
    broadcast_shape,
    check_take_bounds,
    is_basic_index,
    matmul_shape,
    norm_axis,
    reduced_shape,
    resolve_reshape,
    result_dtype,
)

SHAPES = [(), (1,), (3,), (2, 3), (2, 1), (1, 3), (4, 2, 3), (4, 1, 1)]


@pytest.mark.parametrize(("given", "shape"), [(3, (3,)), ((2, 3), (2, 3)), ([0, 4], (0, 4)), ((), ()),
                                             (np.int64(5), (5,)), ((np.int32(2), 3), (2, 3))])  # fmt: skip
def test_as_shape_takes_whole_numbers(given, shape):
    assert as_shape(given, "zeros") == shape


@pytest.mark.parametrize(
    ("given", "said"),
    [(2.5, "got 2.5"), (2.0, "got 2.0"), ("3", "got '3'"), (True, "got True"), (None, "got None"),
     ((2, 2.0), "the dimension 2.0 is a float"), ((2, True), "the dimension True is a bool"),
     ((2, -1), r"negative dimensions are not allowed, got shape \(2, -1\)")],
)  # fmt: skip
def test_as_shape_refuses_what_is_not_a_shape_naming_it(given, said):
    with pytest.raises(ShapeError, match=said) as info:
        as_shape(given, "zeros")
    assert str(info.value).startswith("zeros: ")


@pytest.mark.parametrize("s1", SHAPES)
@pytest.mark.parametrize("s2", SHAPES)
def test_broadcast_shape_is_numpys_or_a_refusal_naming_both(s1, s2):
    try:
        expected = np.broadcast_shapes(s1, s2)
    except ValueError:
        with pytest.raises(ShapeError, match=rf"add: shapes {s1} and {s2} cannot be broadcast".replace("(", r"\(")
                           .replace(")", r"\)")):  # fmt: skip
            broadcast_shape(s1, s2, "add")
        return
    assert broadcast_shape(s1, s2, "add") == expected


@pytest.mark.parametrize("ufunc", [np.add, np.true_divide, np.less, np.maximum, np.exp])
@pytest.mark.parametrize("d1", ["float16", "float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("d2", ["float32", "int64", bool])
def test_result_dtype_is_the_dtype_numpy_computes_in(ufunc, d1, d2):
    a = np.ones(2, d1)
    try:
        expected = (ufunc(a) if ufunc.nin == 1 else ufunc(a, np.ones(2, np.dtype(d2)))).dtype
    except TypeError:
        with pytest.raises(TypeError, match=f"{ufunc.__name__}: no loop for dtypes"):
            result_dtype(ufunc, np.dtype(d1), np.dtype(d2) if d2 is not bool else bool)
        return
    assert result_dtype(ufunc, np.dtype(d1), np.dtype(d2) if d2 is not bool else bool) == expected


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -3, (0, 2), (2, -3)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_norm_axis_and_reduced_shape_give_numpys_reduction_shape(axis, keepdims):
    shape = (4, 2, 3)
    axes = norm_axis(axis, 3, "sum", shape)
    assert axes is None or all(0 <= ax < 3 for ax in axes)
    assert reduced_shape(shape, axes, keepdims) == np.zeros(shape).sum(axis=axis, keepdims=keepdims).shape


@pytest.mark.parametrize(
    ("axis", "said"),
    [(3, "axis 3 is out of bounds for an array of shape"), (-4, "axis -4"), ((0, -3), "repeated axis"),
     (1.0, "axis 1.0 must be an int"), ("0", "axis '0' must be an int"),
     ((0, 1.5), r"an axis is a whole number, got 1.5 \(float\)"), (True, r"got True \(bool\)"),
     ((0, True), r"got True \(bool\)"), (np.True_, "axis np.True_ must be an int")],
)  # fmt: skip
def test_norm_axis_refuses_axes_the_array_does_not_have(axis, said):
    with pytest.raises(ShapeError, match=said):
        norm_axis(axis, 3, "sum", (4, 2, 3))


@pytest.mark.parametrize(
    ("s1", "s2"), [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                   ((5, 2, 3), (1, 3, 4)), ((1, 2, 3), (6, 3, 4))],
)  # fmt: skip
def test_matmul_shape_is_numpys(s1, s2):
    assert matmul_shape(s1, s2) == np.matmul(np.zeros(s1), np.zeros(s2)).shape


@pytest.mark.parametrize(("s1", "s2", "said"), [((), (3,), "scalars are not allowed"),
                                                ((2, 3), (4, 5), r"the last axis of the first \(3\) must equal"),
                                                ((2, 2, 3), (3, 3, 4), "cannot be broadcast")])  # fmt: skip
def test_matmul_shape_refuses_shapes_that_do_not_align_naming_them(s1, s2, said):
    with pytest.raises(ShapeError, match=said):
        matmul_shape(s1, s2)


@pytest.mark.parametrize("new", [(6,), (2, 3), (3, -1), (-1,), (1, 2, 1, 3)])
def test_resolve_reshape_is_numpys(new):
    assert resolve_reshape((2, 3), 6, new) == np.zeros((2, 3)).reshape(new).shape


@pytest.mark.parametrize(("new", "said"), [((-1, -1), "at most one -1"), ((4, -1), "6 is not a multiple of 4"),
                                           ((4,), "4 elements != 6"), ((-2, 3), "no other negative")])  # fmt: skip
def test_resolve_reshape_refuses_sizes_that_do_not_fit(new, said):
    with pytest.raises(ValueError, match=said):
        resolve_reshape((2, 3), 6, new)


def test_accumulator_adds_float16_in_float32_and_the_rest_in_their_own():
    assert accumulator(np.dtype("float16")) == np.float32
    for name in ("float32", "float64", "int64"):
        assert accumulator(np.dtype(name)) == np.dtype(name)


@pytest.mark.parametrize(("key", "basic"), [(0, True), (slice(1, 2), True), ((0, slice(None)), True), (None, True),
                                            (Ellipsis, True), ((None, 1, Ellipsis), True), (np.int64(1), True),
                                            ([0, 1], False), (np.array([0]), False), ((0, [1]), False)])  # fmt: skip
def test_is_basic_index_tells_views_from_copies(key, basic):
    assert is_basic_index(key) is basic


def test_check_take_bounds_refuses_an_index_past_either_end_naming_it():
    check_take_bounds(np.array([0, 2, -3]), (3, 2), np)  # in bounds: nothing said
    for idx, bad in (([0, 3], 3), ([-4, 1], -4)):
        with pytest.raises(IndexError, match=rf"index {bad} is out of bounds for axis 0 with size 3"):
            check_take_bounds(np.array(idx), (3, 2), np)
    with pytest.raises(IndexError, match="a 0-d array cannot be indexed"):
        check_take_bounds(np.array([0]), (), np)
