"""kit.bench.train: a hand-written baseline (NumPy, PyTorch) computes in kit's dtype, or no ratio to it
is taken."""

import numpy as np
import pytest


def test_same_dtype_refuses_a_float64_baseline_beside_float32_kit():
    from kit.bench.train import same_dtype

    w = np.ones((4, 3), np.float32)
    same_dtype("NumPy forward", np.float32, np.ones((1, 4), np.float32), w)  # like for like: no error
    with pytest.raises(TypeError, match=r"NumPy forward: the baseline holds float64 beside kit's float32"):
        same_dtype("NumPy forward", np.float32, np.ones((1, 4)), w)
    with pytest.raises(TypeError, match="float64"):  # the answer gives a float64 computation away too
        same_dtype("NumPy forward", "float32", w, np.ones((1, 4)) @ w)


def test_the_bench_numpy_baselines_are_fed_kit_s_dtype():
    """Every hand-written baseline in kit.bench.train is checked before timing (the class of the
    chapter 5 bug): the inference rows' inputs, weights and answer are the network's dtype."""
    import inspect

    from kit.bench import train, train_conv, train_inference

    baselines = (train._mlp_variants, train_inference.inference_rows, train._torch_mlp_row, train._torch_step)
    for fn in (*baselines, train_conv._torch_conv_steps):
        assert "same_dtype(" in inspect.getsource(fn), fn.__name__
    data = train._mlp_data(8, 784, 10)
    assert data.features.numpy().dtype == np.float32 and data.labels.numpy().dtype == np.float32
