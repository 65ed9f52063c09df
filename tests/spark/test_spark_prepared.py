"""kit.spark.prepared (issue 44 items 4 and 5): data prepared once per RDD and settings across
fits, moved as mini-batches (many examples an element), an export directory checked from an
executor before the first round, stale export runs of a killed driver swept at the next fit, and
Spark's retries counted in the stats (a driver whose context retries a task that fails once)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kit.nn import Sgd, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork
from kit.spark.prepared import MARKER, Plan, check_run_task, mini_batches, sweep_stale_runs
from kit.spark.wire import RoundSource

ROOT = Path(__file__).resolve().parents[2]
C, F, N = 4, 5, 120
RNG = np.random.default_rng(3)
X = RNG.random((N, F)).astype(np.float32)
Y = np.arange(N) % C


def _rdd(sc, per_element=1, slices=3):
    return sc.parallelize([(X[i : i + per_element], Y[i : i + per_element]) for i in range(0, N, per_element)], slices)


def _net():
    return mlp(F, hidden=(6,), n_out=C, updater=Sgd(0.1), seed=0)


def _state(net):
    return {k: v.numpy().copy() for k, v in net.state_arrays().items()}


@pytest.mark.parametrize("approach", ["DIRECT", pytest.param("EXPORT", marks=pytest.mark.slow)])
def test_a_fit_in_a_loop_prepares_once_and_trains_as_one_longer_fit(sc, approach, tmp_path):
    rdd = _rdd(sc)
    options = {"num_workers": 2, "rdd_training_approach": approach, "collect_training_stats": True}
    tm = ParameterAveragingTrainingMaster(10, 2, **options)
    looped = SparkNetwork(sc, _net(), tm)
    prepared = []
    for _ in range(2):
        looped.fit(rdd, epochs=1)
        prepared.append(looped.get_training_stats().setup["preparations"])
    assert prepared == [1, 0] and tm.prepared.preparations == 1
    once = SparkNetwork(sc, _net(), ParameterAveragingTrainingMaster(10, 2, **options))
    once.fit(rdd, epochs=2)
    for key, value in _state(once.network).items():
        np.testing.assert_array_equal(_state(looped.network)[key], value)
    # another RDD (the same examples) or other settings: prepared again
    looped.fit(rdd.map(lambda e: e), epochs=1)
    assert looped.get_training_stats().setup["preparations"] == 1 and tm.prepared.preparations == 2
    other = SparkNetwork(sc, _net(), ParameterAveragingTrainingMaster(12, 2, **options))
    other.fit(rdd, epochs=1)
    assert other.get_training_stats().setup["preparations"] == 1
    tm.close()
    assert not tm.prepared.entries


@pytest.mark.parametrize(("per_element", "slices", "per_batch"), [(1, 3, 10), (7, 4, 10), (30, 2, 8), (120, 1, 25)])
def test_the_shuffle_moves_mini_batches_and_each_worker_gets_its_own_in_order(sc, per_element, slices, per_batch):
    """Mini-batch b (examples b * per_batch ... in the RDD's order) goes to worker b % workers,
    as one element: the shuffle moves about N / per_batch elements, not N pickled examples."""
    workers = 3
    plan = Plan("app", 0, workers, per_batch, 2, True, RoundSource.CACHED, None, C)
    batches, attempts = mini_batches(_rdd(sc, per_element, slices), lambda rdd, what: rdd.collect(), plan)
    got = batches.glom().collect()
    assert len(got) == workers and attempts == [0] * slices
    starts = range(0, N, per_batch)
    assert sum(len(part) for part in got) == len(starts)
    for w, part in enumerate(got):
        mine = [s for b, s in enumerate(starts) if b % workers == w]
        assert [len(x) for x, _ in part] == [len(X[s : s + per_batch]) for s in mine]
        for (x, y), s in zip(part, mine, strict=True):
            np.testing.assert_array_equal(x, X[s : s + per_batch])
            np.testing.assert_array_equal(y, Y[s : s + per_batch])


def test_an_export_run_is_marked_checked_from_an_executor_and_removed_after(sc, tmp_path):
    tm = ParameterAveragingTrainingMaster(
        10, 2, num_workers=2, export_directory=str(tmp_path), collect_training_stats=True
    )
    spark = SparkNetwork(sc, _net(), tm)
    spark.fit(_rdd(sc))
    setup = spark.get_training_stats().setup
    (run,) = [p for p in tmp_path.iterdir() if p.name.startswith("kit-spark-export-")]
    marker = json.loads((run / MARKER).read_text())
    assert marker["pid"] == os.getpid() and setup["export_runs_swept"] == 0 and setup["storage"] == str(tmp_path)
    assert sorted(p.name for p in run.iterdir() if p.suffix == ".npz") == [
        "w0_r0.npz",
        "w0_r1.npz",
        "w0_r2.npz",
        "w1_r0.npz",
        "w1_r1.npz",
        "w1_r2.npz",
    ]
    tm.close()
    assert not run.exists()


def test_the_executors_check_says_what_they_could_not_see(tmp_path):
    """What an executor runs before the first round (a plain task): the driver's marker with this
    run's token, and a file it can write. A directory only the driver sees has no marker there."""
    run = tmp_path / "run"
    run.mkdir()
    (run / MARKER).write_text(json.dumps({"token": "abc"}))
    assert next(check_run_task(str(run), "abc")(iter([0])))[0] is True
    ok, _host, why = next(check_run_task(str(run), "other")(iter([0])))
    assert not ok and why == "its marker belongs to another run"
    ok, _host, why = next(check_run_task(str(tmp_path / "only-on-the-driver"), "abc")(iter([0])))
    assert not ok and why.startswith("FileNotFoundError") and "only-on-the-driver" in why


def test_the_sweep_removes_runs_of_gone_drivers_only(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    import socket

    runs = {}
    for name, marker in {
        "kit-spark-export-dead": {"host": socket.gethostname(), "pid": dead_pid},
        "kit-spark-export-mine": {"host": socket.gethostname(), "pid": os.getpid()},
        "kit-spark-export-elsewhere": {"host": "another-host", "pid": dead_pid},
    }.items():
        runs[name] = tmp_path / name
        runs[name].mkdir()
        (runs[name] / MARKER).write_text(json.dumps(marker))
    (tmp_path / "unmarked").mkdir()
    assert sweep_stale_runs(str(tmp_path)) == [str(runs["kit-spark-export-dead"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kit-spark-export-elsewhere",
        "kit-spark-export-mine",
        "unmarked",
    ]


# ---- a driver of its own: a context that retries a failed task, then killed mid-fit -----------------

DRIVER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from pyspark import TaskContext
    from tests.spark.test_spark_prepared import X, Y, _net
    from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, local_spark_context

    directory = sys.argv[1]
    sc = local_spark_context("local[2,2]", app_name="kit-prepared-driver", driver_memory="512m",
                             conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})

    def fail_once(element):
        ctx = TaskContext.get()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            raise RuntimeError("the first attempt of partition 1 fails")
        return element

    rdd = sc.parallelize([(X[i : i + 1], Y[i : i + 1]) for i in range(len(X))], 2)

    class StandStill:
        def iteration_done(self, model, iteration, epoch, **info):
            print("STOPPED", flush=True)
            time.sleep(600)

    out = {}  # first the retries: one fit plain, one whose partition 1 fails once
    for name, data in (("plain", rdd), ("fails_once", rdd.map(fail_once))):
        tm = ParameterAveragingTrainingMaster(10, 2, repartition="NEVER", rdd_training_approach="DIRECT",
                                              collect_training_stats=True, execution="rounds")  # per round
        spark = SparkNetwork(sc, _net(), tm)
        spark.fit(data)
        stats = spark.get_training_stats()
        out[name] = {"setup": stats.setup["retries"], "rounds": [r["retries"] for r in stats.rounds]}
    print("REPORT " + json.dumps(out), flush=True)
    # then an export fit, stopped after its first round until the test kills this driver
    tm = ParameterAveragingTrainingMaster(10, 2, num_workers=2, export_directory=directory)
    SparkNetwork(sc, _net(), tm).fit(rdd, listeners=[StandStill()])
    print("FINISHED", flush=True)
    """
)


@dataclass(frozen=True)
class Killed:
    log: str  # everything the driver printed, Spark's log included
    pid: int
    returncode: int | None
    export: Path  # its export directory


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Killed:
    """One driver of its own (a JVM and a context: seconds to start) for both tests below: its fits
    with retries, then an export fit it stands still in, killed there (its JVM and Python workers too)."""
    tmp_path = tmp_path_factory.mktemp("driver")
    export = tmp_path / "export"
    export.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    with open(tmp_path / "driver.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(export)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        text = lambda: (tmp_path / "driver.log").read_text()  # noqa: E731
        try:
            deadline = time.monotonic() + 300
            while "STOPPED" not in text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            with contextlib.suppress(ProcessLookupError):  # the driver, its JVM and Python workers
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    return Killed(text(), proc.pid, proc.returncode, export)


@pytest.mark.slow  # a driver of its own, killed
@pytest.mark.timeout(420)
def test_a_killed_drivers_export_run_is_swept_at_the_next_fit(sc, killed):
    assert "STOPPED" in killed.log, killed.log[-3000:]
    assert killed.returncode == -signal.SIGKILL
    (left,) = list(killed.export.iterdir())  # what the killed driver left: its run, marked, and its files
    assert json.loads((left / MARKER).read_text())["pid"] == killed.pid and list(left.glob("*.npz"))
    tm = ParameterAveragingTrainingMaster(
        10, 2, num_workers=2, export_directory=str(killed.export), collect_training_stats=True
    )
    spark = SparkNetwork(sc, _net(), tm)
    spark.fit(_rdd(sc))
    assert spark.get_training_stats().setup["export_runs_swept"] == 1 and not left.exists()
    tm.close()
    assert list(killed.export.iterdir()) == []


@pytest.mark.slow  # a driver of its own, with a context that retries
@pytest.mark.timeout(420)
def test_a_task_that_fails_once_is_counted_as_a_retry(killed):
    # its fits ended without an error: it printed their report and went on to the export fit
    assert "REPORT " in killed.log and "STOPPED" in killed.log, killed.log[-3000:]
    report = json.loads(killed.log.split("REPORT ", 1)[1].splitlines()[0])
    assert report["plain"]["setup"] == 0 and set(report["plain"]["rounds"]) == {0}
    assert report["fails_once"]["setup"] >= 1  # partition 1's first attempt failed, its second ran
    assert "the first attempt of partition 1 fails" in killed.log  # Spark said so: its log level is the user's


# ---- a DataFrame is prepared once too (issue 44 item 4): the same plan, read the same way ---------


def _frame(sc, rows=N, partitions=3):
    """A DataFrame of X, Y (features array<float>), shuffled into `partitions`: built afresh each call."""
    from pyspark.sql import SparkSession

    spark = SparkSession(sc)
    df = spark.createDataFrame([(X[i].tolist(), int(Y[i])) for i in range(rows)], "features array<float>, label int")
    return df.repartition(partitions)


def _marker(sc, name):
    """The id of a one-task job run in group `name`, once the status tracker knows it (it learns of
    jobs through Spark's listener bus, in order: every job before it is known then)."""
    tracker = sc.statusTracker()
    sc.setJobGroup(name, "marker")
    try:
        sc.parallelize([0], 1).count()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    deadline = time.monotonic() + 30
    while not tracker.getJobIdsForGroup(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    (job,) = tracker.getJobIdsForGroup(name)
    return job


def _jobs_between(sc, run):
    """Spark jobs `run()` started, counted by the job ids of a marker job before and after it."""
    first = _marker(sc, f"before-{time.monotonic_ns()}")
    run()
    return _marker(sc, f"after-{time.monotonic_ns()}") - first - 1


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        # the fast default runs one of each table; `-m slow` (CI) runs the rest
        pytest.param("the same DataFrame", [1, 0, 0], marks=pytest.mark.slow),
        pytest.param("the same query, read again", [1, 0, 0], marks=pytest.mark.slow),
        ("another query", [1, 1, 0]),
    ],
)
def test_a_dataframe_fit_in_a_loop_prepares_once_and_runs_only_its_rounds(sc, tmp_path, case, expected):
    """(Other settings, another master: prepared again, as for an RDD in the test above.)"""
    df = _frame(sc)
    if case == "the same query, read again":  # three DataFrame objects, one plan over the same files
        df.write.parquet(str(tmp_path / "frame"))
        frames = [df.sparkSession.read.parquet(str(tmp_path / "frame")) for _ in range(3)]
    else:
        frames = [df, df, df] if case == "the same DataFrame" else [df, df.limit(100), df.limit(100)]
    options = {"num_workers": 2, "rdd_training_approach": "DIRECT", "collect_training_stats": True}
    tm = ParameterAveragingTrainingMaster(10, 2, **options)
    looped = SparkNetwork(sc, _net(), tm)
    prepared, jobs, rounds = [], [], []
    for frame in frames:
        jobs.append(_jobs_between(sc, lambda frame=frame: looped.fit(frame, epochs=1)))
        stats = looped.get_training_stats()
        prepared.append(stats.setup["preparations"])
        # the training's own jobs: one a round, or the one barrier job of a gang (kit.spark.gang)
        rounds.append(len(stats.rounds) if stats.setup["execution"] == "rounds" else 1)
    assert prepared == expected
    for p, j, r in zip(prepared, jobs, rounds):
        # a fit that found its rounds runs its training's jobs and nothing else: no reading, shuffle or
        # count (a new DataFrame over a limit can cost Spark's own planning a job: counted only here)
        assert (j == r or (case == "another query" and j == r + 1)) if p == 0 else (j > r + 1), (prepared, jobs, rounds)
    if case == "the same DataFrame":  # and trains as one fit of three epochs on it, bit for bit
        once = SparkNetwork(sc, _net(), ParameterAveragingTrainingMaster(10, 2, **options))
        once.fit(df, epochs=3)
        for key, value in _state(once.network).items():
            np.testing.assert_array_equal(_state(looped.network)[key], value)
    tm.close()
    assert not tm.prepared.entries and not tm.prepared.frames


def _tasks_between(sc, run):
    """Spark tasks the jobs `run()` started ran (a skipped stage, whose output Spark reused, runs none)."""
    tracker = sc.statusTracker()
    first = _marker(sc, f"before-{time.monotonic_ns()}")
    run()
    last = _marker(sc, f"after-{time.monotonic_ns()}")
    stages = [s for job in range(first + 1, last) for s in tracker.getJobInfo(job).stageIds]
    return sum(tracker.getStageInfo(s).numCompletedTasks for s in stages)


@pytest.mark.parametrize(
    ("approach", "many_rounds"),
    [
        ("DIRECT", {"averaging_frequency": 1}),
        pytest.param("EXPORT", {"averaging_frequency": 1}, marks=pytest.mark.slow),  # into Spark's storage
        pytest.param("DIRECT", {"averaging_frequency": 1, "exchange": "gradients"}, marks=pytest.mark.slow),  # DDP's
    ],
)
def test_a_gangs_preparation_and_stage_run_one_task_a_worker_however_many_rounds(sc, approach, many_rounds):
    """A gang reads each worker's rounds whole: its data are stored one partition a worker, so a fit
    of 4 rounds (frequency 1) runs the tasks a fit of 1 round (frequency 4) runs, where one
    partition a (worker, round) ran 2 x 4 more and a shuffle to bring them together. (Few rounds:
    each is an all-reduce, about a second on Spark's allGather where torch is missing.)"""
    rdd = sc.parallelize([(X[i : i + 1], Y[i : i + 1]) for i in range(40)], 2)  # 2 workers x 4 mini-batches of 5

    def fit(**options):
        tm = ParameterAveragingTrainingMaster(
            5, num_workers=2, rdd_training_approach=approach, execution="gang", collect_training_stats=True, **options
        )
        spark = SparkNetwork(sc, _net(), tm)
        tasks = _tasks_between(sc, lambda: spark.fit(rdd))
        (kept,) = tm.prepared.entries.values()
        assert kept.per_worker and kept.rdd.getNumPartitions() == 2, (kept.per_worker, kept.rdd.getNumPartitions())
        return tasks, spark.get_training_stats().setup

    tasks_many, setup = fit(**many_rounds)
    tasks_one, _ = fit(averaging_frequency=4)
    assert setup["execution"] == "gang" and setup["rounds"] == 4
    assert 0 < tasks_many == tasks_one, (tasks_many, tasks_one)
