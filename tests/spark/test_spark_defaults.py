"""Issue 44 item A: defaults that train well. ParameterAveragingTrainingMaster keeps the updater's
state across averagings by default (DL4J's Javadoc; `save_updater=False` stays available), the
number of workers is fixed at the master's first fit and said in the stats, and more workers
than task slots is said in words (MoreWorkersThanSlotsWarning naming both numbers)."""

import types
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


def _averaging_fit(sc, data, **options):
    net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=3)
    options.setdefault("execution", "rounds")  # the broadcast bytes below are the rounds' (one per averaging)
    tm = ParameterAveragingTrainingMaster(20, 5, num_workers=2, collect_training_stats=True, **options)
    spark = SparkNetwork(sc, net, tm)
    spark.fit(to_rdd(sc, data), epochs=1)
    return spark


@pytest.mark.slow
def test_the_averaging_default_keeps_the_updater_state_across_averagings(sc, digits):
    """The regression: the default master sends Adam's moments with the parameters (3 arrays the
    size of the parameters, float32), and trains exactly as save_updater=True does; False still
    restarts them (a different result, a broadcast a third the size)."""
    data, _ = digits
    default = _averaging_fit(sc, data)
    kept = _averaging_fit(sc, data, save_updater=True)
    restarted = _averaging_fit(sc, data, save_updater=False)
    p = default.network.num_params
    assert default.training_master.save_updater is True
    assert {r["broadcast_bytes"] for r in default.get_training_stats().rounds} == {3 * 4 * p}
    assert {r["broadcast_bytes"] for r in restarted.get_training_stats().rounds} == {4 * p}
    np.testing.assert_array_equal(default.network.params().numpy(), kept.network.params().numpy())
    assert not np.array_equal(default.network.params().numpy(), restarted.network.params().numpy())


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (
            ParameterAveragingTrainingMaster,
            {
                "batch_size_per_worker": 16,
                "averaging_frequency": 5,
                "save_updater": True,
                "num_workers": None,
                "resolved_num_workers": None,
                "worker_prefetch_num_batches": 0,
                "aggregation_depth": 2,
                "collect_training_stats": False,
            },
        ),
        (
            SharedTrainingMaster,
            {
                "batch_size_per_worker": 16,
                "num_workers": None,
                "resolved_num_workers": None,
                "worker_prefetch_num_batches": 2,
                "aggregation_depth": 2,
                "collect_training_stats": False,
                "batches_per_round": 5,
                "threshold": {  # DL4J's initial threshold; dense (2-bit) messages within the band
                    "initial_threshold": 1e-3,
                    "min_target_sparsity": 1e-4,
                    "max_target_sparsity": 1 / 16,
                    "decay_rate": 0.5 ** (1 / 20),
                },
                "average_updates": True,  # the round moves by the workers' mean update, as averaging does
                "keep_state_on_driver": False,  # residuals and Adam moments stay on the executors
                "threshold_update_multiple": 1.0,  # each step's threshold >= its largest update entry
            },
        ),
    ],
)
def test_every_masters_defaults(cls, expected):
    tm = cls()
    assert {key: getattr(tm, key) for key in expected} == expected
    assert (tm.repartition.value, tm.rdd_training_approach.value) == ("ALWAYS", "EXPORT")


@pytest.mark.parametrize("cls", MASTERS)
def test_num_workers_none_is_fixed_at_the_first_fit_and_said_in_the_stats(sc, digits, cls):
    data, _ = digits
    options = {"initial_threshold": 1e-3} if cls is SharedTrainingMaster else {}
    tm = cls(20, 2, collect_training_stats=True, **options)
    spark = SparkNetwork(sc, mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=0), tm)
    spark.fit(to_rdd(sc, data), epochs=1)
    setup = spark.get_training_stats().setup
    assert tm.resolved_num_workers == sc.defaultParallelism == setup["workers"]
    assert setup["num_workers_from"] == (
        f"num_workers=None: the context's defaultParallelism ({sc.defaultParallelism}) at the first fit"
    )
    assert setup["task_slots"] == 2  # local[2]
    # a context whose parallelism changed later (executors joined) does not change this master's workers
    assert tm.workers_for(types.SimpleNamespace(defaultParallelism=7)) == sc.defaultParallelism
    assert cls(num_workers=3).workers_for(types.SimpleNamespace(defaultParallelism=7)) == 3


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
