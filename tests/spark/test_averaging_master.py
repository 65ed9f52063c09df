"""kit.spark.averaging_master: ParameterAveragingTrainingMaster's round, the mean of the workers'
states. One worker at frequency 1 is Network.fit; two are ParallelWrapper's averaging; the default
keeps the updater's state across averagings (save_updater=True) and False restarts it."""

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Adam, mlp
from kit.parallel import ParallelWrapper
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    n = 240
    return DataSet(train.features.numpy()[:n], train.labels.numpy()[:n]), test


class Recorder:
    def __init__(self):
        self.calls = []

    def on_epoch_start(self, model, epoch):
        self.calls.append(("start", epoch))

    def iteration_done(self, model, iteration, epoch, **info):
        self.calls.append(("iter", iteration, epoch, info.get("batch_size")))

    def on_epoch_end(self, model, epoch):
        self.calls.append(("end", epoch))


@pytest.mark.slow
@pytest.mark.parametrize("approach", ["DIRECT", "EXPORT"])
def test_one_worker_frequency_1_equals_network_fit(sc, digits, approach):
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach=approach, save_updater=True)
    spark_rec, local_rec = Recorder(), Recorder()
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, data), epochs=2, listeners=[spark_rec])
    ref.fit(ArrayIterator(data, 20), epochs=2, listeners=[local_rec])
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)
    for key in ("updater_m", "updater_v"):
        np.testing.assert_allclose(net.state_arrays()[key].numpy(), ref.state_arrays()[key].numpy(), atol=1e-6)
    assert spark_rec.calls == local_rec.calls  # DL4J numbering: same iterations, epochs, sizes
    assert (net.iteration, net.epoch) == (ref.iteration, ref.epoch) == (24, 2)


@pytest.mark.parametrize("frequency", [1, 3])
def test_two_workers_equal_parallel_wrapper_averaging(sc, digits, frequency):
    data, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(
        20, frequency, num_workers=2, rdd_training_approach="DIRECT", save_updater=True
    )
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, data, num_slices=3))
    with ParallelWrapper(ref, workers=2, prefetch_buffer=0, averaging_frequency=frequency) as pw:
        pw.fit(ArrayIterator(data, 20))
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(net.params().numpy(), mlp(64, hidden=(32,), n_out=10, seed=0).params().numpy())


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
