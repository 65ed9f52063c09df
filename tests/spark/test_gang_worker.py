"""kit.spark.gang_worker: one worker of a gang, training for the whole fit inside one barrier
stage. Exchanging gradients every step (DDP's semantics), two workers train as one process on the
concatenated global batch, within float32 tolerance; a worker whose process dies fails the fit,
bounded, the network untouched, and the next gang in the same context trains. Real Spark local[2],
real gloo where torch imports. (The gang's decision and its averaging exchange: test_spark_gang.py.)"""

import numpy as np
import pytest
from _gang import COLLECTIVES, PER_WORKER, _fit, _net

from kit.data import ArrayIterator
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, SparkTrainingError


@pytest.mark.slow
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_gang_all_reducing_gradients_trains_as_one_process_on_the_global_batch(sc, rdd, data, collective):
    """DDP's semantics: worker w's step k is mini-batch 2k + w, so the global step k is examples
    [32k, 32k + 32) in order: Network.fit with batches of 32 on the same data."""
    gang = _fit(sc, rdd, epochs=2, freq=1, exchange="gradients", execution="gang", collective=collective)
    one = _net()
    one.fit(ArrayIterator(data, 2 * PER_WORKER), epochs=2)
    assert gang.get_training_stats().setup["gang"]["syncs"] == 2 * len(data.features.numpy()) // (2 * PER_WORKER)
    np.testing.assert_allclose(gang.network.params().numpy(), one.params().numpy(), rtol=2e-4, atol=2e-5)
    assert gang.network.iteration == one.iteration == 2 * 128 // (2 * PER_WORKER)
    before = _net().params().numpy()
    assert np.abs(gang.network.params().numpy() - before).max() > 100 * 2e-5  # it trained: the tolerance is small


@pytest.mark.slow
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_worker_that_dies_fails_the_fit_and_the_next_gang_trains(sc, rdd, collective):
    """Worker 1's process exits at its third step (os._exit, as a lost executor's would): worker 0,
    waiting on it in the collective, must not hang; the fit raises and the network is untouched."""
    tm = ParameterAveragingTrainingMaster(
        PER_WORKER, 1, num_workers=2, exchange="gradients", execution="gang", collective=collective, round_timeout=30.0
    )
    tm.gang_fault = (1, 2)
    spark = SparkNetwork(sc, _net(), tm)
    before = spark.network.params().numpy().copy()
    with pytest.raises(SparkTrainingError):
        spark.fit(rdd)
    np.testing.assert_array_equal(spark.network.params().numpy(), before)
    tm.gang_fault = None  # the same context, a new gang: no process group left behind
    spark.fit(rdd)
    assert spark.get_training_stats() is None and not np.array_equal(spark.network.params().numpy(), before)
