"""kit.arrays.ndarray_views: reshape, transpose, squeeze, expand_dims and indexing against NumPy; a
view shares its base's memory and writes through, a gather or a copying reshape does not, and a
bad shape or index is refused naming the shapes."""

import numpy as np
import pytest

import kit


def test_indexing_views_and_assignment():
    x = kit.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    row = x[1]
    row[:] = 0  # a view writes through
    assert x.numpy()[1].tolist() == [0, 0, 0, 0]
    x[0, 1:3] = kit.array([9.0, 8.0])
    assert x.numpy()[0].tolist() == [0, 9, 8, 3]
    picked = x[kit.array([2, 0], dtype="int64")]
    assert picked.shape == (2, 4) and picked.numpy()[0].tolist() == [8, 9, 10, 11]
    masked = x[x > 8]
    assert sorted(masked.numpy().tolist()) == [9, 9, 10, 11]
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for axis 0 with size 3"):
        x[kit.array([3], dtype="int64")]


def test_a_view_shares_memory_and_a_gather_or_non_contiguous_reshape_copies():
    raw = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = kit.array(raw)
    base = x.numpy()
    for view in (x.reshape(6, 4), x.transpose(2, 0, 1), x[1], x[:, 1:, ::2], x[0:1].squeeze(0), x.expand_dims(1)):
        assert np.shares_memory(view.numpy(), base)
    for copy in (x.T.reshape(-1), x[kit.array([1, 0], dtype="int64")], x[x > 5]):
        assert not np.shares_memory(copy.numpy(), base)
    np.testing.assert_array_equal(x.T.reshape(-1).numpy(), raw.T.reshape(-1))
    np.testing.assert_array_equal(x.ravel().numpy(), raw.ravel())
    np.testing.assert_array_equal(x.transpose([1, 2, 0]).numpy(), raw.transpose(1, 2, 0))
    np.testing.assert_array_equal(x[:, [2, 0]].numpy(), raw[:, [2, 0]])  # a list index gathers as NumPy's
    assert [row.tolist() for row in kit.array(raw[0])] == raw[0].tolist()  # iteration yields the rows


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            lambda x: x.reshape(5, 5),
            r"reshape: cannot reshape an array of shape \(2, 3, 4\) \(24 elements\) into \(5, 5\)",
        ),
        (lambda x: x.transpose(0, 0, 1), r"transpose: axes \(0, 0, 1\) are not a permutation of the 3 axes"),
        (lambda x: x.squeeze(1), r"squeeze: axis 1 of shape \(2, 3, 4\) does not have length 1"),
        (lambda x: x[x[:, :, 0] > 0][:, 0].reshape(7), r"reshape: cannot reshape"),
        (
            lambda x: x[kit.ones((3,), dtype="bool")],
            r"getitem: boolean mask of shape \(3,\) does not match array shape",
        ),
        (lambda x: x.__setitem__(0, kit.ones((2, 2))), r"setitem: .* \(target shape \(2, 3, 4\)\)"),
    ],
    ids=["reshape", "transpose", "squeeze", "reshape of a gather", "mask", "setitem"],
)
def test_a_bad_shape_or_index_is_refused_naming_the_shapes(op, message):
    x = kit.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    with pytest.raises(kit.ShapeError, match=message):
        op(x)
