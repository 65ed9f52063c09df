"""kit.bench.train: a hand-written baseline (NumPy, PyTorch) computes in kit's dtype, or no ratio to it
is taken."""

import numpy as np


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
