"""Issue 44 item 1: one long gang per fit (kit.spark.gang). Real Spark local[2], real gloo.

A gang averaging every F steps gives the bits kit's rounds give (two workers: a float64 a + b
either way); a gang all-reducing gradients every step trains as one process on the concatenated
global batch (DDP's semantics, within float32 tolerance); where no gang can run, "auto" trains in
rounds with a warning naming why and "gang" refuses; a worker that dies fails the fit, bounded,
and the next gang in the same context trains."""

import warnings

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, SparkTrainingError, to_rdd
from kit.spark.collectives import torch_missing
from kit.spark.gang import GangFallbackWarning
from kit.training.listeners import TrainingListener

# the collectives that run here: Spark's allGather always, gloo where torch imports
COLLECTIVES = ["allgather"] + ([] if torch_missing() else ["gloo"])
PER_WORKER = 16
TIMEOUT = 120.0  # the machine is shared: Spark's first jobs can take tens of seconds


@pytest.fixture(scope="module")
def data():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:128], train.labels.numpy()[:128], num_classes=10)


@pytest.fixture(scope="module")
def rdd(sc, data):
    out = to_rdd(sc, data, num_slices=2).cache()
    out.count()
    return out


def _net():
    return mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=5)


def _fit(sc, rdd, *, epochs=1, freq=2, **options):
    tm = ParameterAveragingTrainingMaster(
        PER_WORKER,
        freq,
        num_workers=options.pop("num_workers", 2),
        rdd_training_approach=options.pop("approach", "DIRECT"),
        collect_training_stats=True,
        round_timeout=TIMEOUT,
        **options,
    )
    spark = SparkNetwork(sc, _net(), tm)
    spark.fit(rdd, epochs=epochs)
    return spark


@pytest.mark.parametrize(
    ("exchange", "execution", "collective", "message"),
    [
        ("gradients", "rounds", "auto", "needs the gang: execution='gang' or 'auto'"),
        ("parameters", "gangs", "auto", "execution='gangs'): must be one of 'auto', 'gang', 'rounds'"),
        ("sum", "gang", "auto", "exchange='sum'): must be one of 'parameters', 'gradients'"),
        ("parameters", "gang", "mpi", "collective='mpi'): must be one of 'auto', 'gloo', 'nccl', 'allgather'"),
    ],
)
def test_gang_options_are_refused_at_construction(exchange, execution, collective, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ParameterAveragingTrainingMaster(16, 1, execution=execution, exchange=exchange, collective=collective)


def test_gradients_need_averaging_frequency_one_and_the_remedy_constructs():
    with pytest.raises(ValueError, match=r"averaging_frequency=5, exchange='gradients'.*give averaging_frequency=1"):
        ParameterAveragingTrainingMaster(16, 5, exchange="gradients")
    assert ParameterAveragingTrainingMaster(16, 1, exchange="gradients").execution == "auto"  # the remedy
    assert ParameterAveragingTrainingMaster(16, 5).execution == "rounds"  # parameters: rounds unless asked


@pytest.fixture(scope="module")
def rounds_reference(sc, rdd):
    """kit's per-round path, each (frequency, save_updater) once."""
    cache = {}

    def get(freq, save_updater):
        if (freq, save_updater) not in cache:
            spark = _fit(sc, rdd, epochs=2, freq=freq, save_updater=save_updater, execution="rounds")
            cache[freq, save_updater] = spark
        return cache[freq, save_updater]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("freq", "save_updater", "collective"),
    [(2, True, c) for c in COLLECTIVES] + [(3, False, COLLECTIVES[-1]), (1, True, COLLECTIVES[-1])],
)
def test_a_gang_averaging_every_f_steps_gives_the_bits_the_rounds_give(
    sc, rdd, rounds_reference, freq, save_updater, collective
):
    ref = rounds_reference(freq, save_updater)
    gang = _fit(sc, rdd, epochs=2, freq=freq, save_updater=save_updater, execution="gang", collective=collective)
    stats = gang.get_training_stats().setup
    assert stats["execution"] == "gang" and stats["gang"]["collective"] == collective
    assert stats["gang"]["syncs"] == len(ref.get_training_stats().rounds)  # one all-reduce a round
    for key, arr in ref.network.state_arrays().items():
        np.testing.assert_array_equal(gang.network.state_arrays()[key].numpy(), arr.numpy(), err_msg=key)
    assert (gang.network.iteration, gang.network.epoch) == (ref.network.iteration, ref.network.epoch)
    assert gang.iteration == ref.iteration  # the loop's steps: one a round


@pytest.mark.slow
@pytest.mark.parametrize("where", ["spark storage", "directory"])
def test_a_gang_reads_exported_rounds_as_it_reads_cached_ones(sc, rdd, rounds_reference, where, tmp_path):
    """Every place kit.spark.prepared keeps the rounds (DIRECT's cache above; EXPORT's .npz bytes in
    Spark's storage, or files in a directory here): the gang trains on the same mini-batches."""
    ref = rounds_reference(2, True)
    directory = {"export_directory": str(tmp_path / "export")} if where == "directory" else {}
    gang = _fit(sc, rdd, epochs=2, approach="EXPORT", execution="gang", collective=COLLECTIVES[-1], **directory)
    assert gang.get_training_stats().setup["execution"] == "gang"
    for key, arr in ref.network.state_arrays().items():
        np.testing.assert_array_equal(gang.network.state_arrays()[key].numpy(), arr.numpy(), err_msg=key)


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
def test_more_workers_than_slots_falls_back_to_rounds_with_a_warning_and_gang_refuses(sc, rdd):
    with pytest.raises(ValueError, match=r"execution='gang'\): .*3 workers need 3 tasks at once .* 2 task slot"):
        _fit(sc, rdd, num_workers=3, execution="gang")
    with warnings.catch_warnings(record=True) as caught:  # the remedy the error names: execution='auto'
        warnings.simplefilter("always")
        spark = _fit(sc, rdd, num_workers=3, execution="auto")
    said = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
    assert len(said) == 1 and "3 workers need 3 tasks at once" in said[0] and "2 task slot(s)" in said[0], said
    assert "execution" not in spark.get_training_stats().setup  # the rounds ran
    assert len(spark.get_training_stats().rounds) > 0


@pytest.mark.slow
def test_listeners_fall_back_to_rounds_with_a_warning(sc, rdd):
    tm = ParameterAveragingTrainingMaster(PER_WORKER, 2, num_workers=2, execution="auto", round_timeout=TIMEOUT)
    spark = SparkNetwork(sc, _net(), tm)
    listener = _Scores()
    with pytest.warns(GangFallbackWarning, match=r"1 listener\(s\) given: listeners see the model between rounds"):
        spark.fit(rdd, listeners=[listener])
    assert listener.scores  # the rounds called it


class _Scores(TrainingListener):
    def __init__(self):
        self.scores = []

    def iteration_done(self, model, iteration, epoch, **info):
        self.scores.append(model.get_score() if hasattr(model, "get_score") else None)


@pytest.mark.slow
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_worker_that_dies_fails_the_fit_and_the_next_gang_trains(sc, rdd, collective):
    """Worker 1's process exits at its third step (os._exit, as a lost executor's would): worker 0,
    waiting on it in the collective, must not hang; the fit raises and the network is untouched."""
    tm = ParameterAveragingTrainingMaster(
        PER_WORKER, 1, num_workers=2, exchange="gradients", collective=collective, round_timeout=30.0
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
