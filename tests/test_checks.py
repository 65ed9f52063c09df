"""kit.checks: the one finiteness probe, on every path it takes (the small-batch dot, the reduce,
float16's float32 sum, non-contiguous views, integers) and the words of its error."""

from __future__ import annotations

import numpy as np
import pytest

from kit.arrays.checks import all_finite, check_finite

SIZES = [1, 7, 784, 4096, 4097, 64 * 784]  # both sides of the dot's limit


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_one_bad_value_anywhere_is_found(dtype, size, bad):
    x = np.ones(size, dtype)
    for where in {0, size // 2, size - 1}:
        y = x.copy()
        y[where] = bad
        assert not all_finite(y)
        assert not all_finite(y.reshape(1, -1))
        with pytest.raises(ValueError, match=rf"first at index \[{where}\]"):
            check_finite(y, "features")
    assert all_finite(x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", SIZES)
def test_huge_finite_values_are_finite(dtype, size):
    """Squares and sums of huge finite values overflow to infinity: the exact test settles it."""
    x = np.full(size, np.finfo(dtype).max, dtype)
    with np.errstate(over="ignore"):
        assert all_finite(x)
        assert all_finite(-x)
        check_finite(x, "features")


def test_views_and_other_dtypes():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    x[1, 3] = np.nan
    assert all_finite(x[:, ::2])  # column 3 is not in this view
    assert not all_finite(x[:, 1::2])  # it is in this one
    assert not all_finite(x.T)
    assert all_finite(np.arange(10))
    assert all_finite(np.array([True, False]))
    assert not all_finite(np.array([1 + 1j, complex(np.inf, 0)]))
    assert all_finite(np.zeros((0, 3), np.float32))


def test_the_message_counts_rows():
    x = np.zeros((5, 3), np.float32)
    x[1, 2] = x[3, 0] = np.inf
    with pytest.raises(
        ValueError, match=r"Evaluation: predictions contain NaN or infinity \(2 values in 2 rows; first at row 1\)"
    ):
        check_finite(x, "predictions", where="Evaluation", per_row=True)
