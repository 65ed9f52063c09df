"""kit.spark on real Spark (local[2]): evaluation, failures, memory, stats, DataFrames (the averaging
master's equivalences to Network.fit and ParallelWrapper are in test_averaging_master.py)."""

import json
import os
import time

import numpy as np
import pytest

from kit import readings
from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Sgd, mlp
from kit.nn.evaluation import ROC, Evaluation
from kit.spark import (
    ParameterAveragingTrainingMaster,
    SharedTrainingMaster,
    SparkNetwork,
    SparkTrainingError,
    SparkTrainingStats,
    SparkUnavailableError,
    export_stats_html,
    local_spark_context,
    to_rdd,
)


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    n = 240
    return DataSet(train.features.numpy()[:n], train.labels.numpy()[:n]), test


def test_distributed_evaluation_equals_local(sc, digits):
    _, test = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=3)
    net.fit(ArrayIterator(test, 50), epochs=1)
    spark_net = SparkNetwork(sc, net, ParameterAveragingTrainingMaster())
    rdd = to_rdd(sc, test, examples_per_element=7, num_slices=5)
    ev, roc = spark_net.do_evaluation(rdd, Evaluation(10), ROC(), batch_size=32)
    local_ev, local_roc = net.do_evaluation(ArrayIterator(test, 64), Evaluation(10), ROC())
    np.testing.assert_array_equal(ev.confusion, local_ev.confusion)
    assert ev.n == test.num_examples
    assert roc.calculate_average_auc() == pytest.approx(local_roc.calculate_average_auc(), abs=1e-12)
    assert spark_net.score(rdd) == pytest.approx(net.score(test), rel=1e-5)


def _bad_rdd(sc, data, bad):
    x, y = data.features.numpy().copy(), data.labels.numpy().argmax(axis=1).copy()
    if bad == "label":
        y[130] = 17
    else:
        x[130, 5] = np.nan
    pairs = [(x[i : i + 1], y[i : i + 1]) for i in range(x.shape[0])]
    return sc.parallelize(pairs, 2)


@pytest.mark.parametrize("bad", ["label", "nan"])
def test_failing_partition_is_named_and_no_job_left(sc, digits, bad):
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    before = net.params().numpy()
    # NEVER: partitions are the workers, element 130 is in partition 1 (120 per partition)
    tm = ParameterAveragingTrainingMaster(20, 1, repartition="NEVER", rdd_training_approach="DIRECT")
    with pytest.raises(SparkTrainingError, match=r"partition 1 \(element 10, prepare\)") as info:
        SparkNetwork(sc, net, tm).fit(_bad_rdd(sc, data, bad))
    text = str(info.value)
    assert ("out of range" in text) if bad == "label" else ("NaN" in text)
    deadline = time.monotonic() + 10
    while sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sc.statusTracker().getActiveJobsIds() == []
    assert sc.parallelize([1, 2], 2).sum() == 3  # the context still works
    np.testing.assert_array_equal(net.params().numpy(), before)  # no half-averaged round


@pytest.mark.slow  # many whole fits
def test_repeated_fits_do_not_grow_driver_memory(sc, digits):
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    rdd = to_rdd(sc, data)
    tm = ParameterAveragingTrainingMaster(
        40, 2, rdd_training_approach="DIRECT", collect_training_stats=True, execution="rounds"
    )
    spark_net = SparkNetwork(sc, net, tm)
    for _ in range(2):
        spark_net.fit(rdd)
    base = readings.rss_bytes()
    for _ in range(6):
        spark_net.fit(rdd)
    assert readings.rss_bytes() - base < 60 * 2**20
    assert len(spark_net.get_training_stats().rounds) == 2  # stats are per fit, not accumulated


def test_stats_json_and_html(sc, digits, tmp_path):
    """The per-round path's stats (pinned: execution="rounds"; the gang's are test_gang_stats_json_and_html's)."""
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    tm = ParameterAveragingTrainingMaster(20, 2, collect_training_stats=True, execution="rounds")
    spark_net = SparkNetwork(sc, net, tm)
    spark_net.fit(to_rdd(sc, data))
    stats = spark_net.get_training_stats()
    assert stats.setup["execution"] == "rounds" and stats.setup["rounds_because"] == "execution='rounds'"
    assert [r["round"] for r in stats.rounds] == [0, 1, 2]
    assert {w["worker"] for w in stats.workers} == {0, 1}
    trained = [w for w in stats.workers if w["examples"]]
    assert sum(w["examples"] for w in trained) == 240
    assert all(w["fit_ms"] > 0 and w["peak_workspace_bytes"] > 0 for w in trained)  # SEPARATE workspaces
    assert all(w["heap_allocations"] >= 0 and w["pid"] > 0 for w in trained)
    summary = stats.summary()
    assert {"broadcast_ms", "job_ms", "aggregate_ms", "worker_fit_ms", "worker_load_ms"} <= set(summary)
    again = SparkTrainingStats.from_json(stats.to_json())
    assert again.rounds == json.loads(stats.to_json())["rounds"]
    path = tmp_path / "stats.html"
    export_stats_html(stats, path)
    page = path.read_text()
    assert "<svg" in page and "worker 1" in page and "fit_ms" in page and "<script" not in page


def test_gang_stats_json_and_html(sc, digits, tmp_path):
    """A gang's stats name the execution that ran, and save and export as the rounds' do."""
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    tm = ParameterAveragingTrainingMaster(20, 2, collect_training_stats=True, execution="gang")
    spark_net = SparkNetwork(sc, net, tm)
    spark_net.fit(to_rdd(sc, data))
    stats = spark_net.get_training_stats()
    assert stats.setup["execution"] == "gang" and stats.setup["gang"]["workers"] == 2, stats.setup
    assert stats.rounds == [] and {w["worker"] for w in stats.workers} == {0, 1}
    assert sum(w["examples"] for w in stats.workers) == 240 and all(w["steps"] > 0 for w in stats.workers)
    again = SparkTrainingStats.from_json(stats.to_json())
    assert again.setup["execution"] == "gang" and again.workers == json.loads(stats.to_json())["workers"]
    path = tmp_path / "stats.html"
    export_stats_html(stats, path)
    assert "&quot;execution&quot;: &quot;gang&quot;" in path.read_text()


def test_shared_training_master_learns_and_reports_encoding(sc, digits):
    data, test = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.2), seed=0)
    before = net.score(test)
    tm = SharedTrainingMaster(20, 2, num_workers=2, collect_training_stats=True, initial_threshold=1e-3)
    spark_net = SparkNetwork(sc, net, tm)
    spark_net.fit(to_rdd(sc, data), epochs=3)
    assert net.score(test) < 0.9 * before
    workers = [w for w in spark_net.get_training_stats().workers if w["examples"]]
    assert {w["worker"] for w in workers} == {0, 1}
    assert all(0 < w["sparsity"] < 1 and w["tau"] > 0 for w in workers)
    # the residual, updater state and threshold stay with each worker: its executor keeps them between rounds
    assert all(w["state_from"].startswith("executor (round ") for w in workers if w["round"] > 0)


@pytest.mark.slow  # whole fits; tests/spark/test_rdd_data.py holds the layouts in the fast run
def test_dataframe_input(sc, digits):
    from pyspark.sql import SparkSession

    data, _ = digits
    spark = SparkSession(sc)
    x, y = data.features.numpy(), data.labels.numpy().argmax(axis=1)
    df = spark.createDataFrame([(x[i].tolist(), int(y[i])) for i in range(x.shape[0])], ["features", "label"])
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT")
    SparkNetwork(sc, net, tm).fit(df.coalesce(1))
    ref.fit(ArrayIterator(data, 20))
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)


def test_clear_error_when_java_is_missing(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jre")
    with pytest.raises(SparkUnavailableError, match=r"Java 17.*JAVA_HOME=/nonexistent/jre"):
        local_spark_context()


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="averaging_frequency=0"):
        ParameterAveragingTrainingMaster(averaging_frequency=0)
    with pytest.raises(ValueError, match="batch_size_per_worker=0"):
        ParameterAveragingTrainingMaster(0)
    with pytest.raises(ValueError, match="SOMETIMES"):
        ParameterAveragingTrainingMaster(repartition="SOMETIMES")
    assert os.environ  # the monkeypatched JAVA_HOME above did not leak
