"""kit.spark keeps the network's whole training state between fits (issue 21 items 3 and 4)."""

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240])


class Numbers:
    def __init__(self):
        self.iterations = []

    def iteration_done(self, model, iteration, epoch, **info):
        self.iterations.append((iteration, epoch))


@pytest.mark.parametrize(  # the fast default runs the first; `-m slow` (CI) the rest
    "between",
    ["fit", pytest.param("fit_batch", marks=pytest.mark.slow), pytest.param("copy_state_from", marks=pytest.mark.slow)],
)
def test_training_on_the_network_between_two_spark_fits_is_carried_on(sc, digits, between):
    """Item 4: the executors started the second Spark fit from the iteration count of the first
    (Adam's bias correction wrong) and the network's counters went back. One worker, frequency 1,
    save_updater: Spark fit, local work, Spark fit equals the same three on one Network. Six rounds a
    fit (120 examples): every round is a Spark job, and the counters carry on after any number."""
    digits = DataSet(digits.features.numpy()[:120], digits.labels.numpy()[:120])
    net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT", save_updater=True)
    spark = SparkNetwork(sc, net, tm)
    spark.fit(to_rdd(sc, digits))
    ref.fit(ArrayIterator(digits, 20))
    local = DataSet(digits.features.numpy()[:60], digits.labels.numpy()[:60])
    if between == "fit":
        net.fit(ArrayIterator(local, 20))
        ref.fit(ArrayIterator(local, 20))
    elif between == "fit_batch":
        net.fit_batch(local)
        ref.fit_batch(local)
    else:  # a state trained elsewhere, copied in (iteration 7 of another run)
        other = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=3)
        other.fit(ArrayIterator(local, 20), epochs=2)
        other.fit_batch(local)
        net.copy_state_from(other)
        ref.copy_state_from(other)
    spark_numbers, local_numbers = Numbers(), Numbers()
    spark.fit(to_rdd(sc, digits), listeners=[spark_numbers])
    ref.fit(ArrayIterator(digits, 20), listeners=[local_numbers])
    assert (net.iteration, net.epoch) == (ref.iteration, ref.epoch)
    assert spark_numbers.iterations == local_numbers.iterations
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)
    for key in ("updater_m", "updater_v"):
        np.testing.assert_allclose(net.state_arrays()[key].numpy(), ref.state_arrays()[key].numpy(), atol=1e-6)


def _shared(sc, data, epochs, fits, workers=2, rdd=None, local_fit=False):
    from kit.spark import SharedTrainingMaster

    net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
    tm = SharedTrainingMaster(20, 3, num_workers=workers, collect_training_stats=True, initial_threshold=1e-3)
    spark = SparkNetwork(sc, net, tm)
    for _ in range(fits):
        spark.fit(rdd if rdd is not None else to_rdd(sc, data), epochs=epochs)
    return net, spark


def test_shared_training_keeps_each_workers_state_across_epochs_and_fits(sc, digits):
    """Item 3: the residual, Adam moments and threshold of each worker restarted at every epoch
    boundary and every fit. With the state kept, 2 epochs over the data equal 1 epoch over the
    data twice in a row (the same mini-batches reach the same workers in the same order), and so
    do 2 fits of one epoch."""
    doubled = DataSet(np.concatenate([digits.features.numpy()] * 2), np.concatenate([digits.labels.numpy()] * 2))
    one_long, _ = _shared(sc, None, 1, 1, rdd=to_rdd(sc, doubled))
    two_epochs, spark = _shared(sc, digits, 2, 1)
    two_fits, _ = _shared(sc, digits, 1, 2)
    reference = one_long.params().numpy()
    np.testing.assert_allclose(two_epochs.params().numpy(), reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(two_fits.params().numpy(), reference, rtol=1e-5, atol=1e-6)
    assert two_epochs.iteration == two_fits.iteration == one_long.iteration
    # the numbers say so too: in epoch 2, every worker goes on from its own earlier rounds
    workers = [w for w in spark.get_training_stats().workers if w["examples"]]
    second = [w["state_from"] for w in workers if w["epoch"] == 1]
    # (from the executor that keeps it: kit.spark.worker_store)
    assert second and all(s.startswith("executor (round ") and not s.startswith("executor (round 0") for s in second)


def test_the_networks_updater_state_after_shared_training_is_a_workers(sc, digits):
    """Item 3: the driver's updater state was never updated (Adam's moments stayed 0), so a save
    after Spark training, or a local fit after it, started Adam again."""
    net, spark = _shared(sc, digits, 1, 1, workers=1)
    state = spark.shared_worker_states[0]
    for key in ("updater_m", "updater_v"):
        value = net.state_arrays()[key].numpy()
        assert np.abs(value).max() > 0
        np.testing.assert_array_equal(value, state["updater"][key])


@pytest.mark.parametrize(
    ("updater", "save_updater", "equal"),
    [  # the fast default runs sgd; `-m slow` (CI) the rest
        pytest.param("adam", True, True, marks=pytest.mark.slow),
        ("sgd", False, True),
        pytest.param("adam", False, False, marks=pytest.mark.slow),
    ],
)
def test_one_worker_equals_network_fit_exactly_when_the_docstring_says(sc, digits, updater, save_updater, equal):
    """Item 17: kit.spark's docstring said one worker at frequency 1 equals Network.fit, which
    holds only with save_updater=True or a stateless updater; it now says so, and this checks
    each case in both directions."""
    from kit.nn import Sgd

    digits = DataSet(digits.features.numpy()[:60], digits.labels.numpy()[:60])  # 3 rounds an epoch: 6 in all
    make = (lambda: Adam(1e-2)) if updater == "adam" else (lambda: Sgd(0.1))
    net = mlp(64, hidden=(32,), n_out=10, updater=make(), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(
        20, 1, num_workers=1, rdd_training_approach="DIRECT", save_updater=save_updater
    )
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, digits), epochs=2)
    ref.fit(ArrayIterator(digits, 20), epochs=2)
    same = np.allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)
    assert same is equal


@pytest.mark.parametrize(("frequency", "equal"), [(3, True), (4, False)])
def test_spark_and_parallel_wrapper_share_mini_batches_after_epoch_one_only_as_documented(sc, digits, frequency, equal):
    """Item 17: 240 examples in mini-batches of 20 give each of 2 workers 6 per epoch. With
    frequency 3 (6 is a multiple) two epochs equal ParallelWrapper's; with 4, Spark's epoch 2
    starts a new round where ParallelWrapper's period runs on, and the two part."""
    from kit.parallel import ParallelWrapper

    net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(
        20, frequency, num_workers=2, rdd_training_approach="DIRECT", save_updater=True
    )
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, digits, num_slices=3), epochs=2)
    with ParallelWrapper(ref, workers=2, prefetch_buffer=0, averaging_frequency=frequency) as pw:
        pw.fit(ArrayIterator(digits, 20), epochs=2)
    same = np.allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-4, atol=1e-5)
    assert same is equal


_BAD_ARGUMENTS = [
    ("both", "batch_size_per_worker", 0),
    ("both", "batch_size_per_worker", 2.5),
    ("both", "num_workers", 0),
    ("both", "num_workers", True),
    ("both", "rdd_data_set_num_examples", 0),
    ("both", "worker_prefetch_num_batches", -1),
    ("both", "repartition", "SOMETIMES"),
    ("both", "rdd_training_approach", "SHARED_DISK"),
    ("both", "export_directory", "/proc/kit-export"),  # cannot be made, even by root (a missing one is made)
    ("both", "collect_training_stats", "yes"),
    ("both", "worker_workspace_mode", "HALF"),
    ("both", "worker_periodic_gc", 1),
    ("both", "worker_gc_window_ms", -5),
    ("both", "round_timeout", 0),
    ("both", "round_timeout", -1.0),
    ("both", "round_timeout", float("nan")),
    ("both", "round_timeout", float("inf")),
    ("both", "round_timeout", "60"),
    ("both", "aggregation_depth", 0),
    ("both", "aggregation_depth", 2.0),
    ("averaging", "averaging_frequency", 0),
    ("averaging", "averaging_frequency", True),
    ("averaging", "save_updater", "no"),
    ("shared", "batches_per_round", 0),
    ("shared", "initial_threshold", 0),
    ("shared", "initial_threshold", float("nan")),
    ("shared", "initial_threshold", float("inf")),
    ("shared", "initial_threshold", -1e-3),
    ("shared", "initial_threshold", "1e-3"),
    ("shared", "min_target_sparsity", 0.5),  # above the default maximum 1e-2
    ("shared", "max_target_sparsity", 2.0),
    ("shared", "decay_rate", 1),
    ("shared", "decay_rate", 0.1),
    ("shared", "decay_rate", float("nan")),
]


@pytest.mark.parametrize(("which", "name", "value"), _BAD_ARGUMENTS)
def test_every_master_argument_is_checked_at_the_call_naming_it(which, name, value):
    """Item 16: SharedTrainingMaster(initial_threshold=0 or nan, min > max sparsity, decay_rate=1)
    was accepted and failed on the executors after the data had been shuffled. Every argument of
    both masters is checked when the master is made, and the error names it with its value.
    (No SparkContext is needed: nothing reaches Spark.)"""
    from kit.spark import SharedTrainingMaster

    classes = {"averaging": [ParameterAveragingTrainingMaster], "shared": [SharedTrainingMaster]}
    classes["both"] = classes["averaging"] + classes["shared"]
    for cls in classes[which]:
        with pytest.raises(ValueError, match=rf"{cls.__name__}\(.*{name}={value!r}"):
            cls(**{name: value})
    for cls in classes[which]:  # the defaults, and each knob's good values, are accepted
        cls()


def test_good_master_arguments_are_kept(tmp_path):
    from kit.spark import SharedTrainingMaster

    tm = ParameterAveragingTrainingMaster(
        repartition="NEVER",
        rdd_training_approach="DIRECT",
        export_directory=str(tmp_path),
        worker_workspace_mode="NONE",
    )
    assert (tm.repartition.value, tm.rdd_training_approach.value, tm.worker_workspace_mode) == (
        "NEVER",
        "DIRECT",
        "NONE",
    )
    shared = SharedTrainingMaster(
        initial_threshold=1e-3, min_target_sparsity=1e-3, max_target_sparsity=0.1, decay_rate=0.5
    )
    assert shared.threshold["decay_rate"] == 0.5


@pytest.mark.parametrize("dtype", [pytest.param("float64", marks=pytest.mark.slow), "float16"])  # float64: `-m slow`
def test_spark_trains_a_network_of_any_float_dtype_like_network_fit(sc, digits, dtype):
    """Item 16: the executors cast features to float32 and the driver broadcast the parameters as
    float32, so a float64 network lost its precision on every round and float16 data was cast
    twice. Now the data keep their dtype up to the network, the state crosses in its own dtype,
    and one worker at frequency 1 equals Network.fit in float64 to float64 precision."""
    from kit.nn import Sgd

    x = digits.features.numpy().astype(dtype)
    data = DataSet(x, digits.labels.numpy())
    assert data.features.dtype == np.dtype(dtype)
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0, dtype=dtype)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach="DIRECT")
    SparkNetwork(sc, net, tm).fit(to_rdd(sc, data))
    ref.fit(ArrayIterator(data, 20))
    assert net.flat_params.dtype == np.dtype(dtype)
    tol = {"float64": 1e-12, "float16": 1e-3}[dtype]
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=tol, atol=tol)


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True])
def test_a_quiet_context_starts_spark_with_nothing_on_stderr(quiet):
    """quiet=True: the JVM's start-up warnings and log4j lines go nowhere (a chapter's stored output
    stays clean); without it they reach stderr as before. A fresh process, so this call starts the JVM."""
    import subprocess
    import sys

    code = (
        "from kit.spark import local_spark_context\n"
        f"sc = local_spark_context('local[1]', conf={{'spark.ui.enabled': 'false'}}, quiet={quiet})\n"
        "print(sc.parallelize(range(10), 2).map(lambda v: v * v).sum())\n"
        "sc.stop()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "285"
    if quiet:
        assert r.stderr.strip() == "", r.stderr
    else:
        assert "log4j" in r.stderr or "WARN" in r.stderr or "WARNING" in r.stderr  # what quiet takes away


def test_local_spark_context_refuses_a_non_bool_quiet():
    from kit.spark import local_spark_context

    with pytest.raises(TypeError, match=r"quiet='yes'"):
        local_spark_context(quiet="yes")
