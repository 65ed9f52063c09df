"""kit.spark.training_master: what both masters share. The number of workers is read once, at a
master's first fit, and said in the stats; a round whose loss or state is not finite is not
applied, and the error names the round, the epoch and the worker; a master's signature is its
options' fields; a state's parts are cut at the network's own array sizes."""

import inspect
import math
import types

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.nn.loop import NonFiniteScoreError
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, executor, to_rdd
from kit.spark.training_master import TrainingMaster, round_diverged, timing_sizes
from kit.spark.wire import RoundResult, WorkerStats

MASTERS = (ParameterAveragingTrainingMaster, SharedTrainingMaster)


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240]), test


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


def _result(worker, scores, finite=True):
    return RoundResult(worker=worker, round=7, stats=WorkerStats(worker, 7, pid=1), scores=scores, finite=finite)


@pytest.mark.parametrize(
    ("scores", "finite", "diverged"),
    [
        ([[0.5, 0.25], [0.75]], [True, True], False),
        ([[0.5, math.nan], [0.75]], [True, True], True),  # a NaN loss: not applied, the loop names the worker
        ([[0.5], [math.inf]], [True, True], True),
        ([[0.5], [-math.inf]], [True, False], True),  # the loss decides first: not applied, no second error
        ([[], []], [True, True], False),  # workers without data this round
    ],
    ids=["finite", "nan-loss", "inf-loss", "loss-before-state", "no-steps"],
)
def test_a_round_with_a_loss_that_is_not_finite_is_not_applied(scores, finite, diverged):
    results = [_result(w, s, f) for w, (s, f) in enumerate(zip(scores, finite))]
    assert round_diverged(results, 7, types.SimpleNamespace(epoch=4)) is diverged


def test_a_state_that_is_not_finite_after_finite_losses_is_refused_naming_round_epoch_and_worker():
    results = [_result(0, [0.5]), _result(1, [0.25], finite=False)]
    said = r"^Spark round 7 \(epoch 4\), worker 1: its parameters are no longer finite after finite losses"
    with pytest.raises(NonFiniteScoreError, match=said):
        round_diverged(results, 7, types.SimpleNamespace(epoch=4))


@pytest.mark.parametrize(("hidden", "n_params"), [((16,), 64 * 16 + 16 + 16 * 10 + 10), ((), 64 * 10 + 10)])
def test_a_state_is_cut_at_the_networks_own_array_sizes(hidden, n_params):
    net = mlp(64, hidden=hidden, n_out=10, updater=Adam(1e-2), seed=0)
    assert timing_sizes(net, ("params",)) == (n_params,)
    assert timing_sizes(net, executor.state_keys(net)) == (n_params, n_params, n_params)  # Adam's m and v


@pytest.mark.parametrize("cls", MASTERS)
def test_a_master_is_a_training_master_and_says_where_its_workers_came_from(cls):
    assert issubclass(cls, TrainingMaster) and "batch_size_per_worker" in inspect.signature(cls).parameters
    assert cls(num_workers=3).workers_source() == "num_workers=3"
    tm = cls()
    assert tm.workers_for(types.SimpleNamespace(defaultParallelism=5)) == 5 == tm.resolved_num_workers
    assert tm.workers_source() == "num_workers=None: the context's defaultParallelism (5) at the first fit"
    assert np.isfinite(tm.round_timeout)
