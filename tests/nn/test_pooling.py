"""kit.nn.pooling's layers against a loop over windows written from their definitions: the
maximum (its gradient to the window's first maximum), the average with padding counted as
zeros, the global average; their output shapes and the errors that name a bad setting. The
kernels against the ones they replaced: test_conv_kernels.py; finite differences: test_gradients.py."""

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.nn import AvgPool2D, GlobalAvgPool, MaxPool2D, pooling


def _windows(x, k, s, p, fill):
    """Yield (i, j, top, left, window) over x (B, C, H, W) padded by p with `fill`."""
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (x.shape[2] + 2 * p - k) // s + 1, (x.shape[3] + 2 * p - k) // s + 1
    for i in range(oh):
        for j in range(ow):
            yield i, j, i * s, j * s, xp[:, :, i * s : i * s + k, j * s : j * s + k]


def _reference(kind, x, eps, k, s, p):
    """(y, dx) by the definition, one window at a time."""
    b, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    y, dxp = np.zeros((b, c, oh, ow)), np.zeros((b, c, h + 2 * p, w + 2 * p))
    for i, j, top, left, win in _windows(x, k, s, p, -np.inf if kind == "max" else 0.0):
        if kind == "max":
            flat = win.reshape(b, c, k * k)
            y[:, :, i, j] = flat.max(axis=2)
            first = flat.argmax(axis=2)  # the first maximum in row-major order
            for n in range(b):
                for ch in range(c):
                    r, q = divmod(first[n, ch], k)
                    dxp[n, ch, top + r, left + q] += eps[n, ch, i, j]
        else:
            y[:, :, i, j] = win.sum(axis=(2, 3)) / (k * k)
            dxp[:, :, top : top + k, left : left + k] += eps[:, :, i, j, None, None] / (k * k)
    return y, dxp[:, :, p : p + h, p : p + w]


CASES = [(2, 2, 0, (2, 4, 4)), (3, 2, 1, (1, 5, 5)), (2, 3, 0, (2, 8, 7)), (3, 1, 1, (2, 4, 5)), (2, 2, 0, (1, 5, 4))]


@pytest.mark.parametrize(("k", "s", "p", "shape"), CASES, ids=[f"k{k}s{s}p{p}-{h}x{w}" for k, s, p, (_, h, w) in CASES])
@pytest.mark.parametrize(("cls", "kind"), [(MaxPool2D, "max"), (AvgPool2D, "avg")], ids=["max", "avg"])
def test_a_window_pooling_computes_its_definition_forward_and_backward(cls, kind, k, s, p, shape):
    rng = np.random.default_rng(k * 10 + s)
    layer = cls(k, stride=s, padding=p)
    bind_random(layer, shape)
    out_shape = layer.output_shape
    x = rng.standard_normal((3, *shape))
    eps = rng.standard_normal((3, *out_shape))
    y, dx, grads = forward_backward(layer, x, eps)
    want_y, want_dx = _reference(kind, x, eps, k, s, p)
    assert y.shape == want_y.shape and grads == {}
    np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)


def test_max_pooling_by_hand_with_a_tie_sends_the_gradient_to_the_first_maximum():
    x = np.array([[[[1.0, 5.0, 2.0, 2.0], [3.0, 5.0, 0.0, 1.0], [-1.0, -2.0, 7.0, 7.0], [-3.0, -4.0, 7.0, 6.0]]]])
    layer = MaxPool2D(2)
    bind_random(layer, (1, 4, 4))
    y, dx, _ = forward_backward(layer, x, np.array([[[[10.0, 20.0], [30.0, 40.0]]]]))
    np.testing.assert_array_equal(y, [[[[5.0, 2.0], [-1.0, 7.0]]]])
    want = np.zeros((1, 1, 4, 4))
    want[0, 0, 0, 1], want[0, 0, 0, 2], want[0, 0, 2, 0], want[0, 0, 2, 2] = 10.0, 20.0, 30.0, 40.0
    np.testing.assert_array_equal(dx, want)


def test_average_pooling_counts_the_padding_as_zeros():
    layer = AvgPool2D(3, stride=1, padding=1)
    bind_random(layer, (1, 2, 2))
    y, _, _ = forward_backward(layer, np.ones((1, 1, 2, 2)))
    np.testing.assert_allclose(y, np.full((1, 1, 2, 2), 4 / 9))  # each window: 4 ones among 9


def test_global_average_pooling_is_the_mean_of_each_channel_and_spreads_its_gradient_evenly():
    rng = np.random.default_rng(1)
    layer = GlobalAvgPool()
    assert bind_random(layer, (3, 2, 5)) == {} and layer.output_shape == (3,)
    x, eps = rng.standard_normal((4, 3, 2, 5)), rng.standard_normal((4, 3))
    y, dx, _ = forward_backward(layer, x, eps)
    np.testing.assert_allclose(y, x.mean(axis=(2, 3)), rtol=1e-12)
    np.testing.assert_allclose(dx, np.broadcast_to(eps[:, :, None, None] / 10, x.shape), rtol=1e-12)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: MaxPool2D(3, padding=2),
            r"MaxPool2D\(padding=2\): must be a whole number from 0 to 1 \(up to kernel // 2\)",
        ),
        (lambda: AvgPool2D(2, stride=0), r"AvgPool2D\(stride=0\): must be a whole number >= 1"),
        (lambda: MaxPool2D(0), r"MaxPool2D\(kernel=0\): must be a whole number >= 1"),
        (
            lambda: MaxPool2D(3).build((1, 2, 2)),
            "MaxPool2D: kernel 3 with stride 3 and padding 0 does not fit an input of size 2",
        ),
        (lambda: AvgPool2D(2).build((4,)), r"AvgPool2D needs \(batch, C, H, W\) inputs, got per-example \(4,\)"),
        (lambda: GlobalAvgPool().build((4,)), r"GlobalAvgPool needs \(batch, C, H, W\) inputs, got per-example \(4,\)"),
    ],
    ids=["padding", "stride", "kernel", "too small", "not an image", "global not an image"],
)
def test_a_bad_pooling_setting_or_input_is_refused_naming_it(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("layer", "shape", "out"),
    [
        (MaxPool2D(2), (3, 8, 6), (3, 4, 3)),
        (MaxPool2D(3, 2, 1), (2, 7, 7), (2, 4, 4)),
        (AvgPool2D(2, 1), (1, 3, 4), (1, 2, 3)),
    ],
    ids=["halves", "overlapping padded", "stride 1"],
)
def test_the_output_shape_is_the_number_of_windows_that_fit(layer, shape, out):
    assert layer.build(shape) == out
    assert layer.config() == {
        "type": type(layer).__name__,
        "kernel": layer.kernel,
        "stride": layer.stride,
        "padding": layer.padding,
    }


def test_the_pooling_layers_are_the_ones_of_kit_nn_pooling():
    assert (MaxPool2D, AvgPool2D, GlobalAvgPool) == (pooling.MaxPool2D, pooling.AvgPool2D, pooling.GlobalAvgPool)
