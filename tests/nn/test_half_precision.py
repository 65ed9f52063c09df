"""float16 end to end (issue 21, items 9 and 16): data keeps its dtype, and every loss,
normalisation statistic and score adds in float32, checked against a float32 reference."""

from __future__ import annotations

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet
from kit.nn import MSE, BatchNorm, Dense, Network, Sgd, SoftmaxCrossEntropy, mlp

DTYPES = ["float16", "float32", "float64"]


def _net(dtype: str, layers, n_in: int, loss) -> Network:
    return Network(layers, input_shape=(n_in,), loss=loss, dtype=dtype, seed=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_data_set_keeps_the_floating_dtype_it_was_given(dtype):
    x = np.ones((4, 3), dtype)
    ds = DataSet(x, np.array([0, 1, 2, 1]))
    assert ds.features.dtype == dtype and ds.labels.dtype == dtype  # labels follow the features
    batches = list(ArrayIterator(ds, 2))
    assert all(b.features.dtype == dtype and b.labels.dtype == dtype for b in batches)
    ints = DataSet(np.ones((4, 3), np.int64), np.array([0, 1, 2, 1]))
    assert ints.features.dtype == np.float32  # whole numbers become the default floating dtype


@pytest.mark.parametrize("data_dtype", DTYPES)
@pytest.mark.parametrize("net_dtype", DTYPES)
def test_data_of_any_floating_dtype_meets_a_network_in_the_networks_dtype(data_dtype, net_dtype):
    """A float16 network refused float16 data (DataSet had cast it to float32) with advice the user
    had followed; now data keeps its dtype and is cast where it meets the network."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((32, 3)).astype(data_dtype), rng.integers(0, 2, 32)
    net = _net(net_dtype, [Dense(2)], 3, SoftmaxCrossEntropy())
    want = net.output(x.astype(net_dtype)).numpy()
    np.testing.assert_array_equal(net.output(DataSet(x, y).features).numpy(), want)
    for ds in [DataSet(x, y), *ArrayIterator(DataSet(x, y), 8)]:
        assert ds.features.dtype == data_dtype
    assert np.isfinite(net.score(DataSet(x, y)))
    net.fit(ArrayIterator(DataSet(x, y), 8), epochs=1)
    assert net.flat_params.dtype == net_dtype
    with pytest.raises(TypeError, match=r"features must be floating point, got dtype int32"):
        DataSet(kit.zeros((2, 3), dtype="int32"), [0, 1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mse_adds_in_float32_at_least(dtype):
    """A float16 MSE of about 10,000 scored inf (squares above 255 and sums above 65,504 overflow)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 4)).astype(dtype)
    y = np.full((512, 2), 100.0, dtype)
    net = _net(dtype, [Dense(2)], 4, MSE())
    out = net.output(x).numpy().astype(np.float64)
    want = float(np.mean((out - 100.0) ** 2))
    got = net.score(DataSet(x, y))
    assert np.isfinite(got)
    assert got == pytest.approx(want, rel=2e-3 if dtype == "float16" else 1e-5)
    net.fit(DataSet(x, y))  # a step: finite loss, no NonFiniteScoreError


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_over_many_examples_adds_in_float32_at_least(dtype):
    """70,000 examples in one batch: a float16 sum of the losses overflowed."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((70_000, 3)).astype(dtype)
    labels = rng.integers(0, 4, 70_000)
    net = _net(dtype, [Dense(4)], 3, SoftmaxCrossEntropy())
    p = net.output(x).numpy().astype(np.float64)
    want = float(-np.mean(np.log(p[np.arange(70_000), labels])))
    got = net.score(DataSet(x, labels))
    assert np.isfinite(got) and got == pytest.approx(want, rel=5e-3 if dtype == "float16" else 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(256, 3), (64, 2, 5, 5)])
def test_batchnorm_statistics_add_in_float32_at_least(dtype, shape):
    """Inputs around 200: a float16 channel sum of squares overflowed, the running variance became
    inf, the output constant and the gradient zero, and training went on."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 30 + 200).astype(dtype)
    net = Network([BatchNorm(decay=0.0)], input_shape=shape[1:], loss=MSE(), dtype=dtype, seed=0)
    axes = (0,) if len(shape) == 2 else (0, 2, 3)
    ref = x.astype(np.float64)
    mean, var = ref.mean(axis=axes), ref.var(axis=axes)
    y = net.output(x, train=True).numpy().astype(np.float64)
    layer = net.body.layers[0]
    running_var = layer.params["var"].numpy().astype(np.float64)
    running_mean = layer.params["mean"].numpy().astype(np.float64)
    tol = 1e-2 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(running_mean, mean, rtol=tol)
    np.testing.assert_allclose(running_var, var, rtol=tol)
    shape_c = (1, -1) if len(shape) == 2 else (1, -1, 1, 1)
    want = (ref - mean.reshape(shape_c)) / np.sqrt(var.reshape(shape_c) + 1e-5)
    np.testing.assert_allclose(y, want, atol=2e-2 if dtype == "float16" else 1e-5)
    assert np.std(y) > 0.5  # not the constant output of an infinite variance


@pytest.mark.parametrize("given", ["numpy", "NDArray"])
def test_finite_features_too_large_for_float16_are_named_as_such_and_the_remedy_runs(given):
    """They were reported as "features contain NaN or infinity", which the data never held."""
    net = mlp(4, hidden=(3,), n_out=2, dtype="float16", updater=Sgd(0.1), seed=0)
    x = np.ones((2, 4), np.float32)
    x[1, 2] = 1e5
    data = x if given == "numpy" else kit.asarray(x)
    before = net.params().numpy().copy()
    with pytest.raises(
        ValueError,
        match=r"features: 1 finite values exceed float16's range \(largest 65504\); first at index \[1, 2\], 100000",
    ):
        net.fit_batch(DataSet(data, np.array([0, 1]), num_classes=2))
    np.testing.assert_array_equal(net.params().numpy(), before)
    net.fit_batch(DataSet(x / x.max(), np.array([0, 1]), num_classes=2))  # the remedy, as printed
    with pytest.raises(ValueError, match="contain NaN or infinity"):  # a real NaN is still called one
        x[0, 0] = np.nan
        net.fit_batch(DataSet(x, np.array([0, 1]), num_classes=2))


def test_score_refuses_features_with_nan_as_evaluate_does():
    net = mlp(4, hidden=(3,), n_out=2, seed=0)
    x = np.ones((3, 4), np.float32)
    x[2, 1] = np.nan
    with pytest.raises(
        ValueError, match=r"score: features contain NaN or infinity \(1 values; first at index \[2, 1\]\)"
    ):
        net.score(DataSet(x, np.array([0, 1, 1]), num_classes=2))
