"""kit.nn.activations, one activation at a time and outside a Network: each forward and backward
against a few lines of NumPy written here, and the ones with exponentials on huge inputs (finite
differences of every layer: tests/nn/test_gradients.py; their shapes and configurations:
tests/nn/test_layers.py)."""

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.nn import ReLU, Sigmoid, Softmax, Tanh

RNG = np.random.default_rng(42)
X = RNG.standard_normal((4, 5))  # (B, F)
EPS = RNG.standard_normal((4, 5))


@pytest.mark.parametrize(
    ("layer", "forward", "backward"),
    [
        (ReLU(), lambda x: np.maximum(x, 0), lambda x, y, e: e * (x > 0)),
        (Tanh(), np.tanh, lambda x, y, e: e * (1 - y**2)),
        (Sigmoid(), lambda x: 1 / (1 + np.exp(-x)), lambda x, y, e: e * y * (1 - y)),
        (
            Softmax(),
            lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True),
            lambda x, y, e: y * (e - (e * y).sum(1, keepdims=True)),
        ),
    ],
    ids=["relu", "tanh", "sigmoid", "softmax"],
)
def test_activation_forward_and_backward(layer, forward, backward):
    bind_random(layer, (5,))
    y, dx, _ = forward_backward(layer, X, EPS)
    np.testing.assert_allclose(y, forward(X), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dx, backward(X, forward(X), EPS), rtol=1e-12, atol=1e-15)


def test_sigmoid_and_softmax_stay_finite_for_huge_inputs():
    huge = np.array([[1000.0, -1000.0, 0.0]])
    with np.errstate(over="raise", invalid="raise"):  # no overflow, no NaN (underflow to 0 is right)
        for layer, want in ((Sigmoid(), [[1.0, 0.0, 0.5]]), (Softmax(), [[1.0, 0.0, 0.0]])):
            bind_random(layer, (3,))
            y, _, _ = forward_backward(layer, huge)
            np.testing.assert_allclose(y, want, atol=1e-300)
