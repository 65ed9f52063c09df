"""kit.nn.batchnorm: BatchNorm's settings (and the error that names a bad one), the inputs it takes,
what it computes in training and in inference, and float16 statistics that do not overflow."""

import numpy as np
import pytest
from _layers import bind_random, forward_backward

from kit.nn import BatchNorm

RNG = np.random.default_rng(7)


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
