"""kit.nn.layers, one layer at a time and outside a Network: output shapes, parameter counts,
configurations (their round trip and the errors that name a bad value), and each layer's forward
and backward against a few lines of NumPy written here (finite differences of every layer:
tests/nn/test_gradients.py)."""

import math

import numpy as np
import pytest
from _layers import bind_random, forward_backward

import kit
from kit.nn import MSE, Dense, Dropout, Flatten, Network, ReLU, Sequential, Sigmoid, Softmax, Tanh
from kit.nn.layers import Layer, layer_from_config

RNG = np.random.default_rng(42)
X = RNG.standard_normal((4, 5))  # (B, F)
EPS = RNG.standard_normal((4, 5))


# ---- shapes and parameter counts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "input_shape", "output_shape", "num_params"),
    [
        (Dense(7), (5,), (7,), 5 * 7 + 7),
        (ReLU(), (3, 4), (3, 4), 0),
        (Tanh(), (6,), (6,), 0),
        (Sigmoid(), (6,), (6,), 0),
        (Softmax(), (9,), (9,), 0),
        (Dropout(0.5), (2, 3), (2, 3), 0),
        (Flatten(), (2, 3, 4), (24,), 0),
        (Sequential([Flatten(), Dense(4), ReLU(), Dense(2)]), (2, 3), (2,), 6 * 4 + 4 + 4 * 2 + 2),
    ],
)
def test_build_gives_the_output_shape_and_the_parameter_count(layer, input_shape, output_shape, num_params):
    assert layer.build(input_shape) == output_shape
    assert (layer.input_shape, layer.output_shape) == (input_shape, output_shape)
    net = Network([layer], input_shape, loss=MSE(), dtype="float64")  # MSE: outputs of any shape
    assert net.num_params == num_params
    assert net.output(np.zeros((3, *input_shape))).shape == (3, *output_shape)


def test_dense_parameters_are_w_then_b_and_describe_counts_them():
    layer = Dense(3)
    layer.build((4,))
    specs = layer.param_specs()
    assert [(s.name, s.shape, s.regularize) for s in specs] == [("W", (4, 3), True), ("b", (3,), False)]
    assert (specs[0].fan_in, specs[0].fan_out, specs[0].init, specs[1].init) == (4, 3, "xavier", "zeros")
    assert layer.describe() == "Dense: (4,) -> (3,), 15 params"
    assert sum(math.prod(s.shape) for s in specs) == 15


# ---- configurations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Dense(0), r"Dense\(n_out=0\): must be a whole number >= 1"),
        (lambda: Dense(2.5), r"Dense\(n_out=2\.5\): must be a whole number >= 1"),
        (lambda: Dense("3"), r"Dense\(n_out='3'\): must be a whole number >= 1"),
        (lambda: Dropout(0.0), r"Dropout\(retain=0\.0\): must be a finite number in \(0, 1\]"),
        (lambda: Dropout(1.5), r"Dropout\(retain=1\.5\)"),
        (lambda: Sequential([]), "Sequential needs at least one layer"),
        (lambda: Dense(3).build((2, 2)), r"Dense needs flat inputs .* got per-example shape \(2, 2\); add Flatten\(\)"),
        (lambda: layer_from_config({"type": "Dense2"}), r"unknown layer type 'Dense2' .* known: \[.*'Dense'"),
    ],
)
def test_a_bad_configuration_is_refused_naming_the_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_remedy_for_a_dense_on_images_works():
    """ "add Flatten()": with it, the same Dense builds on the same images."""
    assert Sequential([Flatten(), Dense(3)]).build((2, 2)) == (3,)


def test_input_of_another_shape_is_refused_naming_both():
    layer = Dense(2)
    bind_random(layer, (3,))
    with pytest.raises(ValueError, match=r"Dense: expected input of shape \(batch, 3\), got \(4, 5\)"):
        forward_backward(layer, X)


@pytest.mark.parametrize(
    "layer",
    [
        Dense(4, weight_init="he"),
        ReLU(),
        Tanh(),
        Sigmoid(),
        Softmax(),
        Dropout(0.8),
        Flatten(),
        Sequential([Dense(2), Tanh()]),
    ],
)
def test_a_configuration_rebuilds_the_same_layer(layer):
    again = layer_from_config(layer.config())
    assert type(again) is type(layer) and again.config() == layer.config()


def test_every_subclass_is_registered_and_says_whether_it_needs_working_memory():
    class Doubling(Tanh):  # a user's layer: registered by name, and given its scope back
        def forward(self, x, mgr, training):
            return super().forward(x * 2, mgr, training)

    assert Layer.registry["Doubling"] is Doubling and Layer.registry["Dense"] is Dense
    assert Doubling.forward_working_memory and not Tanh.forward_working_memory
    assert not Dense.forward_working_memory and not Dense.backward_working_memory
    assert Sequential.is_composite and not Dense.is_composite and not Doubling.is_composite


# ---- forward and backward against NumPy -----------------------------------------------------


def test_dense_forward_and_backward():
    layer = Dense(3)
    p = bind_random(layer, (5,))
    eps = RNG.standard_normal((4, 3))
    y, dx, g = forward_backward(layer, X, eps)
    np.testing.assert_allclose(y, X @ p["W"] + p["b"], rtol=1e-12)
    np.testing.assert_allclose(g["W"], X.T @ eps, rtol=1e-12)
    np.testing.assert_allclose(g["b"], eps.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(dx, eps @ p["W"].T, rtol=1e-12)


def test_a_first_dense_skips_the_input_gradient_but_still_fills_its_own():
    layer = Dense(3)
    layer.skip_input_grad = True
    bind_random(layer, (5,))
    eps = RNG.standard_normal((4, 3))
    _, dx, g = forward_backward(layer, X, eps)
    assert dx is None
    np.testing.assert_allclose(g["W"], X.T @ eps, rtol=1e-12)


def test_flatten_forward_and_backward_on_rows_are_the_identity():
    layer = Flatten()
    bind_random(layer, (5,))
    y, dx, _ = forward_backward(layer, X, EPS)
    np.testing.assert_array_equal(y, X)
    np.testing.assert_array_equal(dx, EPS)


def test_flatten_turns_images_into_rows_and_gradients_back_into_images():
    layer = Flatten()
    bind_random(layer, (2, 3, 4))
    x = RNG.standard_normal((2, 2, 3, 4))
    eps = RNG.standard_normal((2, 24))
    y, dx, _ = forward_backward(layer, x, eps)
    np.testing.assert_array_equal(y, x.reshape(2, 24))
    np.testing.assert_array_equal(dx, eps.reshape(2, 2, 3, 4))


def test_dropout_keeps_about_retain_scales_by_its_inverse_and_routes_the_gradient_through_the_same_mask():
    layer = Dropout(0.25)
    bind_random(layer, (1000,))
    x = RNG.uniform(1, 2, (8, 1000))  # no zeros: a dropped unit is one whose output is 0
    eps = RNG.standard_normal((8, 1000))
    kit.seed(3)
    y, dx, _ = forward_backward(layer, x, eps)
    kept = y != 0
    assert 0.22 < kept.mean() < 0.28
    np.testing.assert_allclose(y[kept], x[kept] / 0.25, rtol=1e-12)
    np.testing.assert_allclose(dx, eps * kept / 0.25, rtol=1e-12)
    kit.seed(3)
    np.testing.assert_array_equal(forward_backward(layer, x)[0], y)  # the device's seeded generator


@pytest.mark.parametrize(("retain", "training"), [(0.5, False), (1.0, True)])
def test_dropout_is_the_identity_in_inference_and_when_it_keeps_everything(retain, training):
    layer = Dropout(retain)
    bind_random(layer, (5,))
    y, dx, _ = forward_backward(layer, X, EPS, training=training)
    np.testing.assert_array_equal(y, X)
    np.testing.assert_array_equal(dx, EPS)


def test_sequential_is_its_layers_in_order_and_back():
    first, second = Dense(3), Dense(2)
    layer = Sequential([first, Tanh(), second])
    layer.build((5,))
    rng = np.random.default_rng(1)
    p = {}
    for name, sub in (("1", first), ("2", second)):
        params = {s.name: kit.asarray(rng.standard_normal(s.shape)) for s in sub.param_specs()}
        sub.bind(params, {s.name: kit.zeros(s.shape, dtype="float64") for s in sub.param_specs()})
        p |= {k + name: v.numpy() for k, v in params.items()}
    eps = RNG.standard_normal((4, 2))
    y, dx, _ = forward_backward(layer, X, eps)
    h = np.tanh(X @ p["W1"] + p["b1"])
    np.testing.assert_allclose(y, h @ p["W2"] + p["b2"], rtol=1e-12)
    dh = (eps @ p["W2"].T) * (1 - h**2)
    np.testing.assert_allclose(dx, dh @ p["W1"].T, rtol=1e-12)
    np.testing.assert_allclose(first.grads["W"].numpy(), X.T @ dh, rtol=1e-12)
    np.testing.assert_allclose(second.grads["W"].numpy(), h.T @ eps, rtol=1e-12)
