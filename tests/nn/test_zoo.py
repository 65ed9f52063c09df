"""kit.nn.zoo: the models the chapters build, each the architecture its docstring names, with the
parameter counts worked out here by hand from the layer shapes."""

import numpy as np
import pytest

from kit.nn import (
    BatchNorm,
    Conv2D,
    Dense,
    Dropout,
    GlobalAvgPool,
    MaxPool2D,
    ReLU,
    Residual,
    Sigmoid,
    Tanh,
    lenet,
    mlp,
    resnet18,
)


def _kinds(net):
    return [type(layer).__name__ for layer in net.body.layers]


def _dense(n_in, n_out):
    return n_in * n_out + n_out


def _conv(c_in, c_out, k):
    return c_in * c_out * k * k + c_out


@pytest.mark.parametrize(
    ("activation", "act", "init"), [("relu", ReLU, "he"), ("tanh", Tanh, "xavier"), ("sigmoid", Sigmoid, "xavier")]
)
def test_mlp_is_dense_layers_with_its_activation_between_them(activation, act, init):
    net = mlp(64, hidden=(32, 16), n_out=10, activation=activation)
    assert _kinds(net) == ["Dense", act.__name__, "Dense", act.__name__, "Dense"]
    dense = [layer for layer in net.body.layers if isinstance(layer, Dense)]
    assert [d.weight_init for d in dense] == [init, init, "xavier"]  # the output layer keeps Dense's default
    assert net.num_params == _dense(64, 32) + _dense(32, 16) + _dense(16, 10)
    assert net.input_shape == (64,) and net.output_shape == (10,)


def test_mlp_puts_dropout_after_each_hidden_activation_when_asked():
    net = mlp(8, hidden=(4, 4), n_out=2, dropout_retain=0.5)
    assert _kinds(net) == ["Dense", "ReLU", "Dropout", "Dense", "ReLU", "Dropout", "Dense"]
    assert all(layer.retain == 0.5 for layer in net.body.layers if isinstance(layer, Dropout))


def test_mlp_refuses_an_unknown_activation_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"mlp\(activation='gelu'\): use one of \['relu', 'sigmoid', 'tanh'\]"):
        mlp(4, activation="gelu")


@pytest.mark.parametrize(("channels", "size"), [(1, 28), (3, 32)])
def test_lenet_is_d2ls_with_relu_and_max_pooling(channels, size):
    net = lenet(num_classes=10, in_channels=channels, size=size)
    assert _kinds(net) == ["Conv2D", "ReLU", "MaxPool2D", "Conv2D", "ReLU", "MaxPool2D", "Flatten",
                           "Dense", "ReLU", "Dense", "ReLU", "Dense"]  # fmt: skip
    side = ((size + 4 - 4) // 2 - 4) // 2  # 5x5 padded 2, pool 2, 5x5 unpadded, pool 2
    expected = _conv(channels, 6, 5) + _conv(6, 16, 5) + _dense(16 * side * side, 120) + _dense(120, 84)
    assert net.num_params == expected + _dense(84, 10)
    assert net.input_shape == (channels, size, size) and net.output_shape == (10,)
    assert all(isinstance(layer, MaxPool2D) for layer in net.body.layers[2:6:3])


def test_resnet18_is_a_stem_four_stages_of_two_blocks_and_a_dense_layer():
    net = resnet18(num_classes=10, in_channels=1, size=8)
    top = [type(layer).__name__ for layer in net.body.layers if not isinstance(layer, (Conv2D, BatchNorm, ReLU))]
    assert top[:8] == ["Residual"] * 8 and isinstance(net.layers[-1], Dense)
    blocks = [layer for layer in net.body.layers if isinstance(layer, Residual)]
    assert [b.config()["channels"] for b in blocks] == [64, 64, 128, 128, 256, 256, 512, 512]
    assert sum(isinstance(layer, GlobalAvgPool) for layer in net.body.layers) == 1
    assert net.output_shape == (10,)


@pytest.mark.parametrize(("weight_init", "dense_init"), [("he", "xavier"), ("normal:0.01", "normal:0.01")])
def test_resnet18_draws_its_convolutions_and_its_dense_layer_as_asked(weight_init, dense_init):
    net = resnet18(size=8, weight_init=weight_init)
    convs = [layer for layer in net.layers if isinstance(layer, Conv2D)]
    assert convs and all(c.weight_init == weight_init for c in convs)
    assert net.layers[-1].weight_init == dense_init
    if weight_init == "normal:0.01":  # d2l's recipe: every weight from N(0, 0.01)
        w = np.concatenate([layer.params["W"].numpy().ravel() for layer in [*convs, net.layers[-1]]])
        assert abs(w.std() - 0.01) < 0.001
