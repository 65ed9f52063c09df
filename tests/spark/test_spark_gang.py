"""Issue 44 item 1: one long gang per fit (kit.spark.gang). Real Spark local[2], real gloo.

A gang averaging every F steps gives the bits kit's rounds give (two workers: a float64 a + b
either way); where no gang can run, "auto" trains in rounds with a warning naming why and "gang"
refuses. A gang's worker (all-reducing gradients every step, a worker that dies):
test_gang_worker.py."""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from _gang import COLLECTIVES, PER_WORKER, TIMEOUT, _fit, _net

from kit.nn import Adam, mlp
from kit.nn.mixed import LossScaler
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, collectives
from kit.spark.gang import GangFallbackWarning, barrier_blocker, slow_collective
from kit.training.listeners import TrainingListener


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
    assert ParameterAveragingTrainingMaster(16, 5).execution == "auto"  # parameters too: a gang where one can run


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


# What Spark's DAGScheduler refuses to a barrier stage at submission (SPARK-24942, SPARK-24819), as
# barrier_blocker reads it: (spark.master, conf, workers, slots, refused with).
BLOCKERS = {
    "dynamic-on-yarn": ("yarn", {"spark.dynamicAllocation.enabled": "true"}, 2, 8, "dynamic allocation is on"),
    "dynamic-on-standalone": ("spark://h:7077", {"spark.dynamicAllocation.enabled": "TRUE"}, 2, 8, "dynamic"),
    "dynamic-on-k8s": ("k8s://https://h:6443", {"spark.dynamicAllocation.enabled": "true"}, 2, 8, "dynamic"),
    "dynamic-ignored-on-local": ("local[4]", {"spark.dynamicAllocation.enabled": "true"}, 2, 4, None),
    "dynamic-testing-on-local": (
        "local[4]",
        {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.testing": "true"},
        2,
        4,
        "dynamic allocation is on",
    ),
    "dynamic-off": ("yarn", {"spark.dynamicAllocation.enabled": "false"}, 2, 8, None),
    "local-one-thread": ("local", {}, 2, 1, "2 workers need 2 tasks at once but the cluster (local) has 1 task slot"),
    "more-than-cores": ("spark://h:7077", {}, 3, 2, "3 workers need 3 tasks at once but the cluster (spark://h:7077)"),
    "as-many-as-slots": ("local[2]", {}, 2, 2, None),
}


@pytest.mark.parametrize("case", list(BLOCKERS))
def test_barrier_blocker_refuses_what_spark_refuses(case):
    from pyspark import SparkConf

    spark_master, settings, workers, slots, refused = BLOCKERS[case]
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    why = barrier_blocker(conf, workers, slots, spark_master)
    assert (why is None) == (refused is None) and (refused is None or refused in why), why


def _mixed_net():
    mixed = {"master_dtype": "float32", "loss_scale": LossScaler(2.0**10)}
    return mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=5, dtype="float16", **mixed)


# Every reason a fit of the default master (execution="auto") trains in rounds on this local[2]: what
# Spark refuses to a barrier stage (more tasks than slots; dynamic allocation is kit.spark.gang's
# barrier_blocker's table below: a local master ignores it, as Spark does) and what only the
# rounds do (listeners, checkpoints, a loss scaler). Each: (master's options, fit's, network, said).
FALLBACKS = {
    "more-workers-than-slots": (
        {"num_workers": 3},
        {},
        _net,
        "3 workers need 3 tasks at once but the cluster (local[2]) has 2 task slot(s)",
    ),
    "listeners": ({}, {"listeners": "one"}, _net, "1 listener(s) given: listeners see the model between rounds"),
    "checkpoints": (
        {"checkpoint_every": 1, "checkpoint_directory": "TMP"},
        {},
        _net,
        "checkpoint_every=1: checkpoints are written between rounds, on the driver",
    ),
    "mixed-precision": ({}, {}, _mixed_net, "a mixed-precision network: its loss scaler's state is merged"),
}


def _master(tmp_path, **options):
    if options.get("checkpoint_directory") == "TMP":
        options["checkpoint_directory"] = str(tmp_path / "checkpoints")
    options.setdefault("num_workers", 2)
    return ParameterAveragingTrainingMaster(
        PER_WORKER, 2, collect_training_stats=True, round_timeout=TIMEOUT, **options
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FALLBACKS))
def test_the_default_falls_back_to_rounds_saying_why_and_gang_refuses(sc, rdd, case, tmp_path):
    """A fit the default cannot run as a gang trains in rounds: one GangFallbackWarning naming why, the
    same words in the stats with the execution that ran; execution="gang" refuses at the call, before
    any data move, with the same words and the remedy."""
    options, fit_options, net, why = FALLBACKS[case]
    listeners = [_Scores()] if fit_options.get("listeners") else []
    with pytest.raises(ValueError, match=r"execution='gang'\): this fit cannot run as one barrier stage: ") as refused:
        SparkNetwork(sc, net(), _master(tmp_path / "gang", execution="gang", **options)).fit(rdd, listeners=listeners)
    assert why in str(refused.value) and "use execution='auto'" in str(refused.value)
    spark = SparkNetwork(sc, net(), _master(tmp_path, **options))  # the default: execution="auto"
    assert spark.training_master.execution == "auto"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spark.fit(rdd, listeners=listeners)
    said = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
    assert len(said) == 1 and why in said[0] and "trains in rounds" in said[0], said
    setup = spark.get_training_stats().setup
    assert setup["execution"] == "rounds" and why in setup["rounds_because"], setup
    assert len(spark.get_training_stats().rounds) > 0  # the rounds ran: one record a round
    assert all(listener.scores for listener in listeners)  # and called the listeners


@pytest.mark.slow
def test_the_default_master_trains_as_a_gang_with_the_bits_of_the_rounds(sc, rdd, rounds_reference):
    """Issue 44: the gang is the default wherever a barrier stage can run and a collective other than
    Spark's allGather opens (Gloo where torch imports); no warning, the stats say so, and it ends with
    the bits the per-round path (execution="rounds", pinned) ends with. Where allGather is all there
    is (no torch), the default trains in rounds, warned once, to the same bits."""
    ref = rounds_reference(2, True)
    assert ref.get_training_stats().setup["execution"] == "rounds"
    assert ref.get_training_stats().setup["rounds_because"] == "execution='rounds'"
    gang = collectives.available() != "allgather"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spark = _fit(sc, rdd, epochs=2, freq=2)
    said = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
    assert spark.training_master.execution == "auto"
    setup = spark.get_training_stats().setup
    if gang:
        assert not said and setup["execution"] == "gang" and "rounds_because" not in setup, (said, setup)
    else:
        assert len(said) == 1 and "Spark's allGather" in said[0] and setup["execution"] == "rounds", (said, setup)
    for key, arr in ref.network.state_arrays().items():
        np.testing.assert_array_equal(spark.network.state_arrays()[key].numpy(), arr.numpy(), err_msg=key)
    assert (spark.network.iteration, spark.network.epoch) == (ref.network.iteration, ref.network.epoch)


# What execution="auto" does with each collective, by what "auto" would open here: a gang unless
# the all-reduces would go through Spark's allGather (checked once a second by Spark).
SLOW = "the gang's collective would be Spark's allGather"
COLLECTIVE_CASES = [
    ("auto", "gloo", None),
    ("auto", "nccl", None),
    ("auto", "allgather", SLOW + " (torch.distributed's Gloo is not importable here)"),
    ("gloo", "allgather", None),  # asked for by name: the gang opens it (or fails saying torch is missing)
    ("nccl", "gloo", None),
    ("allgather", "gloo", SLOW + " (collective='allgather')"),
    ("allgather", "allgather", SLOW + " (collective='allgather')"),
]


@pytest.mark.parametrize(("collective", "available", "said"), COLLECTIVE_CASES)
def test_auto_runs_no_gang_whose_collective_is_spark_s_allgather(collective, available, said):
    why = slow_collective(collective, available)
    assert why == said if said is None else why.startswith(said) and "execution='gang'" in why, why


def test_the_default_on_allgather_trains_in_rounds_and_the_printed_remedy_runs_a_gang(sc, rdd):
    """The regression: without torch, the default's gang synced through Spark's allGather, about a
    second an averaging. Now execution="auto" trains in rounds, warned once with why; the remedy it
    prints (execution='gang') runs the gang on allGather, to the same bits."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rounds = _fit(sc, rdd, freq=2, collective="allgather")
    said = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
    assert len(said) == 1 and SLOW in said[0] and "use execution='gang'" in said[0], said
    assert rounds.get_training_stats().setup["execution"] == "rounds"
    assert SLOW in rounds.get_training_stats().setup["rounds_because"]
    gang = _fit(sc, rdd, freq=2, collective="allgather", execution="gang")  # the remedy, as printed
    assert gang.get_training_stats().setup["gang"]["collective"] == "allgather"
    for key, arr in rounds.network.state_arrays().items():
        np.testing.assert_array_equal(gang.network.state_arrays()[key].numpy(), arr.numpy(), err_msg=key)


class _Scores(TrainingListener):
    def __init__(self):
        self.scores = []

    def iteration_done(self, model, iteration, epoch, **info):
        self.scores.append(model.get_score() if hasattr(model, "get_score") else None)


SPARK_REFUSES = textwrap.dedent(
    """
    import json, warnings
    from kit.data import DataSet, load_digits
    from kit.nn import Adam, mlp
    from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, SparkTrainingStats
    from kit.spark import local_spark_context, to_rdd
    from kit.spark.gang import GangFallbackWarning, record_execution, use_gang

    sc = local_spark_context("local[2]", app_name="kit-dynamic", driver_memory="512m", conf={
        "spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.testing": "true",
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    out = {}
    try:
        try:  # Spark's own answer to a barrier stage here
            sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: it).collect()
            out["spark"] = "ran"
        except Exception as exc:
            out["spark"] = str(exc)[:3000]
        train, _ = load_digits()
        rdd = to_rdd(sc, DataSet(train.features.numpy()[:64], train.labels.numpy()[:64], num_classes=10), 2)
        tm = ParameterAveragingTrainingMaster(16, 2, num_workers=2, rdd_training_approach="DIRECT")
        spark = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, updater=Adam(1e-2), seed=5), tm)
        with warnings.catch_warnings(record=True) as caught:  # fit's first call: the decision, before any job
            warnings.simplefilter("always")
            why = use_gang(spark, rdd, [])
        out["warned"] = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
        stats = SparkTrainingStats("ParameterAveragingTrainingMaster")
        record_execution(stats, why)  # what fit then writes into the stats
        out["setup"] = stats.setup
    finally:
        print("RESULT " + json.dumps(out), flush=True)
        sc.stop()
    """
)


@pytest.mark.slow
@pytest.mark.timeout(330)
def test_where_spark_refuses_a_barrier_stage_the_default_trains_in_rounds(tmp_path):
    """Checked against Spark itself, in a context of its own: with dynamic allocation on (and
    spark.dynamicAllocation.testing, without which a local master ignores it) Spark refuses a barrier
    stage (SPARK-24942), and the default master's decision at the call (fit's first step) is the rounds,
    warned and said in the stats. (No fit: the fallback table above fits; a JVM of its own is slow enough.)"""
    script = tmp_path / "driver.py"
    script.write_text(SPARK_REFUSES)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=root, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert "SPARK-24942" in out["spark"] and "dynamic resource allocation" in out["spark"], out
    assert len(out["warned"]) == 1 and "dynamic allocation is on" in out["warned"][0], out
    assert out["setup"]["execution"] == "rounds" and "dynamic allocation" in out["setup"]["rounds_because"], out
