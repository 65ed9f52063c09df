"""kit.nn.residual: the block's shapes, parameters and sublayers, the shortcut remedy its error
prints (executed), what it computes, and a configuration that stays readable."""

import math

import numpy as np
import pytest

from kit.nn import MSE, Network, Residual
from kit.nn.layers import layer_from_config

RNG = np.random.default_rng(7)


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
