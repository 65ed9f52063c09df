"""Mixed precision on Spark (issue 26): the float32 master weights cross the wire (not the float16
copies), each executor skips its own overflowing steps, and the network ends each round with one
loss-scaler state. Before, SparkNetwork refused every mixed-precision network."""

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Adam, mlp
from kit.nn.mixed import LossScaler
from kit.parallel import ParallelWrapper
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, to_rdd

# 2**24 overflows float16 in the first steps (the loss's gradient times the scale passes 65504),
# so every run below skips steps and backs off; growth_interval 3 makes the scale grow again
START, GROWTH = 2.0**24, 3


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240]), test


def _net(dtype="float16", seed=0, scale=START):
    mixed = {"master_dtype": "float32", "loss_scale": LossScaler(scale, growth_interval=GROWTH)}
    return mlp(
        64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=seed, dtype=dtype, **(mixed if dtype == "float16" else {})
    )


def _state(net):
    return {k: v.numpy().copy() for k, v in net.state_arrays().items()}


def _assert_copy_written_from_master(net):
    np.testing.assert_array_equal(net.flat_params.numpy(), net.flat_master.numpy().astype(np.float16))


@pytest.mark.parametrize("approach", ["DIRECT", "EXPORT"])
def test_one_worker_equals_network_fit_bit_for_bit_skipped_steps_included(sc, digits, approach):
    data, _ = digits
    net, ref = _net(), _net()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach=approach, save_updater=True)
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, data), epochs=2)
    ref.fit(ArrayIterator(data, 20), epochs=2)
    mine, theirs = _state(net), _state(ref)
    assert sorted(mine) == ["master", "params", "updater_m", "updater_v"]
    for key in mine:
        assert np.array_equal(mine[key], theirs[key]), key
    assert net.flat_master.dtype == np.float32 and net.flat_params.dtype == np.float16
    np.testing.assert_array_equal(net.loss_scaler.state(), ref.loss_scaler.state())
    assert net.loss_scaler.skipped_steps > 0 and net.loss_scaler.scale != START  # the scaler did work
    assert (net.iteration, net.epoch) == (ref.iteration, ref.epoch) == (24, 2)
    _assert_copy_written_from_master(net)


@pytest.mark.parametrize("frequency", [1, 3])
def test_two_workers_average_master_weights_and_scalers_as_parallel_wrapper_does(sc, digits, frequency):
    data, _ = digits
    net, ref = _net(), _net()
    tm = ParameterAveragingTrainingMaster(
        20, frequency, num_workers=2, rdd_training_approach="DIRECT", save_updater=True
    )
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, data, num_slices=3))
    with ParallelWrapper(ref, workers=2, prefetch_buffer=0, averaging_frequency=frequency) as pw:
        pw.fit(ArrayIterator(data, 20))
    # the master weights were averaged in float64 (Spark) and float32 (the wrapper): equal to float32's precision
    np.testing.assert_allclose(net.flat_master.numpy(), ref.flat_master.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(net.loss_scaler.state(), ref.loss_scaler.state())
    assert net.loss_scaler.skipped_steps > 0
    _assert_copy_written_from_master(net)
    # averaging float16 copies instead would have lost the updates smaller than a float16 spacing
    assert not np.array_equal(net.flat_master.numpy(), net.flat_params.numpy().astype(np.float32))


def test_shared_training_keeps_a_scaler_per_worker_and_learns(sc, digits):
    data, test = digits
    results = {}
    for dtype in ("float32", "float16"):
        net = _net(dtype, scale=2.0**20)
        tm = SharedTrainingMaster(20, 3, num_workers=2, initial_threshold=1e-3)
        spark = SparkNetwork(sc, net, tm)
        spark.fit(to_rdd(sc, data), epochs=4)
        results[dtype] = (net, spark, net.evaluate(ArrayIterator(test, 128)).accuracy())
    net, spark, accuracy = results["float16"]
    states = spark.shared_worker_states
    assert sorted(states) == [0, 1]
    assert all(len(states[w]["scaler"]) == 3 for w in states)
    assert all(states[w]["scaler"][1] > 0 for w in states)  # each worker skipped its own overflowing steps
    np.testing.assert_array_equal(net.loss_scaler.state(), states[0]["scaler"])  # the network takes worker 0's
    _assert_copy_written_from_master(net)
    # the steps the scaler skips cost mixed precision the same on Spark as in one process (24 steps,
    # 5 skipped: 0.07 there); since each step's threshold is at least its largest update entry, shared
    # training learns fast enough on 240 examples (float32: 0.81 after 4 epochs) for that to show
    assert accuracy > 0.3, accuracy
    alone = {}
    for dtype in ("float32", "float16"):
        single = _net(dtype, scale=2.0**20)
        single.fit(ArrayIterator(data, 40), epochs=4)
        alone[dtype] = single.evaluate(ArrayIterator(test, 128)).accuracy()
    cost, cost_alone = results["float32"][2] - accuracy, alone["float32"] - alone["float16"]
    assert abs(cost - cost_alone) <= 0.05, (cost, cost_alone)


def test_a_checkpoint_keeps_the_loss_scale_and_resumes_bit_for_bit(sc, digits, tmp_path):
    """One epoch with checkpoints, then the same fit asked for two and resumed, equals two epochs
    in one go: the scale and its clean-step count came back with the master weights."""
    data, _ = digits

    def master(**kw):
        return ParameterAveragingTrainingMaster(20, 2, num_workers=2, save_updater=True, **kw)

    directory = str(tmp_path / "checkpoints")
    SparkNetwork(sc, _net(), master(checkpoint_every=1, checkpoint_directory=directory)).fit(to_rdd(sc, data))
    resumed = _net()
    SparkNetwork(sc, resumed, master(checkpoint_every=1, checkpoint_directory=directory)).fit(
        to_rdd(sc, data), epochs=2, resume=True
    )
    ref = _net()
    SparkNetwork(sc, ref, master()).fit(to_rdd(sc, data), epochs=2)
    mine, theirs = _state(resumed), _state(ref)
    for key in mine:
        assert np.array_equal(mine[key], theirs[key]), key
    np.testing.assert_array_equal(resumed.loss_scaler.state(), ref.loss_scaler.state())
    assert ref.loss_scaler.skipped_steps > 0
