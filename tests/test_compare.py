import numpy as np
import pytest

from kit.compare import Job, compare_devices, measure_bandwidth, predict_epoch_seconds
from kit.data import DataSet
from kit.nn import Sgd, mlp


def test_scaling_model_terms():
    one = predict_epoch_seconds(100, 1, 0.01, 1, 1000, 4, 1, 1e9, True)
    assert one == pytest.approx(1.0)
    two = predict_epoch_seconds(100, 2, 0.01, 1, 1000, 4, 1, 1e9, True)
    # half the compute, plus 50 averagings of 2 * 2 * 1000 * 4 bytes at 1 GB/s
    assert two == pytest.approx(0.5 + 50 * 16000 / 1e9)
    shared = predict_epoch_seconds(100, 2, 0.01, 10, 1000, 4, 1, 1e9, False)
    assert shared == pytest.approx(1.0 + 5 * 16000 / 1e9)  # one device's compute is not divided


def test_compare_devices_reports_and_labels_rows():
    rng = np.random.default_rng(0)
    data = DataSet(rng.random((256, 16)), rng.integers(0, 3, 256), num_classes=3)
    job = Job(lambda: mlp(16, hidden=(8,), n_out=3, updater=Sgd(0.1)), data, data, batch_size=32, epochs=2)
    result = compare_devices(job, counts=[1, 2])
    assert [r["devices"] for r in result.rows] == [1, 2]
    assert result.rows[0]["speedup"] == 1.0 and result.rows[0]["predicted_speedup"] == pytest.approx(1.0)
    for row in result.rows:
        assert row["epoch_s"] > 0 and 0 <= row["accuracy"] <= 1 and row["predicted_speedup"] > 0
    text = result.table()
    assert "devices" in text and "efficiency" in text
    if "logical" in result.rows[1]["kind"]:
        assert "not a multi-GPU speedup" in text
    assert result.model["params"] == 16 * 8 + 8 + 8 * 3 + 3
    with pytest.raises(ValueError, match="positive integers"):
        compare_devices(job, counts=[0])


def test_bandwidth_is_measured():
    assert measure_bandwidth(1 << 20) > 1e8  # any machine copies more than 100 MB/s
