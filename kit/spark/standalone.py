"""A Spark standalone cluster on this machine: one master and N workers bound to 127.0.0.1,
started through PySpark's own `bin/spark-class`, for tests and benchmarks that must run on a real
cluster rather than `local[N]` (executors in JVMs of their own, tasks scheduled by a master).

    with standalone_cluster(workers=2, cores=1, private=True) as cluster:
        sc = local_spark_context(cluster.url, conf=cluster.driver_conf())

`private=True` starts each worker in a mount namespace of its own (`unshare -m`) with a tmpfs over
the driver's TMPDIR, so that the workers cannot see what the driver writes there, as on separate
hosts; `private_namespaces_missing()` says why that is not permitted where it is not. Every wait
is bounded (the master's port, the workers' registration, read from the master's JSON page), and
the context kills every process it started, and their descendants, on exit: nothing is left.
A driver killed hard (SIGKILL) cannot run that exit: each cluster's folder keeps a marker naming
its owner and its processes, and the next start sweeps the clusters whose owner is gone
(`sweep_leftover_clusters`).

What a driver on it needs is in `driver_conf()`: executors importing kit from `python_path`,
`spark.cores.max`, and `spark.shuffle.readHostLocalDisk=false`, because two workers on one host
would otherwise read each other's shuffle files straight from the disk, which separate hosts
cannot do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from kit.spark.spark_context import SparkUnavailableError, spark_missing

__all__ = [
    "StandaloneCluster",
    "StandaloneClusterError",
    "private_namespaces_missing",
    "standalone_cluster",
    "sweep_leftover_clusters",
]

MEMORY = re.compile(r"^[1-9]\d*[mg]$")
PREFIX, MARKER = "kit-standalone-", "kit-cluster.json"


class StandaloneClusterError(RuntimeError):
    """The cluster could not start (or not as asked): the message names the step and the log's tail."""


@dataclass(frozen=True)
class StandaloneCluster:
    """A running cluster: its master URL and what a driver on it needs."""

    url: str  # spark://127.0.0.1:PORT
    workers: int
    cores: int
    python_path: str  # what the executors' Python imports kit from
    driver_tmp: Path  # the driver's TMPDIR: hidden from the workers where `private`
    shared: Path  # outside it: every worker sees it, as a shared mount
    logs: Path
    private: bool
    worker_pids: tuple[int, ...] = ()  # each worker's process group (a test may kill them)
    env: dict[str, str] = field(default_factory=dict)  # the environment for a driver process

    def driver_conf(self, executor_memory: str = "512m") -> dict[str, str]:
        """The Spark conf a driver on this cluster needs (merge it into `local_spark_context`'s conf)."""
        return {
            "spark.executorEnv.PYTHONPATH": self.python_path,
            "spark.executor.memory": executor_memory,
            "spark.cores.max": str(self.workers * self.cores),
            "spark.ui.showConsoleProgress": "false",
            # both workers are on 127.0.0.1: Spark would read the other's shuffle files from its disk
            # ("host-local"); on separate hosts it fetches them over the network, which this must do
            "spark.shuffle.readHostLocalDisk": "false",
        }

    @contextmanager
    def as_driver(self) -> Iterator[None]:
        """This process as the cluster's driver: TMPDIR (os.environ and `tempfile`) is the driver's
        own, hidden from the workers, inside the block; restored after. Start the context inside."""
        saved, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
        os.environ["TMPDIR"], tempfile.tempdir = str(self.driver_tmp), None
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved
            tempfile.tempdir = saved_dir


def private_namespaces_missing(directory: str | os.PathLike[str] | None = None) -> str | None:
    """Why a worker cannot get a private mount namespace with a tmpfs here (None: it can): tried
    once with `unshare -m --propagation private` over `directory` (a fresh temporary one)."""
    if shutil.which("unshare") is None:
        return "no `unshare` on PATH (util-linux): private=False runs the workers without their own mounts"
    with tempfile.TemporaryDirectory() as scratch:
        target = str(directory or scratch)
        try:
            probe = subprocess.run(
                ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs tmpfs {target}"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            return "`unshare -m` did not return within 30 s"
    if probe.returncode != 0:
        said = probe.stderr.strip()[:200]
        return f"`unshare -m` with a tmpfs is not permitted here: {said} (run as root, or private=False)"
    return None


def _check(workers: object, cores: object, memory: object, private: object, timeouts: dict[str, object]) -> None:
    if not isinstance(private, bool):
        raise TypeError(f"standalone_cluster(private={private!r}): True or False")
    for name, value in (("workers", workers), ("cores", cores)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ValueError(f"standalone_cluster({name}={value!r}): a whole number >= 1, e.g. {name}=2")
    if not isinstance(memory, str) or not MEMORY.match(memory):
        raise ValueError(f"standalone_cluster(memory={memory!r}): Spark's memory string, e.g. memory='1g' or '512m'")
    for name, value in timeouts.items():
        if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"standalone_cluster({name}={value!r}): seconds > 0, e.g. {name}=90")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _wait_for_port(port: int, proc: subprocess.Popen, seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StandaloneClusterError(f"the Spark master exited ({proc.returncode}) before listening: {_tail(log)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise StandaloneClusterError(f"the Spark master did not listen on port {port} within {seconds} s: {_tail(log)}")


def alive_workers(ui_port: int) -> int:
    """The workers the master counts alive, from its JSON page (0 where it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as page:
            return int(json.load(page).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _wait_for_workers(ui_port: int, procs: list[subprocess.Popen], n: int, seconds: float, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if p.poll() is not None:
                log = logs / f"worker{i}.log"
                raise StandaloneClusterError(f"Spark worker {i} exited ({p.returncode}): {_tail(log)}")
        if alive_workers(ui_port) >= n:
            return
        time.sleep(0.3)
    raise StandaloneClusterError(
        f"{alive_workers(ui_port)} of {n} Spark workers registered with the master within {seconds} s: "
        f"{_tail(logs / 'worker0.log')}"
    )


def _kill(procs: list[subprocess.Popen], timeout: float = 30.0) -> None:
    """Every process started, each one's process group, and any descendant that left it: killed, waited for."""
    tree: list[psutil.Process] = []
    for p in procs:
        try:
            tree += psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            pass
    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for child in tree:
        try:
            child.kill()
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    psutil.wait_procs(tree, timeout=timeout)


def _identity(pid: int) -> list[float]:
    """A process as (pid, start time): a pid the system reuses later names another process."""
    return [pid, psutil.Process(pid).create_time()]


def _same(pid: int, started: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return proc if abs(proc.create_time() - started) < 0.01 else None
    except psutil.Error:
        return None


def _mark(base: Path, procs: list[subprocess.Popen]) -> None:
    """The folder's marker, written atomically: who owns the cluster and which processes it started."""
    marker = {"owner": _identity(os.getpid()), "processes": [_identity(p.pid) for p in procs]}
    tmp = base / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(marker))
    os.replace(tmp, base / MARKER)


def sweep_leftover_clusters(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Clusters whose owner died without its exit (a driver killed hard): each `kit-standalone-*`
    folder under `root` (default: the temporary folder) whose marker names an owner that is gone has
    its processes and their descendants killed and the folder removed. The folders swept, returned.
    A marker that cannot be read, or a live owner, leaves the folder alone."""
    swept = []
    for base in sorted(Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        try:
            marker = json.loads((base / MARKER).read_text())
            owner, listed = marker["owner"], marker["processes"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _same(*owner) is not None:
            continue
        alive = [proc for proc in (_same(*pair) for pair in listed) if proc is not None]
        tree = [child for proc in alive for child in _children(proc)]
        for proc in alive + tree:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive + tree, timeout=30)
        shutil.rmtree(base, ignore_errors=True)
        swept.append(base)
    return swept


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _worker_command(
    spark_class: str, i: int, master: str, cores: int, memory: str, base: Path, private: bool
) -> list[str]:
    work = base / "driver-tmp" / f"worker{i}" if private else base / f"worker{i}"
    worker = (
        f"{spark_class} org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores {cores} --memory {memory} "
        f"--work-dir {work} --webui-port {_free_port()} {master}"
    )
    run = f"mkdir -p {work} && TMPDIR={work} SPARK_LOCAL_DIRS={work} exec {worker}"
    if not private:
        return ["sh", "-c", run]
    # inside the namespace: a tmpfs over the driver's TMPDIR, this worker's own disk under it
    inner = f"mount -t tmpfs tmpfs {base / 'driver-tmp'} && {run}"
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner]


@contextmanager
def standalone_cluster(
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    private: bool = False,
    python_path: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    start_timeout: float = 90.0,
    register_timeout: float = 90.0,
) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers of `cores` cores and `memory` each, on 127.0.0.1, for the
    block; every process it started killed at its end. `private`: each worker in a mount namespace
    of its own that hides the driver's TMPDIR (`private_namespaces_missing` says why not, where
    not). `python_path`: where executors import kit from (default: this kit's parent folder).
    `directory`: where its logs, work and shared folders go (kept; default a temporary one, removed).
    Clusters left by a driver that died hard are swept first (`sweep_leftover_clusters`)."""
    _check(workers, cores, memory, private, {"start_timeout": start_timeout, "register_timeout": register_timeout})
    if directory is not None and (not Path(directory).is_dir() or any(Path(directory).iterdir())):
        raise ValueError(f"standalone_cluster(directory={str(directory)!r}): an empty folder that exists, or None")
    missing = private_namespaces_missing(directory) if private else None
    if missing:
        raise StandaloneClusterError(f"standalone_cluster(private=True): {missing}")
    why = spark_missing()
    if why:
        raise SparkUnavailableError(why)
    sweep_leftover_clusters()
    base = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=PREFIX))
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    python_path = python_path or str(Path(__file__).resolve().parents[2])  # the folder holding kit
    logs, driver_tmp, shared = base / "logs", base / "driver-tmp", base / "shared"
    for d in (logs, driver_tmp, shared):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_SUBMIT", "SPARK_"))}
    env.update(SPARK_HOME=str(home), PYTHONPATH=python_path)
    port, ui_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(cmd: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        _mark(base, procs)
        return procs[-1]

    try:
        master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        start([*master, "--webui-port", str(ui_port)], logs / "master.log")
        _wait_for_port(port, procs[0], start_timeout, logs / "master.log")
        for i in range(workers):
            start(_worker_command(spark_class, i, url, cores, memory, base, private), logs / f"worker{i}.log")
        _wait_for_workers(ui_port, procs[1:], workers, register_timeout, logs)
        yield StandaloneCluster(
            url,
            workers,
            cores,
            python_path,
            driver_tmp,
            shared,
            logs,
            private,
            tuple(p.pid for p in procs[1:]),
            {**env, "TMPDIR": str(driver_tmp)},
        )
    finally:
        _kill(procs)
        if directory is None:
            shutil.rmtree(base, ignore_errors=True)
