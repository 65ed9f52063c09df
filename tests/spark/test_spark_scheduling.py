"""How a round's job is scheduled (issue 21 item 5): Spark's barrier execution (every worker's
task started together) trains the same parameters as ordinary tasks, and a barrier job that
cannot fit the cluster is refused at the call; GPU resources (`gpus_per_task`) are checked at
the call, and where Spark cannot schedule GPUs (local mode, this machine) it says so."""

import math

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240])


def _fit(sc, digits, cls, approach, barrier, epochs=1):
    net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=0)
    options = {"save_updater": True} if cls is ParameterAveragingTrainingMaster else {"initial_threshold": 1e-3}
    tm = cls(20, 2, num_workers=2, rdd_training_approach=approach, barrier=barrier, **options)
    spark = SparkNetwork(sc, net, tm)
    spark.fit(to_rdd(sc, digits, num_slices=3), epochs=epochs)
    return net


@pytest.mark.parametrize(
    ("cls", "approach"),
    [
        (ParameterAveragingTrainingMaster, "DIRECT"),
        pytest.param(ParameterAveragingTrainingMaster, "EXPORT", marks=pytest.mark.slow),  # `-m slow` (CI)
        (SharedTrainingMaster, "DIRECT"),
    ],
)
def test_a_barrier_fit_trains_the_same_parameters_as_ordinary_tasks(sc, digits, cls, approach):
    barrier = _fit(sc, digits, cls, approach, True)
    plain = _fit(sc, digits, cls, approach, False)
    for key, value in barrier.state_arrays().items():
        assert np.array_equal(value.numpy(), plain.state_arrays()[key].numpy()), key
    assert barrier.iteration == plain.iteration == 6


def test_a_barrier_round_runs_in_a_barrier_stage(sc, digits):
    """The round's tasks see a BarrierTaskContext (Spark's barrier execution), not a plain one."""
    from kit.spark.masters import Prepared

    tm = ParameterAveragingTrainingMaster(20, 2, num_workers=2, rdd_training_approach="DIRECT", barrier=True)
    data = Prepared(None, 2, 1, 20, paths={(0, 0): "w0.npz", (1, 0): "w1.npz"})

    def kind(partition, it):
        from pyspark import BarrierTaskContext, TaskContext

        list(it)
        yield partition, type(TaskContext.get()).__name__, isinstance(TaskContext.get(), BarrierTaskContext)

    seen = sorted(tm._job(sc, data, 0, kind).collect())
    assert seen == [(0, "BarrierTaskContext", True), (1, "BarrierTaskContext", True)]


@pytest.mark.parametrize("repartition", ["ALWAYS", "NEVER"])
def test_more_barrier_workers_than_task_slots_is_refused_at_the_call(sc, digits, repartition):
    """local[2] runs 2 tasks at once; a barrier job of 3 would wait for slots that never come."""
    net = mlp(64, hidden=(16,), n_out=10, seed=0)
    before = net.params().numpy().copy()
    workers = {"num_workers": 3} if repartition == "ALWAYS" else {}
    tm = ParameterAveragingTrainingMaster(20, 2, repartition=repartition, barrier=True, **workers)
    rdd = to_rdd(sc, digits, num_slices=3)  # NEVER: each of the 3 partitions is a worker
    with pytest.raises(ValueError, match=r"barrier=True\): 3 workers need 3 tasks running at once, .* 2 task slot"):
        SparkNetwork(sc, net, tm).fit(rdd)
    np.testing.assert_array_equal(net.params().numpy(), before)


def test_barrier_must_be_a_bool():
    for cls in (ParameterAveragingTrainingMaster, SharedTrainingMaster):
        with pytest.raises(ValueError, match=rf"{cls.__name__}\(barrier='yes'\): must be True or False"):
            cls(barrier="yes")
        assert cls(barrier=True).barrier is True and cls().barrier is False


@pytest.mark.parametrize("value", [0, -1, 0.7, 1.5, "1", True, math.nan, math.inf])
def test_bad_gpus_per_task_is_refused_at_the_call(value):
    for cls in (ParameterAveragingTrainingMaster, SharedTrainingMaster):
        with pytest.raises(ValueError, match=r"gpus_per_task=.*\): GPUs each task needs, a whole number >= 1"):
            cls(gpus_per_task=value)


def test_good_gpus_per_task_are_kept():
    assert [ParameterAveragingTrainingMaster(gpus_per_task=v).gpus_per_task for v in (None, 1, 2, 0.5, 0.25)] == [
        None,
        1,
        2,
        0.5,
        0.25,
    ]


def test_gpus_per_task_on_local_spark_is_refused_at_the_call(sc, digits):
    """Spark's local mode cannot schedule GPU resources: the fit says so before any job runs."""
    net = mlp(64, hidden=(16,), n_out=10, seed=0)
    before = net.params().numpy().copy()
    tm = SharedTrainingMaster(20, 2, num_workers=2, gpus_per_task=1)
    with pytest.raises(ValueError, match=r"gpus_per_task=1\): Spark's local mode \(local\[2\]\) cannot schedule GPU"):
        SparkNetwork(sc, net, tm).fit(to_rdd(sc, digits))
    np.testing.assert_array_equal(net.params().numpy(), before)


def test_an_executor_given_no_gpu_says_so():
    """What a task does with `TaskContext.get().resources()` (Spark's own ResourceInformation):
    no GPU address, or an address but no GPU kit can use here, each said in words."""
    from pyspark.resource import ResourceInformation

    from kit.core.devices import gpu_count
    from kit.spark.executor import task_device

    with pytest.raises(RuntimeError, match=r"Spark gave this task no GPU address: the executors declare no 'gpu'"):
        task_device({})
    with pytest.raises(RuntimeError, match=r"no GPU address"):
        task_device({"gpu": ResourceInformation("gpu", [])})
    given = {"gpu": ResourceInformation("gpu", ["0"])}
    if gpu_count() == 0:
        with pytest.raises(RuntimeError, match=r"Spark gave this task GPU 0 but kit sees no GPU on this executor"):
            task_device(given)
    else:
        assert task_device(given).name == "gpu:0"
