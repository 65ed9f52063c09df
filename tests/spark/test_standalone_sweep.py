"""kit.spark.standalone's sweep: a cluster whose driver died hard (SIGKILL, no exit ran) is found by
its folder's marker, its processes and their descendants are killed and the folder removed; a live
owner, an unreadable marker, or a pid the system gave to another process are left alone. Real
processes throughout; the slow test kills a real cluster's driver."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kit.spark import spark_missing
from kit.spark.standalone import MARKER, PREFIX, sweep_leftover_clusters

ROOT = Path(__file__).resolve().parents[2]


def _identity(proc: psutil.Process) -> list[float]:
    return [proc.pid, proc.create_time()]


def _dead_owner() -> list[float]:
    """A process that has ended: its identity, taken while it ran."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = _identity(psutil.Process(p.pid))
    p.kill()
    p.wait(timeout=30)
    return ident


def _tree() -> subprocess.Popen:
    """A process with a child of its own, in a session of its own, as a cluster's JVMs are."""
    return subprocess.Popen(["sh", "-c", "sleep 120 & sleep 120"], start_new_session=True)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("owner", "marker", "listed", "swept"),
    [
        ("dead", "good", "same", True),  # the driver died hard: its cluster goes
        ("alive", "good", "same", False),  # a running driver's cluster is its own
        ("dead", "torn", "same", False),  # an unreadable marker: nothing is known, nothing is killed
        ("dead", "none", "same", False),  # no marker: not a cluster kit started
        ("dead", "good", "reused", True),  # the pid now names another process: that one lives
    ],
)
def test_the_sweep_kills_only_a_dead_owners_cluster(tmp_path, owner, marker, listed, swept):
    base = tmp_path / f"{PREFIX}x1"
    base.mkdir()
    (base / "logs").mkdir()
    proc = _tree()
    try:
        top = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while len(top.children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        child = top.children()[0]
        ident = _identity(top) if listed == "same" else [proc.pid, top.create_time() - 100.0]
        who = _dead_owner() if owner == "dead" else _identity(psutil.Process())
        text = json.dumps({"owner": who, "processes": [ident]})
        if marker != "none":
            (base / MARKER).write_text(text if marker == "good" else text[: len(text) // 2])
        result = sweep_leftover_clusters(tmp_path)
        assert result == ([base] if swept else [])
        assert base.exists() is not swept
        killed = swept and listed == "same"
        if killed:
            proc.wait(timeout=30)
        assert _gone(top) is killed, (owner, marker, listed)
        assert _gone(child) is killed  # the descendants with it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_folder_of_another_name_is_not_looked_at(tmp_path):
    other = tmp_path / "spark-elsewhere"
    other.mkdir()
    (other / MARKER).write_text(json.dumps({"owner": _dead_owner(), "processes": []}))
    assert sweep_leftover_clusters(tmp_path) == []
    assert other.exists()


DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from kit.spark.standalone import standalone_cluster
    with standalone_cluster(workers=1, cores=1, memory="512m") as cluster:
        print("PIDS " + json.dumps(list(cluster.worker_pids)), flush=True)
        time.sleep(300)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cluster_whose_driver_was_killed_is_swept_by_the_next_start(tmp_path):
    why = spark_missing()
    if why:
        pytest.skip(why)
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = driver.stdout.readline()  # the driver prints once its cluster is up (bounded by the test's timeout)
        assert line.startswith("PIDS "), line
        (folder,) = tmp_path.glob(f"{PREFIX}*")
        listed = [psutil.Process(pid) for pid, _ in json.loads((folder / MARKER).read_text())["processes"]]
    finally:
        driver.kill()
        driver.wait(timeout=30)
    assert len(listed) == 2  # the master and the worker
    assert not any(_gone(p) for p in listed)  # the leak is real: the exit never ran
    assert sweep_leftover_clusters(tmp_path) == [folder]
    assert all(_gone(p) for p in listed)
    assert not folder.exists()
