"""kit.nn.kernels: each kernel against its formula in float64 NumPy (forward and backward, the
losses' values and gradients), a stable softmax where exp overflows, and the seam that notes each
call while a step is recorded (kit.nn.replay's recording itself: test_recording.py)."""

import numpy as np
import pytest

from kit.nn import kernels
from kit.nn.kernels import TAPE

RNG = np.random.default_rng(5)


def test_the_planned_softmax_is_the_kernel_layers_and_losses_use():
    from kit.nn import kernels

    z = np.random.default_rng(3).normal(size=(4, 7)).astype(np.float32) * 30
    out, row, logp = np.empty_like(z), np.empty((4, 1), np.float32), np.empty_like(z)
    kernels.softmax_into(np, z, out, row, log_out=logp)
    shifted = z.astype(np.float64) - z.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(logp, shifted - np.log(e.sum(axis=1, keepdims=True)), rtol=1e-5, atol=1e-5)
    assert np.isfinite(logp).all() and (out == 0).any()  # log_softmax stays finite where softmax underflows


def _x(*shape):
    return RNG.standard_normal(shape)


def test_dense_forward_and_backward_are_the_matrix_products():
    x, w, b, e = _x(4, 3), _x(3, 5), _x(5), _x(4, 5)
    out = np.empty((4, 5))
    kernels.dense_into(np, x, w, b, out)
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-12)
    dw, db, dx = np.empty((3, 5)), np.empty(5), np.empty((4, 3))
    kernels.dense_backward_into(np, x, e, w, dw, db, dx)
    np.testing.assert_allclose(dw, x.T @ e, rtol=1e-12)
    np.testing.assert_allclose(db, e.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(dx, e @ w.T, rtol=1e-12)
    kernels.dense_backward_into(np, x, e, w, dw, db, None)  # a first layer: no dx, still dw and db
    np.testing.assert_allclose(dw, x.T @ e, rtol=1e-12)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {
    "relu": (kernels.relu_into, lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
    "tanh": (kernels.tanh_into, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "sigmoid": (kernels.sigmoid_into, _sigmoid, lambda x: _sigmoid(x) * (1 - _sigmoid(x))),
}
BACKWARD = {
    "relu": lambda e, y, out: kernels.relu_backward_into(np, e, y, np.empty(e.shape, bool), out),
    "tanh": lambda e, y, out: kernels.tanh_backward_into(np, e, y, np.empty_like(e), out),
    "sigmoid": lambda e, y, out: kernels.sigmoid_backward_into(np, e, y, np.empty_like(e), out),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_an_activation_and_its_backward_from_its_output_are_the_function_and_its_derivative(name):
    forward, f, derivative = ACTIVATIONS[name]
    x, e = _x(3, 6) * 3, _x(3, 6)
    y, dx = np.empty_like(x), np.empty_like(x)
    forward(np, x, y)
    np.testing.assert_allclose(y, f(x), rtol=1e-12, atol=1e-15)
    BACKWARD[name](e, y, dx)
    np.testing.assert_allclose(dx, e * derivative(x), rtol=1e-10, atol=1e-15)


def test_the_sigmoid_of_large_inputs_does_not_overflow():
    x, out = np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0]), np.empty(5)
    with np.errstate(all="raise"):
        kernels.sigmoid_into(np, x, out)
    np.testing.assert_allclose(out, [0.0, _sigmoid(-40.0), 0.5, 1.0, 1.0], atol=1e-17)


def test_the_softmax_backward_is_the_jacobian_product():
    z, e = _x(3, 4), _x(3, 4)
    y, row = np.empty_like(z), np.empty((3, 1))
    kernels.softmax_into(np, z, y, row)
    out = np.empty_like(z)
    kernels.softmax_backward_into(np, e, y, np.empty_like(z), np.empty((3, 1)), out)
    jacobians = [np.diag(p) - np.outer(p, p) for p in y]  # d softmax_i / d z_j
    np.testing.assert_allclose(out, [j.T @ v for j, v in zip(jacobians, e, strict=True)], rtol=1e-10, atol=1e-15)


def test_cross_entropy_is_the_mean_negative_log_likelihood_and_its_gradient_softmax_minus_labels():
    z = _x(5, 3) * 10
    t = np.eye(3)[[0, 2, 1, 1, 0]]
    grad, logp, row = np.empty_like(z), np.empty_like(z), np.empty((5, 1))
    loss = kernels.cross_entropy_into(np, z, t, grad, logp, row)
    shifted = z - z.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert loss == pytest.approx(-np.mean(np.sum(t * log_softmax, axis=1)), rel=1e-12)
    np.testing.assert_allclose(grad, (np.exp(log_softmax) - t) / 5, rtol=1e-10, atol=1e-15)


def test_mse_is_the_mean_square_and_its_gradient_and_float16_squares_do_not_overflow():
    y, t = _x(4, 2), _x(4, 2)
    grad, squares = np.empty_like(y), np.empty_like(y)
    assert kernels.mse_into(np, y, t, grad, squares) == pytest.approx(np.mean((y - t) ** 2), rel=1e-12)
    np.testing.assert_allclose(grad, 2 * (y - t) / 8, rtol=1e-12)
    y16, t16 = np.full((2, 2), 300.0, np.float16), np.zeros((2, 2), np.float16)  # 300^2 > float16's max
    loss = kernels.mse_into(np, y16, t16, np.empty_like(y16), np.empty((2, 2), np.float32))
    assert loss == 90_000.0


def test_l2_adds_its_gradient_and_returns_its_penalty():
    p, g = _x(3, 4), _x(3, 4)
    before = g.copy()
    penalty = kernels.l2_into(np, p, g, np.empty_like(p), 0.01)
    assert penalty == pytest.approx(0.5 * 0.01 * np.sum(p * p), rel=1e-12)
    np.testing.assert_allclose(g, before + 0.01 * p, rtol=1e-12)


def test_inverted_dropout_keeps_the_retained_units_scaled_up_and_its_backward_uses_the_same_mask():
    x, draws = _x(2, 5), np.array([[0.1, 0.9, 0.5, 0.79, 0.8], [0.0, 0.95, 0.2, 0.81, 0.6]])
    mask, out = np.empty_like(x), np.empty_like(x)
    kernels.dropout_into(np, x, draws, 0.8, mask, out)
    kept = draws < 0.8
    np.testing.assert_allclose(out, np.where(kept, x / 0.8, 0.0), rtol=1e-12)
    e, dx = _x(2, 5), np.empty_like(x)
    kernels.dropout_backward_into(np, e, mask, dx)
    np.testing.assert_allclose(dx, np.where(kept, e / 0.8, 0.0), rtol=1e-12)
    kernels.dropout_backward_into(np, e, None, dx)  # at inference: the gradient passes unchanged
    np.testing.assert_array_equal(dx, e)


def test_the_seam_notes_each_call_while_a_step_is_recorded_and_nothing_otherwise():
    x, out, row = _x(2, 3), np.empty((2, 3)), np.empty((2, 1))
    assert TAPE.calls is None
    kernels.relu_into(np, x, out)  # not recording: nothing noted, the kernel still runs
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    TAPE.calls = []
    try:
        kernels.copy_into(np, x, out)
        kernels.softmax_into(np, x, out, row, log_out=np.empty((2, 3)))  # a keyword: kept in a partial
        kernels.cross_entropy_into(np, x, np.eye(3)[[0, 1]], out, np.empty((2, 3)), row)  # its softmax not noted
        calls = TAPE.calls
    finally:
        TAPE.calls = None
    names = [getattr(f, "__name__", None) or f.func.__name__ for f, _, _ in calls]
    assert names == ["copy_into", "softmax_into", "cross_entropy_into"]
    assert calls[0][1][1] is x and calls[0][2] is None
    assert sorted(calls[1][0].keywords) == ["log_out"] and calls[2][2] > 0  # the loss returned
