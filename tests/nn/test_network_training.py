"""kit.nn.network_training: how a Network trains. Each updater lowers the loss, bad label rows are
refused naming the row, and fit(dataset, epochs=N) runs N epochs."""

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import MSE, Adam, Dense, Nesterovs, Network, Sgd, Tanh, mlp


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.mark.parametrize("updater", [Sgd(0.1), Nesterovs(0.05), Adam(5e-3)])
def test_each_updater_lowers_the_loss(digits, updater):
    train, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=updater, l2=1e-4)
    before = net.score(train)
    net.fit(ArrayIterator(train, batch_size=64, shuffle=True), epochs=3)
    assert net.score(train) < before * 0.6


def test_label_rows_out_of_range_are_refused_naming_the_row():
    net = mlp(4, hidden=(4,), n_out=3)
    rows = np.eye(3)[[0, 1, 2, 0]]
    rows[2] = [0, 2.0, -1.0]
    with pytest.raises(ValueError, match=r"label row 2 is \[ 0\.  2\. -1\.\]"):
        net.fit_batch(DataSet(np.zeros((4, 4)), rows))


def test_nan_in_classifier_label_rows_is_named():
    net = mlp(4, hidden=(4,), n_out=3)
    ds = DataSet(np.zeros((4, 4)), [0, 1, 2, 0], num_classes=3)
    ds.labels.data[1, 1] = np.nan  # edited behind the DataSet's back
    with pytest.raises(ValueError, match=r"label row 1 is \[ 0. nan  0.\]"):
        net.fit_batch(ds)


@pytest.mark.parametrize("epochs", [1, 3])
def test_fit_of_one_dataset_honours_epochs(epochs):
    """fit(dataset, epochs=N) did one iteration and ignored N (a newcomer's first script reached 14 %)."""
    from kit.data import load_digits
    from kit.nn import mlp

    train, _ = load_digits()
    net = mlp(64, hidden=(16,), n_out=10, seed=0)
    net.fit(train, epochs=epochs)
    assert net.iteration == epochs and net.epoch == (0 if epochs == 1 else epochs)
    with pytest.raises(ValueError, match=r"fit\(epochs=0\): must be a whole number >= 1"):
        net.fit(train, epochs=0)


def test_an_sgd_step_moves_the_parameters_by_the_learning_rate_times_the_scores_gradient():
    """fit_batch with Sgd(lr): params' = params - lr * d score / d params, the gradient taken here
    by central differences of score() on the same batch (float64, no L2)."""
    rng = np.random.default_rng(0)
    ds = DataSet(rng.standard_normal((5, 3)), rng.standard_normal((5, 2)))
    net = Network([Dense(4), Tanh(), Dense(2)], (3,), loss=MSE(), updater=Sgd(0.1), dtype="float64", seed=2)
    p0 = net.params().numpy().copy()
    grad = np.empty_like(p0)
    for i in range(p0.size):
        for sign in (1, -1):
            p = p0.copy()
            p[i] += sign * 1e-6
            net.set_params(p)
            grad[i] = (grad[i] if sign == -1 else 0.0) + sign * net.score(ds) / 2e-6
    net.set_params(p0)
    before = net.score(ds)
    assert net.fit_batch(ds) == pytest.approx(before, rel=1e-12)  # the loss the step started from
    np.testing.assert_allclose(net.params().numpy(), p0 - 0.1 * grad, rtol=1e-6, atol=1e-9)
    assert net.iteration == 1
