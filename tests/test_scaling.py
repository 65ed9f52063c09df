"""kit.training.scaling: the scaling model's epoch time, worked out by hand for each of its terms."""

import pytest

from kit.training.scaling import predict_epoch_seconds


def _model(n, parallel=True, frequency=5, step=0.01):
    # 100 batches, 1,000 parameters of 4 bytes, 2 buffers (parameters and updater state), 1 GB/s
    return predict_epoch_seconds(100, n, step, frequency, 1_000, 4, 2, 1e9, parallel)


def test_one_device_is_its_compute_alone():
    assert _model(1) == pytest.approx(100 * 0.01)
    assert _model(1, parallel=False) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_n_devices_divide_the_compute_and_add_the_averagings_copies(n):
    moved = 2 * (n - 1) * 1_000 * 4 * 2  # gathered to the first device and broadcast back
    averagings = 100 / (n * 5)
    assert _model(n) == pytest.approx(100 * 0.01 / n + averagings * moved / 1e9)
    # workers that share one device do not divide the compute
    assert _model(n, parallel=False) == pytest.approx(100 * 0.01 + averagings * moved / 1e9)


def test_averaging_less_often_moves_fewer_bytes():
    compute = 100 * 0.01 / 4
    copies = {f: _model(4, frequency=f) - compute for f in (1, 2, 10)}
    assert copies[1] == pytest.approx(2 * copies[2]) == pytest.approx(10 * copies[10])
