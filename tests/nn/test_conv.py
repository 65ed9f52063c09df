"""kit.nn.conv's layers through their API: Conv2D's configuration (and the errors that name a bad
value), output shapes, parameters, what it computes in terms a reader can check (a 1x1 convolution
is a Dense per pixel). BatchNorm: tests/nn/test_batchnorm.py; Residual: test_residual.py; the
kernels themselves: test_conv_kernels.py; their gradients: test_gradients.py."""

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.nn import MSE, AvgPool2D, BatchNorm, Conv2D, GlobalAvgPool, MaxPool2D, Network, Residual
from kit.nn.conv import PER_EXAMPLE_MAX_WEIGHTS
from kit.nn.layers import layer_from_config

RNG = np.random.default_rng(7)


# ---- Conv2D -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"out_channels": 0, "kernel": 3}, r"Conv2D\(out_channels=0\): must be a whole number >= 1"),
        ({"out_channels": 4, "kernel": 0}, r"Conv2D\(kernel=0\): must be a whole number >= 1"),
        ({"out_channels": 4, "kernel": 2.0}, r"Conv2D\(kernel=2\.0\): must be a whole number >= 1"),
        ({"out_channels": 4, "kernel": 3, "stride": 0}, r"Conv2D\(stride=0\): must be a whole number >= 1"),
        ({"out_channels": 4, "kernel": 3, "padding": -1}, r"Conv2D\(padding=-1\): must be a whole number >= 0"),
    ],
)
def test_conv2d_refuses_a_bad_setting_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Conv2D(**kwargs)


@pytest.mark.parametrize(
    ("layer", "input_shape", "output_shape"),
    [
        (Conv2D(4, 3), (2, 8, 8), (4, 6, 6)),
        (Conv2D(4, 3, padding=1), (2, 8, 8), (4, 8, 8)),  # 'same'
        (Conv2D(5, 3, stride=2, padding=1), (3, 9, 7), (5, 5, 4)),
        (Conv2D(1, 1, stride=2), (3, 4, 4), (1, 2, 2)),
        (Conv2D(2, 5), (1, 5, 5), (2, 1, 1)),  # the kernel covers the whole image
    ],
)
def test_conv2d_output_shape_and_parameters(layer, input_shape, output_shape):
    assert layer.build(input_shape) == output_shape
    c, k, oc = input_shape[0], layer.kernel, layer.out_channels
    w, b = layer.param_specs()
    assert (w.name, w.shape, w.fan_in, w.init, w.regularize) == ("W", (oc, c, k, k), c * k * k, "he", True)
    assert (b.name, b.shape, b.init) == ("b", (oc,), "zeros")
    assert Network([layer], input_shape, loss=MSE()).num_params == oc * c * k * k + oc
    assert layer.describe().endswith(f"{oc * c * k * k + oc:,} params")


def test_conv2d_refuses_inputs_that_are_not_images_or_too_small():
    with pytest.raises(ValueError, match=r"Conv2D needs \(batch, channels, height, width\) inputs, got .* \(8,\)"):
        Conv2D(2, 3).build((8,))
    with pytest.raises(
        ValueError, match="Conv2D: kernel 5 with stride 1 and padding 0 does not fit an input of size 3"
    ):
        Conv2D(2, 5).build((1, 3, 3))


def test_a_conv_input_of_another_shape_is_refused_naming_both():
    layer = Conv2D(2, 3)
    bind_random(layer, (1, 5, 5))
    with pytest.raises(ValueError, match=r"Conv2D: expected input of shape \(batch, 1, 5, 5\), got \(2, 1, 6, 6\)"):
        forward_backward(layer, np.zeros((2, 1, 6, 6)))


def test_a_1x1_convolution_is_a_dense_layer_applied_at_every_pixel():
    layer = Conv2D(4, 1)
    p = bind_random(layer, (3, 5, 6))
    x = RNG.standard_normal((2, 3, 5, 6))
    y, _, _ = forward_backward(layer, x, training=False)
    w = p["W"].reshape(4, 3)  # (OC, C)
    want = np.einsum("oc,bchw->bohw", w, x) + p["b"].reshape(1, 4, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_a_kernel_that_covers_the_image_is_a_dense_layer_on_the_flattened_image():
    layer = Conv2D(3, 4)
    p = bind_random(layer, (2, 4, 4))
    x = RNG.standard_normal((5, 2, 4, 4))
    eps = RNG.standard_normal((5, 3, 1, 1))
    y, dx, g = forward_backward(layer, x, eps)
    flat_w = p["W"].reshape(3, -1)  # (OC, C*k*k), in the flattened image's order
    np.testing.assert_allclose(y.reshape(5, 3), x.reshape(5, -1) @ flat_w.T + p["b"], rtol=1e-12)
    np.testing.assert_allclose(g["W"].reshape(3, -1), eps.reshape(5, 3).T @ x.reshape(5, -1), rtol=1e-12)
    np.testing.assert_allclose(dx.reshape(5, -1), eps.reshape(5, 3) @ flat_w, rtol=1e-12)


def test_small_filter_banks_multiply_per_example_and_large_ones_for_the_batch():
    small, large = Conv2D(6, 5), Conv2D(64, 3)
    small.build((1, 28, 28))  # LeNet's first layer: 150 weights
    large.build((64, 8, 8))  # ResNet's: 36,864 weights
    assert small.per_example and not large.per_example
    assert 6 * 1 * 5 * 5 <= PER_EXAMPLE_MAX_WEIGHTS < 64 * 64 * 3 * 3


@pytest.mark.parametrize(
    "layer",
    [
        Conv2D(3, 5, stride=2, padding=1, weight_init="xavier"),
        BatchNorm(decay=0.8, eps=1e-3),
        Residual(8, use_1x1conv=True, stride=2),
        MaxPool2D(3, stride=2, padding=1),
        AvgPool2D(2),
        GlobalAvgPool(),
    ],
)
def test_a_configuration_rebuilds_the_same_layer(layer):
    again = layer_from_config(layer.config())
    assert type(again) is type(layer) and again.config() == layer.config()
