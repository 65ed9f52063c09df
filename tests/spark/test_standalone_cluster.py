"""kit.spark on a real standalone cluster started by this module (issue 22; kit.spark.standalone):
one master and two workers bound to 127.0.0.1, each worker in its own mount namespace with a private
tmpfs over the driver's TMPDIR, as on separate hosts that cannot see the driver's disk. One driver in a
subprocess (its own SparkContext, one application on the cluster) runs every part in turn, the one that
kills the workers last (a driver and its executors start once: seconds each); each test reads its part's
results. Skips, saying why, where `unshare` is not permitted."""

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.spark import spark_missing
from kit.spark.standalone import private_namespaces_missing, standalone_cluster

pytestmark = pytest.mark.slow  # a cluster of its own: the default run leaves it to CI (`pytest -m slow`)

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import numpy as np
    from kit.data import ArrayIterator, DataSet, load_digits
    from kit.nn import Adam, Sgd, mlp
    from kit.parallel import ParallelWrapper
    from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, SparkTrainingError
    from kit.spark import local_spark_context, to_rdd

    master, shared_dir = sys.argv[1], sys.argv[2]
    worker_pids = [int(p) for p in sys.argv[3].split(",")]
    conf = json.loads(sys.argv[4])  # kit.spark.standalone's driver_conf: executors' PYTHONPATH, cores.max, ...


    def averaging(sc, rdd, data, out):
        # parameter averaging with DL4J's defaults (EXPORT, repartition ALWAYS) vs ParallelWrapper
        net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
        ref = net.clone()
        SparkNetwork(sc, net, ParameterAveragingTrainingMaster(20, 5, num_workers=2)).fit(rdd)
        with ParallelWrapper(ref, workers=2, prefetch_buffer=0, averaging_frequency=5) as pw:
            pw.fit(ArrayIterator(data, 20))
        out["averaging_diff"] = float(np.max(np.abs(net.params().numpy() - ref.params().numpy())))
        # EXPORT to a file:// URL outside the private tmpfs (a directory every worker mounts)
        net2 = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
        tm = ParameterAveragingTrainingMaster(20, 5, num_workers=2, export_directory="file://" + shared_dir)
        SparkNetwork(sc, net2, tm).fit(rdd)
        out["export_url_diff"] = float(np.max(np.abs(net2.params().numpy() - net.params().numpy())))
        # an export_directory only the driver sees (under its TMPDIR, hidden from the workers): refused at
        # fit by the executors' check, before any data moves, naming the directory and the remedy
        only_here = os.path.join(os.environ["TMPDIR"], "export-only-here")
        tm = ParameterAveragingTrainingMaster(20, 5, num_workers=2, export_directory=only_here)
        try:
            SparkNetwork(sc, mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0), tm).fit(rdd)
            out["driver_only_export"] = "no error"
        except ValueError as exc:
            out["driver_only_export"] = str(exc)
        out["driver_only_left"] = os.listdir(only_here)


    def shared_then_kill(sc, rdd, test, out):
        # shared training with its defaults, 2 epochs: learns
        net3 = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=0)
        before = net3.score(test)
        shared = SparkNetwork(sc, net3, SharedTrainingMaster(20, 2, num_workers=2, collect_training_stats=True))
        shared.fit(rdd, epochs=2)
        out["shared_score"] = [before, net3.score(test)]
        out["shared_state_from"] = sorted({w["state_from"].split(" (")[0] for w in shared.get_training_stats().workers})
        # every worker stopped mid-fit: an error within round_timeout, nothing left running
        net4 = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)

        class KillWorkers:
            def iteration_done(self, model, iteration, epoch, **info):
                if iteration == 2:
                    for pid in worker_pids:
                        os.killpg(pid, signal.SIGKILL)

        # a round takes about a second; 12 s leaves room under load
        tm = ParameterAveragingTrainingMaster(20, 1, num_workers=2, rdd_training_approach="DIRECT", round_timeout=12)
        try:
            SparkNetwork(sc, net4, tm).fit(rdd, epochs=5, listeners=[KillWorkers()])
            out["after_kill"] = "no error"
        except SparkTrainingError as exc:
            out["after_kill"] = str(exc)[:400]
        out["net4_finite"] = bool(np.all(np.isfinite(net4.params().numpy())))
        deadline = time.monotonic() + 30
        while sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.2)
        out["active_jobs"] = list(sc.statusTracker().getActiveJobsIds())


    sc = local_spark_context(master, app_name="kit-standalone", driver_memory="512m", conf=conf)
    out = {}
    try:
        deadline = time.monotonic() + 120  # both workers' executors registered
        while len(sc.statusTracker().getExecutorInfos()) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        out["executors"] = len(sc.statusTracker().getExecutorInfos()) - 1
        out["ui"] = sc.uiWebUrl is not None  # Spark's own UI stays on by default
        train, test = load_digits()
        data = DataSet(train.features.numpy()[:320], train.labels.numpy()[:320])
        rdd = to_rdd(sc, data, num_slices=2)
        averaging(sc, rdd, data, out)
        shared_then_kill(sc, rdd, test, out)  # last: it kills the workers
    finally:
        print("RESULT " + json.dumps(out), flush=True)
        sc.stop()
    """
)


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    env: dict[str, str]  # a driver's: its TMPDIR the one hidden from the workers
    conf: str  # the driver's Spark conf (JSON), StandaloneCluster.driver_conf
    shared: Path  # outside the driver's TMPDIR: every worker sees it, as a shared mount
    worker_pids: str  # the workers' process groups, for the test that kills them
    scripts: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The master and two workers (kit.spark.standalone), started once for the module's drivers,
    killed after the last."""
    why = spark_missing() or private_namespaces_missing(tmp_path_factory.mktemp("probe"))
    if why:
        pytest.skip(why)
    tmp_path = tmp_path_factory.mktemp("standalone")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    with standalone_cluster(workers=2, cores=1, memory="1g", private=True, python_path=str(ROOT)) as c:
        pids = ",".join(str(p) for p in c.worker_pids)
        yield Cluster(c.url, c.env, json.dumps(c.driver_conf()), c.shared, pids, script)


@pytest.fixture(scope="module")
def driven(cluster: Cluster) -> tuple[dict, str]:
    """Runs the driver (one application) on the cluster once: what it measured, and its stderr's tail."""
    args = [cluster.url, str(cluster.shared), cluster.worker_pids, cluster.conf]
    proc = subprocess.run(
        [sys.executable, str(cluster.scripts), *args],
        capture_output=True,
        text=True,
        timeout=600,  # one driver for every part; under pytest-timeout's 900 s with the cluster's start
        cwd=ROOT,
        env=cluster.env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out.get("executors") == 2, (out, proc.stderr[-3000:])
    return out, proc.stderr[-3000:]


@pytest.mark.timeout(900)
def test_averaging_on_workers_that_cannot_see_the_drivers_disk_equals_parallel_wrapper(driven):
    out, stderr = driven
    assert out["ui"], out
    assert "averaging_diff" in out, stderr
    assert out["averaging_diff"] < 1e-4, out
    assert out["export_url_diff"] < 1e-6, out
    refused = out["driver_only_export"]
    assert "ParameterAveragingTrainingMaster(export_directory=" in refused and "cannot use" in refused, out
    assert "export-only-here" in refused and "export_directory=None" in refused, out
    assert out["driver_only_left"] == [], out  # the run directory the executors could not see is gone


@pytest.mark.timeout(900)
def test_shared_training_learns_there_and_killed_workers_end_the_fit_in_words(driven):
    """The driver's last part: it kills the workers."""
    out, stderr = driven
    assert "shared_score" in out, stderr
    before, after = out["shared_score"]
    assert after < before, out  # learns (the direction, not a size)
    # each worker's own state carried on after its first round: from its executor's file
    # (kit.spark.worker_store) or, where another executor ran the round, the driver's copy
    assert {"new"} < set(out["shared_state_from"]) <= {"driver", "executor", "new"}, out
    assert out["after_kill"].startswith("Spark "), out  # SparkTrainingError, in words, not a hang
    assert out["net4_finite"] and out["active_jobs"] == [], out
