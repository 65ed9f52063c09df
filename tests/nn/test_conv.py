"""kit.nn.conv's layers through their API: Conv2D, BatchNorm and Residual's configurations (and the
errors that name a bad value), output shapes, parameters, what each computes in terms a reader can
check (a 1x1 convolution is a Dense per pixel; BatchNorm's statistics), and Residual's shortcut
remedy. The kernels themselves: tests/nn/test_conv_kernels.py; their gradients: test_gradients.py."""

import math

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.nn import MSE, AvgPool2D, BatchNorm, Conv2D, GlobalAvgPool, MaxPool2D, Network, Residual, pooling
from kit.nn.conv import PER_EXAMPLE_MAX_WEIGHTS
from kit.nn.layers import layer_from_config

RNG = np.random.default_rng(7)


# ---- Conv2D -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"out_channels": 0, "kernel": 3}, r"Conv2D\(out_channels=0\): must be an integer >= 1"),
        ({"out_channels": 4, "kernel": 0}, r"Conv2D\(kernel=0\): must be an integer >= 1"),
        ({"out_channels": 4, "kernel": 2.0}, r"Conv2D\(kernel=2\.0\): must be an integer >= 1"),
        ({"out_channels": 4, "kernel": 3, "stride": 0}, r"Conv2D\(stride=0\): must be an integer >= 1"),
        ({"out_channels": 4, "kernel": 3, "padding": -1}, r"Conv2D\(padding=-1\): must be an integer >= 0"),
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


def test_the_pooling_layers_are_the_ones_of_kit_nn_pooling():
    assert (MaxPool2D, AvgPool2D, GlobalAvgPool) == (pooling.MaxPool2D, pooling.AvgPool2D, pooling.GlobalAvgPool)


# ---- BatchNorm -------------------------------------------------------------------------------


@pytest.mark.parametrize(("decay", "eps"), [(1.0, 1e-5), (-0.1, 1e-5), (0.9, 0.0)])
def test_batchnorm_refuses_a_bad_setting_naming_it(decay, eps):
    with pytest.raises(ValueError, match=rf"BatchNorm\(decay={decay!r}, eps={eps!r}\): decay in \[0, 1\), eps > 0"):
        BatchNorm(decay, eps)


def test_batchnorm_takes_features_or_images_and_its_running_statistics_are_not_trained():
    with pytest.raises(ValueError, match=r"BatchNorm needs \(batch, F\) or \(batch, C, H, W\) inputs, got .* \(3, 4\)"):
        BatchNorm().build((3, 4))
    layer = BatchNorm()
    assert layer.build((5, 2, 2)) == (5, 2, 2)
    specs = {s.name: (s.shape, s.init, s.trainable) for s in layer.param_specs()}
    assert specs == {
        "gamma": ((5,), "ones", True),
        "beta": ((5,), "zeros", True),
        "mean": ((5,), "zeros", False),
        "var": ((5,), "ones", False),
    }


@pytest.mark.parametrize("shape", [(6,), (3, 4, 5)])
def test_batchnorm_in_training_normalises_with_the_batch_and_moves_the_running_statistics(shape):
    layer = BatchNorm(decay=0.75, eps=1e-5)
    p = bind_random(layer, shape)
    running_mean, running_var = p["mean"].copy(), p["var"].copy()
    x = RNG.standard_normal((8, *shape)) * 3 + 2
    axes = (0,) if len(shape) == 1 else (0, 2, 3)
    view = (1, shape[0]) + (1,) * (len(shape) - 1)
    y, _, _ = forward_backward(layer, x, training=True)
    mean, var = x.mean(axis=axes), x.var(axis=axes)  # the biased batch variance
    want = (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + 1e-5) * p["gamma"].reshape(view)
    np.testing.assert_allclose(y, want + p["beta"].reshape(view), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p["mean"], 0.75 * running_mean + 0.25 * mean, rtol=1e-12)
    np.testing.assert_allclose(p["var"], 0.75 * running_var + 0.25 * var, rtol=1e-12)


def test_batchnorm_in_inference_uses_the_running_statistics_and_changes_nothing():
    layer = BatchNorm()
    p = bind_random(layer, (4,))
    p["var"][...] = np.abs(p["var"]) + 0.5
    before = {k: v.copy() for k, v in p.items()}
    x = RNG.standard_normal((3, 4))
    y, _, _ = forward_backward(layer, x, training=False)
    want = (x - p["mean"]) / np.sqrt(p["var"] + 1e-5) * p["gamma"] + p["beta"]
    np.testing.assert_allclose(y, want, rtol=1e-12)
    for k in p:
        np.testing.assert_array_equal(p[k], before[k])


def test_batchnorm_statistics_of_float16_images_do_not_overflow():
    """The per-channel sum of squares of these images is about 2.6e6, past float16's 65,504."""
    layer = BatchNorm()
    bind_random(layer, (2, 4, 4))
    x = (RNG.standard_normal((10, 2, 4, 4)) * 100 + 200).astype(np.float16)
    y, _, _ = forward_backward(layer, x, training=True)
    assert y.dtype == np.float16 and np.all(np.isfinite(y))
    # normalised: each channel of xhat has mean 0 and variance 1, so y's spread is |gamma|'s
    xhat = (x.astype(np.float64) - x.astype(np.float64).mean(axis=(0, 2, 3), keepdims=True)) / x.astype(np.float64).std(
        axis=(0, 2, 3), keepdims=True
    )
    gamma, beta = layer.params["gamma"].numpy(), layer.params["beta"].numpy()
    np.testing.assert_allclose(y, xhat * gamma.reshape(1, 2, 1, 1) + beta.reshape(1, 2, 1, 1), atol=0.02)


# ---- Residual ----------------------------------------------------------------------------------


def test_residual_shapes_parameters_and_sublayers():
    same, down = Residual(4), Residual(8, use_1x1conv=True, stride=2)
    assert same.build((4, 6, 6)) == (4, 6, 6) and down.build((4, 6, 6)) == (8, 3, 3)
    assert len(same.sublayers()) == 5 and len(down.sublayers()) == 6  # two convs, two BNs, a ReLU (+ 1x1)
    conv_bn = 2 * (4 * 4 * 9 + 4) + 2 * 4 * 4  # two 3x3 convs; two BNs of 4 parameters per channel
    assert Network([same], (4, 6, 6), loss=MSE()).num_params == conv_bn
    down_params = (8 * 4 * 9 + 8) + (8 * 8 * 9 + 8) + 2 * 4 * 8 + (8 * 4 + 8)
    assert Network([down], (4, 6, 6), loss=MSE()).num_params == down_params


@pytest.mark.parametrize(("channels", "stride"), [(8, 1), (4, 2)])
def test_residual_without_a_shortcut_convolution_says_to_use_one_and_that_remedy_works(channels, stride):
    with pytest.raises(ValueError, match=r"the main path gives .* but the shortcut gives \(4, 6, 6\); use use_1x1conv"):
        Residual(channels, stride=stride).build((4, 6, 6))
    fixed = Residual(channels, use_1x1conv=True, stride=stride)  # the remedy, as the message says
    assert fixed.build((4, 6, 6)) == (channels, 6 // stride, 6 // stride)


def test_residual_adds_the_shortcut_and_ends_with_a_relu():
    block = Residual(2)
    net = Network([block], (2, 4, 4), loss=MSE(), dtype="float64", seed=3)
    x = RNG.standard_normal((3, 2, 4, 4))
    net.set_params(np.zeros(net.num_params))  # every weight 0: the main path gives BN's beta = 0
    np.testing.assert_array_equal(net.output(x).numpy(), np.maximum(x, 0))  # relu(0 + x)


def test_a_residual_config_leaves_out_the_default_weight_init_so_old_files_still_load():
    assert "weight_init" not in Residual(4).config()
    assert Residual(4, weight_init="xavier").config()["weight_init"] == "xavier"
    old = {"type": "Residual", "channels": 4, "use_1x1conv": False, "stride": 1}  # written before weight_init
    assert layer_from_config(old).weight_init == "he"
    assert math.prod(layer_from_config(old).build((4, 3, 3))) == 36
