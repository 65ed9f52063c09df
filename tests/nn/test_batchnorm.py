"""kit.nn.batchnorm: BatchNorm's settings (and the error that names a bad one), the inputs it takes,
what it computes in training and in inference, and float16 statistics that do not overflow."""

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.data import ArrayIterator, DataSet
from kit.nn import BatchNorm, Conv2D, Dense, Flatten, Network, ReLU, Sequential, Sgd

RNG = np.random.default_rng(7)


# ---- BatchNorm -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decay", "eps", "said"),
    [
        (1.0, 1e-5, r"BatchNorm\(decay=1\.0\): must be a finite number in \[0, 1\)"),
        (-0.1, 1e-5, r"BatchNorm\(decay=-0\.1\): must be a finite number in \[0, 1\)"),
        (0.9, 0.0, r"BatchNorm\(eps=0\.0\): must be a finite number > 0"),
    ],
)
def test_batchnorm_refuses_a_bad_setting_naming_it(decay, eps, said):
    with pytest.raises(ValueError, match=said):
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


@pytest.mark.parametrize(
    ("layers", "shape", "refused"),
    [
        (lambda: [Dense(4), BatchNorm(), Dense(3)], (5,), True),  # (1, F): one value per feature
        (lambda: [Conv2D(2, 3), BatchNorm(), Flatten(), Dense(3)], (1, 3, 3), True),  # a 1x1 image: one value
        (lambda: [Conv2D(2, 3, padding=1), BatchNorm(), Flatten(), Dense(3)], (1, 2, 2), False),  # 4 values
        (lambda: [Dense(4), bn_in_a_sequential(), Dense(3)], (5,), True),  # nested in a Sequential
    ],
    ids=["dense", "conv-1x1", "conv-2x2", "nested"],
)
def test_a_training_batch_of_one_value_per_channel_is_refused_at_the_call(layers, shape, refused):
    """PyTorch: "Expected more than 1 value per channel when training". kit says so before any layer
    runs, so nothing moves (parameters, running statistics, counters), and its remedy runs."""
    rng = np.random.default_rng(0)
    net = Network(layers(), shape, updater=Sgd(0.1), seed=1)
    before, iteration = net.params().numpy().copy(), net.iteration
    one = DataSet(rng.random((1, *shape)), np.array([1]), num_classes=3)
    if not refused:
        net.fit_batch(one)
        return
    with pytest.raises(ValueError, match=r"a batch of 1 example\(s\) gives it 1 value per channel") as info:
        net.fit_batch(one)
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == iteration
    assert "drop_last=True" in str(info.value)
    data = DataSet(rng.random((9, *shape)), np.arange(9) % 3, num_classes=3)  # 9 = 4 + 4 + 1
    net.fit(ArrayIterator(data, 4, drop_last=True), epochs=1)  # the remedy, as printed
    assert net.iteration == iteration + 2


def bn_in_a_sequential():
    return Sequential([BatchNorm(), ReLU()])
