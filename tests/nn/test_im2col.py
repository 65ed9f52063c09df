"""kit.nn.im2col's kernels on plain NumPy arrays, against loops written from their docstrings:
the window count and its error, the padded frame, the (C, k, k, B, OH, OW) columns in both batch
layouts, col2im as the adjoint of im2col, and the pooling passes with the first maximum's offset.
The layers that call them: test_pooling.py and test_conv.py."""

import numpy as np
import pytest

from kit.nn.im2col import (
    col2im_add,
    global_avg_pool_backward_into,
    global_avg_pool_into,
    im2col_into,
    out_size,
    pad_into,
    pool_max_into,
    pool_sum_into,
    tiles_exactly,
    window_view,
)

RNG = np.random.default_rng(11)


def _columns(xpad, k, s, oh, ow):
    """cols[c, i, j, b, y, x] = xpad[b, c, y*s + i, x*s + j], by loops."""
    b, c = xpad.shape[:2]
    cols = np.empty((c, k, k, b, oh, ow))
    for ch, i, j, n, y, x in np.ndindex(c, k, k, b, oh, ow):
        cols[ch, i, j, n, y, x] = xpad[n, ch, y * s + i, x * s + j]
    return cols


@pytest.mark.parametrize(
    ("n", "k", "s", "p", "out"),
    [(28, 5, 1, 0, 24), (8, 3, 1, 1, 8), (9, 3, 2, 1, 5), (7, 2, 2, 0, 3), (5, 5, 1, 0, 1), (4, 3, 3, 1, 2)],
)
def test_the_output_size_counts_the_windows_that_fit(n, k, s, p, out):
    assert out_size(n, k, s, p, "Layer") == out
    assert len(range(0, n + 2 * p - k + 1, s)) == out  # the windows' first pixels


def test_a_window_that_does_not_fit_is_refused_naming_the_layer_and_the_sizes():
    with pytest.raises(
        ValueError, match="Conv2D: kernel 5 with stride 2 and padding 1 does not fit an input of size 2"
    ):
        out_size(2, 5, 2, 1, "Conv2D")


def test_pad_into_frames_the_input_and_overwrites_every_pixel_of_out():
    x = RNG.standard_normal((2, 3, 4, 5))
    out = np.full((2, 3, 8, 9), np.nan)  # stale contents: all must be replaced
    assert pad_into(x, 2, -np.inf, out) is out
    np.testing.assert_array_equal(out, np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)), constant_values=-np.inf))


@pytest.mark.parametrize(("k", "s", "h", "w"), [(3, 1, 5, 6), (3, 2, 7, 7), (2, 2, 4, 6), (1, 2, 5, 5)])
def test_im2col_copies_every_window_in_the_documented_layout(k, s, h, w):
    x = RNG.standard_normal((2, 3, h, w))
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    want = _columns(x, k, s, oh, ow)
    np.testing.assert_array_equal(window_view(np, x, k, s, oh, ow), want)
    assert np.shares_memory(window_view(np, x, k, s, oh, ow), x)  # a view, no copy
    out = np.empty((3, k, k, 2, oh, ow))
    matrix = im2col_into(np, x, k, s, oh, ow, out)
    assert matrix.shape == (3 * k * k, 2 * oh * ow) and np.shares_memory(matrix, out)
    np.testing.assert_array_equal(matrix, want.reshape(3 * k * k, 2 * oh * ow))
    # the same columns from a channels-first (C, B, H, W) array with batch_axis=1
    out_cb = np.empty_like(out)
    im2col_into(np, np.ascontiguousarray(x.transpose(1, 0, 2, 3)), k, s, oh, ow, out_cb, batch_axis=1)
    np.testing.assert_array_equal(out_cb, want)


@pytest.mark.parametrize(("k", "s", "h"), [(3, 1, 5), (3, 2, 7), (2, 3, 8)])
def test_col2im_adds_each_window_back_the_adjoint_of_im2col(k, s, h):
    """<im2col(x), d> == <x, col2im(d)> for every x and d: col2im adds each column value back to
    the pixel it was copied from (overlaps summed, pixels no window reaches left at 0)."""
    x = RNG.standard_normal((2, 3, h, h))
    oh = (h - k) // s + 1
    d = RNG.standard_normal((3, k, k, 2, oh, oh))
    target = np.zeros((3, 2, h, h))  # (C, B, H, W)
    assert col2im_add(d, s, target) is target
    want = np.zeros_like(target)
    for ch, i, j, n, y, x_ in np.ndindex(*d.shape):
        want[ch, n, y * s + i, x_ * s + j] += d[ch, i, j, n, y, x_]
    np.testing.assert_allclose(target, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.vdot(_columns(x, k, s, oh, oh), d), np.vdot(x.transpose(1, 0, 2, 3), target))


@pytest.mark.parametrize(
    ("h", "w", "k", "s", "p", "tiles"),
    [
        (4, 6, 2, 2, 0, True),
        (5, 4, 2, 2, 0, False),
        (4, 4, 2, 1, 0, False),
        (4, 4, 2, 2, 1, False),
        (6, 6, 3, 3, 0, True),
    ],
)
def test_windows_tile_the_input_only_when_each_pixel_is_in_exactly_one(h, w, k, s, p, tiles):
    assert tiles_exactly(h, w, k, s, p) is tiles
    hits = np.zeros((h + 2 * p, w + 2 * p), int)
    for y in range(0, h + 2 * p - k + 1, s):
        for x in range(0, w + 2 * p - k + 1, s):
            hits[y : y + k, x : x + k] += 1
    assert bool(p == 0 and (hits == 1).all()) is tiles


@pytest.mark.parametrize(("k", "s"), [(2, 2), (3, 1), (3, 2)])
def test_pool_max_finds_each_maximum_and_the_offset_of_its_first_occurrence(k, s):
    x = RNG.integers(0, 3, (2, 2, 7, 7)).astype(float)  # few values: many ties
    oh = (7 - k) // s + 1
    y, idx, scratch = np.empty((2, 2, oh, oh)), np.empty((2, 2, oh, oh), np.uint8), np.empty((2, 2, oh, oh), np.uint8)
    pool_max_into(np, x, k, s, y, idx, scratch)
    flat = _columns(x, k, s, oh, oh).reshape(2, k * k, 2, oh, oh)  # (C, k*k, B, OH, OW)
    np.testing.assert_array_equal(y, flat.max(axis=1).transpose(1, 0, 2, 3))
    np.testing.assert_array_equal(idx, flat.argmax(axis=1).transpose(1, 0, 2, 3))  # argmax: the first
    sums = np.empty_like(y)
    pool_sum_into(np, x, k, s, sums)
    np.testing.assert_allclose(sums, flat.sum(axis=1).transpose(1, 0, 2, 3))


def test_global_average_pooling_kernels_are_the_channel_mean_and_its_even_spread():
    x, e = RNG.standard_normal((3, 4, 2, 5)), RNG.standard_normal((3, 4))
    y, dx = np.empty((3, 4)), np.full((3, 4, 2, 5), np.nan)
    global_avg_pool_into(np, x, y)
    global_avg_pool_backward_into(np, e, dx)
    np.testing.assert_allclose(y, x.mean(axis=(2, 3)))
    np.testing.assert_allclose(dx, np.repeat(np.repeat(e[:, :, None, None] / 10, 2, axis=2), 5, axis=3))
