"""Model zoo: mlp, lenet, resnet18 (d2l's small-input form).

>>> from kit.nn import lenet, mlp, resnet18
>>> net = mlp(64, hidden=(128,), n_out=10)                 # the digits chapter's model
>>> net.num_params
9610
>>> net = lenet(num_classes=10, in_channels=1)             # Fashion-MNIST, 28 x 28
>>> net.input_shape, net.output_shape, net.num_params
((1, 28, 28), (10,), 61706)

`resnet18(num_classes=10, in_channels=1)` builds the Fashion-MNIST ResNet the same way: 11,183,626
parameters, about a second to build and initialise, so it is not run here.
"""

from __future__ import annotations

from typing import Any

from kit.nn.activations import ReLU, Sigmoid, Tanh
from kit.nn.batchnorm import BatchNorm
from kit.nn.conv import Conv2D, GlobalAvgPool, MaxPool2D
from kit.nn.layers import Dense, Dropout, Flatten, Layer
from kit.nn.network import Network
from kit.nn.residual import Residual

__all__ = ["lenet", "mlp", "resnet18"]

_ACTIVATIONS = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid}


def mlp(
    n_in: int,
    hidden: tuple[int, ...] = (128,),
    n_out: int = 10,
    activation: str = "relu",
    dropout_retain: float | None = None,
    **network_kw: Any,
) -> Network:
    """Dense layers with `activation` between them; softmax cross-entropy on top."""
    act = _ACTIVATIONS.get(activation)
    if act is None:
        raise ValueError(f"mlp(activation={activation!r}): use one of {sorted(_ACTIVATIONS)}")
    layers: list[Layer] = []
    for width in hidden:
        layers += [Dense(width, weight_init="he" if activation == "relu" else "xavier"), act()]
        if dropout_retain is not None:
            layers.append(Dropout(dropout_retain))
    layers.append(Dense(n_out))
    return Network(layers, input_shape=(n_in,), **network_kw)


def lenet(num_classes: int = 10, in_channels: int = 1, size: int = 28, **network_kw: Any) -> Network:
    """LeNet-5 as in d2l (5x5 convolutions, 2x2 pooling), with ReLU and max pooling instead of
    sigmoid and average pooling, which train much faster."""
    layers: list[Layer] = [
        Conv2D(6, 5, padding=2),
        ReLU(),
        MaxPool2D(2),
        Conv2D(16, 5),
        ReLU(),
        MaxPool2D(2),
        Flatten(),
        Dense(120, weight_init="he"),
        ReLU(),
        Dense(84, weight_init="he"),
        ReLU(),
        Dense(num_classes),
    ]
    return Network(layers, input_shape=(in_channels, size, size), **network_kw)


def resnet18(
    num_classes: int = 10,
    in_channels: int = 1,
    size: int = 28,
    weight_init: str = "he",
    recompute: bool = False,
    **network_kw: Any,
) -> Network:
    """d2l's ResNet-18 for small inputs: a 3x3 stem with no max-pool, four stages of two
    residual blocks (64, 128, 256, 512 channels), global average pooling, one dense layer.
    `weight_init` is every convolution's and the dense layer's ('he' by default, the dense layer
    then 'xavier'); d2l's recipe draws them all from N(0, 0.01): weight_init='normal:0.01'.
    `recompute=True`: every residual block keeps only its input and output for backward and runs
    its forward again there (kit.nn.recompute)."""
    dense_init = "xavier" if weight_init == "he" else weight_init
    layers: list[Layer] = [Conv2D(64, 3, padding=1, weight_init=weight_init), BatchNorm(), ReLU()]
    for i, channels in enumerate((64, 128, 256, 512)):
        first = i == 0
        layers += [
            Residual(channels, not first, 1 if first else 2, weight_init, recompute),
            Residual(channels, weight_init=weight_init, recompute=recompute),
        ]
    layers += [GlobalAvgPool(), Dense(num_classes, weight_init=dense_init)]
    return Network(layers, input_shape=(in_channels, size, size), **network_kw)
