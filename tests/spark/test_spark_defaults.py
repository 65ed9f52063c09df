"""Issue 44 item A: defaults that train well. More workers than task slots is said in words
(MoreWorkersThanSlotsWarning naming both numbers). The averaging master's updater default is in
test_averaging_master.py, both masters' defaults in test_masters.py, the number of workers fixed
at the first fit in test_training_master.py."""

import warnings

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, to_rdd
from kit.spark.scheduling import MoreWorkersThanSlotsWarning

MASTERS = (ParameterAveragingTrainingMaster, SharedTrainingMaster)


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240]), test


def _check(sc, tm, rdd):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tm.check_cluster(sc, rdd)
    return [str(w.message) for w in caught if issubclass(w.category, MoreWorkersThanSlotsWarning)]


@pytest.mark.parametrize("cls", MASTERS)
@pytest.mark.parametrize(
    ("options", "partitions", "workers", "source"),
    [
        ({"num_workers": 1}, 2, None, None),
        ({"num_workers": 2}, 5, None, None),
        ({}, 4, None, None),  # defaultParallelism: as many workers as slots
        ({"num_workers": 3}, 2, 3, "num_workers=3"),
        ({"num_workers": 8}, 2, 8, "num_workers=8"),
        ({"repartition": "NEVER"}, 5, 5, "repartition='NEVER': one a partition of the RDD"),
        ({"repartition": "NEVER"}, 2, None, None),
        ({"num_workers": 3, "repartition": "NUM_PARTITIONS_WORKERS_DIFFERS"}, 3, 3, "repartition="),
        ({"num_workers": 3, "repartition": "NUM_PARTITIONS_WORKERS_DIFFERS"}, 2, 3, "num_workers=3"),
    ],
)
def test_more_workers_than_task_slots_is_said_with_both_numbers(sc, cls, options, partitions, workers, source):
    rdd = sc.parallelize(range(10), partitions)
    said = _check(sc, cls(**options), rdd)
    if workers is None:
        assert said == []
        return
    (message,) = said
    assert f"{workers} workers ({source}" in message
    assert "has 2 task slot(s)" in message and "num_workers <= 2" in message


def test_a_fit_with_more_workers_than_slots_warns_and_still_trains(sc, digits):
    data, _ = digits
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=3)
    net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=0)
    before = net.params().numpy().copy()
    with pytest.warns(MoreWorkersThanSlotsWarning, match=r"3 workers \(num_workers=3\) but the cluster"):
        SparkNetwork(sc, net, tm).fit(to_rdd(sc, data), epochs=1)
    assert not np.array_equal(before, net.params().numpy())
