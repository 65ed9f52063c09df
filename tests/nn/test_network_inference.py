"""kit.nn.network_inference: how a Network answers. output() is detached memory even inside a
user's workspace; score() and evaluate() skip empty batches and say when there is nothing."""

import numpy as np
import pytest

import kit
from kit.data import DataSet, load_digits
from kit.nn import mlp
from kit.nn.evaluation import Evaluation


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def test_output_is_detached_even_inside_a_users_workspace(digits):
    _, test = digits
    net = mlp(64, hidden=(16,), n_out=10)
    ws = kit.get_workspace_for_current_thread(name="USER")
    with ws:
        probs = net.output(test.features)
    assert not probs.is_attached and probs.is_valid
    np.testing.assert_allclose(probs.numpy().sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(probs.numpy(), net.output(test.features).numpy())


def test_score_skips_empty_batches_and_says_when_there_is_nothing():
    """score() on a data set whose first or only batch was empty divided by zero (issue 21, item 18)."""
    net = mlp(3, hidden=(4,), n_out=2)
    empty = DataSet(np.zeros((0, 3), np.float32), np.zeros((0,), np.int64), num_classes=2)
    full = DataSet(np.ones((4, 3), np.float32), [0, 1, 0, 1], num_classes=2)
    assert net.score([empty, full]) == net.score(full) == net.score([full, empty])
    with pytest.raises(ValueError, match=r"score: no examples \(every batch was empty\)"):
        net.score(empty)
    with pytest.raises(ValueError, match="score: no examples"):
        net.score([empty, empty])
    assert net.evaluate([empty, full]).accuracy() == net.evaluate([full]).accuracy()


def _softmax_mlp(net, x):
    """The MLP's answer computed in NumPy from its own weights: Dense, ReLU, Dense, softmax."""
    (w1, b1), (w2, b2) = [(layer.params["W"].numpy(), layer.params["b"].numpy()) for layer in net.layers[::2]]
    z = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_output_planned_or_not_is_the_forward_pass_in_numpy_and_score_its_cross_entropy():
    net = mlp(5, hidden=(4,), n_out=3, seed=3, dtype="float64")
    ds = DataSet(np.random.default_rng(1).standard_normal((6, 5)), [0, 1, 2, 2, 1, 0], num_classes=3)
    x = ds.features.numpy()
    want = _softmax_mlp(net, x)
    for _ in range(3):  # the first answer runs the layers, later ones replay their kernels
        np.testing.assert_allclose(net.output(x).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(net.output(x, planned=False).numpy(), want, rtol=1e-12)
    assert net.output(x[:0]).shape == (0, 3)
    xent = -np.mean(np.log(want[np.arange(6), [0, 1, 2, 2, 1, 0]]))
    assert net.score(ds) == pytest.approx(xent, rel=1e-12)
    (ev,) = net.do_evaluation(ds, Evaluation(3))
    assert ev.accuracy() == pytest.approx(np.mean(want.argmax(axis=1) == [0, 1, 2, 2, 1, 0]))
