"""kit.spark.standalone: a standalone cluster's arguments refused at the call, naming the value and
the remedy, before anything starts; and a tiny real cluster (slow) that runs a job, whose private
workers cannot see the driver's TMPDIR but see the shared folder, and that leaves no process behind."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from kit.spark import spark_missing
from kit.spark.standalone import (
    StandaloneClusterError,
    private_namespaces_missing,
    standalone_cluster,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"workers": 0}, ValueError, "workers=0"),
        ({"workers": 1.5}, ValueError, "workers=1.5"),
        ({"workers": True}, ValueError, "workers=True"),
        ({"cores": 0}, ValueError, "cores=0"),
        ({"cores": "1"}, ValueError, "cores='1'"),
        ({"memory": "1"}, ValueError, "memory='1'"),
        ({"memory": "1 GB"}, ValueError, "memory='1 GB'"),
        ({"memory": "0g"}, ValueError, "memory='0g'"),
        ({"memory": 1024}, ValueError, "memory=1024"),
        ({"private": "yes"}, TypeError, "private='yes'"),
        ({"start_timeout": 0}, ValueError, "start_timeout=0"),
        ({"register_timeout": -1.0}, ValueError, "register_timeout=-1.0"),
        ({"register_timeout": float("nan")}, ValueError, "register_timeout=nan"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else None,
)
def test_bad_arguments_are_refused_before_anything_starts(kwargs, error, says):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(error, match=r"standalone_cluster\(") as caught:
        with standalone_cluster(**kwargs):
            pass
    assert says in str(caught.value) and ("e.g." in str(caught.value) or "True or False" in str(caught.value))
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # nothing was started


def test_a_directory_that_is_not_an_empty_folder_is_refused(tmp_path):
    (tmp_path / "kept").write_text("x")
    for bad in (tmp_path, tmp_path / "missing"):
        with pytest.raises(ValueError, match="an empty folder that exists, or None"):
            with standalone_cluster(directory=bad):
                pass


def test_private_workers_without_unshare_say_why_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no unshare (and nothing else) on PATH
    why = private_namespaces_missing()
    assert why is not None and "unshare" in why and "private=False" in why
    with pytest.raises(StandaloneClusterError, match="standalone_cluster\\(private=True\\): no `unshare`"):
        with standalone_cluster(private=True):
            pass


JOB = textwrap.dedent(
    """
    import json, os, sys
    from kit.spark import local_spark_context

    conf, hidden, shared = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    sc = local_spark_context(sys.argv[1], app_name="kit-standalone-test", driver_memory="512m", conf=conf)
    try:
        seen = sc.parallelize(range(4), 2).map(lambda _: (os.path.exists(hidden), os.path.exists(shared))).collect()
        out = {"master": sc.master, "sum": sc.parallelize(range(100), 2).map(lambda x: 2 * x).sum(),
               "hidden_seen": any(h for h, _ in seen), "shared_seen": all(s for _, s in seen)}
    finally:
        sc.stop()
    print("RESULT " + json.dumps(out), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_tiny_cluster_runs_a_job_hides_the_drivers_disk_and_leaves_nothing_behind(tmp_path):
    why = spark_missing() or private_namespaces_missing()
    if why:
        pytest.skip(why)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with standalone_cluster(workers=1, cores=1, memory="512m", private=True, directory=tmp_path) as cluster:
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        jvms = sum(p.name() == "java" for p in started)
        (cluster.driver_tmp / "hidden").write_text("the driver's only")
        (cluster.shared / "seen").write_text("everyone's")
        args = [cluster.url, json.dumps(cluster.driver_conf()), str(cluster.driver_tmp / "hidden")]
        job = [sys.executable, "-c", JOB, *args, str(cluster.shared / "seen")]
        done = subprocess.run(job, capture_output=True, text=True, timeout=180, env=cluster.env, cwd=ROOT)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, done.stdout[-2000:] + done.stderr[-3000:]
        out = json.loads(lines[-1][len("RESULT ") :])
        assert len(cluster.worker_pids) == 1 and cluster.private
    assert out == {"master": cluster.url, "sum": 9900, "hidden_seen": False, "shared_seen": True}, out
    assert jvms >= 2, started  # the master's and the worker's JVMs (and the executor's)
    alive = [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], alive  # every process it started is gone
    assert not any(p.pid not in before for p in psutil.Process().children(recursive=True))
    assert (tmp_path / "logs" / "master.log").exists()  # a given directory is kept, with the logs
