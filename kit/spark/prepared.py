"""A fit's data, prepared once: cut into mini-batches, counted, stored one partition a round,
and kept for the next fit on the same RDD with the same settings.

    >>> from kit.spark.prepared import PreparedCache
    >>> cache = PreparedCache(size=2)
    >>> cache.get("rdd 7, batch 16") is None, cache.preparations
    (True, 0)

`TrainingMaster.prepare` asks its `PreparedCache` first, so a `fit(epochs=1)` in a loop prepares
once (`setup["preparations"]` says which). `prepare_data` tags and cuts the elements
(kit.spark.elements), shuffles the mini-batches to one partition per worker and stores each
(worker, round) as a partition of its own (DIRECT: cached; EXPORT: .npz bytes, or files under
`export_directory`), so a round's job reads only its own (`only_partitions`). A gang stores each
worker's rounds in one partition instead (`Plan.per_worker`).

EXPORT to a directory: each fit's files go to a run directory of their own marked with the driver's
host and pid (`MARKER`); an executor that cannot see it fails at fit, naming it, and each fit sweeps
the run directories whose driver is gone.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import shutil
import socket
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kit.spark import executor as ex
from kit.spark.checkpoint import data_fingerprint
from kit.spark.master_options import local_path
from kit.spark.wire import RoundSource, task_attempt

__all__ = ["MARKER", "Prepared", "PreparedCache", "mini_batches", "prepare_data", "sweep_stale_runs"]

MARKER = "kit-export-run.json"
RUN_PREFIX = "kit-spark-export-"


@dataclass
class Prepared:
    """The data of one fit, ready for rounds."""

    rdd: Any  # the stored rounds (CACHED, STORED), or None (FILE)
    workers: int
    rounds: int
    source: RoundSource = RoundSource.CACHED
    paths: dict[tuple[int, int], str] = field(default_factory=dict)  # FILE: (worker, round) -> file
    export_dir: str | None = None
    setup: dict[str, Any] = field(default_factory=dict)
    stored_rounds: int = 0  # CACHED, STORED: record key w * stored_rounds + k holds (w, k)
    per_worker: bool = False  # CACHED, STORED: partition w holds all of worker w's rounds (for one gang), else (w, k)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # what a checkpoint checks on resuming


def free(data: Prepared) -> None:
    """Unpersist the stored rounds and remove the exported files (a stopped context is fine)."""
    if data.rdd is not None:
        try:
            data.rdd.unpersist()
        except Exception:  # the context that stored them has stopped: Spark dropped them with it
            pass
    if data.export_dir:
        shutil.rmtree(data.export_dir, ignore_errors=True)


class PreparedCache:
    """A master's prepared data per RDD and settings, kept across fits: the `size` most recently
    used; an older one is freed when a newer one takes its place, all by `clear()`. A DataFrame's
    RDD is kept as well (`frame_rdd`), so a DataFrame is prepared once too."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self.entries: collections.OrderedDict[Hashable, Prepared] = collections.OrderedDict()
        self.preparations = 0  # how many times data were prepared (not found here)
        # (app, the plan's semantic hash, how it is read) -> (DataFrame, the RDD read from it)
        self.frames: collections.OrderedDict[Hashable, tuple[Any, Any]] = collections.OrderedDict()

    def frame_rdd(self, df: Any, reading: Hashable, make: Callable[[], Any]) -> Any:
        """The RDD an earlier fit read from a DataFrame Spark sees as the same (`sameSemantics`, the
        rule of Spark's own cache: the same plan over the same sources), read the same way
        (`reading`); else `make()`'s, kept. Its id, kept too, is what finds the prepared rounds."""
        try:
            key = (df.sparkSession.sparkContext.applicationId, df.semanticHash(), reading)
        except Exception:  # a plan Spark cannot hash: read afresh
            return make()
        kept = self.frames.get(key)
        if kept is not None and kept[0].sameSemantics(df):
            self.frames.move_to_end(key)
            return kept[1]
        rdd = make()
        self.frames[key] = (df, rdd)
        while len(self.frames) > self.size:
            self.frames.popitem(last=False)
        return rdd

    def get(self, key: Hashable) -> Prepared | None:
        data = self.entries.get(key)
        if data is not None:
            self.entries.move_to_end(key)
        return data

    def keep(self, key: Hashable, data: Prepared) -> None:
        self.preparations += 1
        self.entries[key] = data
        while len(self.entries) > self.size:
            free(self.entries.popitem(last=False)[1])

    def holds(self, data: Prepared) -> bool:
        return any(kept is data for kept in self.entries.values())

    def clear(self) -> None:
        self.frames.clear()
        while self.entries:
            free(self.entries.popitem(last=False)[1])


def memory_and_disk() -> Any:
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_AND_DISK


def disk_only() -> Any:
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


def only_partitions(sc: Any, rdd: Any, partitions: list[int]) -> Any:
    """The given partitions of `rdd` as an RDD of their own, in `rdd`'s order (Spark's
    PartitionPruningRDD, which PySpark does not expose: reached through the JVM gateway). Its
    tasks read those partitions only, from the cache or storage `rdd` is persisted in."""
    from pyspark import RDD

    jvm = sc._jvm
    keep = jvm.org.apache.spark.api.python.PythonUtils.toSeq(list(partitions)).toSet()  # a Scala Int => Boolean
    pruned = jvm.org.apache.spark.rdd.PartitionPruningRDD.create(rdd._jrdd.rdd(), keep)
    return RDD(pruned.toJavaRDD(), sc, rdd._jrdd_deserializer)


@dataclass(frozen=True)
class Plan:
    """What a preparation depends on (with the RDD's identity, the cache's key)."""

    app: str  # the SparkContext's application
    rdd: int  # the RDD's id in it
    workers: int
    per_batch: int  # examples a mini-batch
    per_round: int  # mini-batches a worker fits in a round
    shuffle: bool  # one partition per worker (else each partition is a worker)
    source: RoundSource
    export_directory: str | None
    num_classes: int
    per_worker: bool = False  # stored one partition a worker (a gang reads them whole), not one a round


def prepare_data(sc: Any, rdd: Any, runner: Callable[[Any, str], list[Any]], plan: Plan, owner: str) -> Prepared:
    """Cut, shuffle, count and store the rounds (or write the files) of `plan`."""
    t0 = time.perf_counter()
    setup: dict[str, Any] = {"workers": plan.workers, "repartitioned": plan.shuffle}
    if plan.source is RoundSource.FILE:  # checked before any of the data moves
        run_dir, setup["export_runs_swept"] = open_export_run(sc, runner, plan, owner)
    batches, attempts = mini_batches(rdd, runner, plan)
    if plan.source is RoundSource.FILE:
        data, digests, more = _exported_files(batches, runner, plan, run_dir)
        setup["storage"] = plan.export_directory
    else:
        data, digests, more = _stored_rounds(batches, runner, plan)
        setup["storage"] = "Spark (DISK_ONLY)" if plan.source is RoundSource.STORED else "Spark (MEMORY_AND_DISK)"
    setup["examples_per_worker"] = [digests.get(w, (0, ""))[0] for w in range(plan.workers)]
    setup["retries"] = sum(attempts) + sum(more)  # Spark's retries of the preparation's tasks
    setup["rounds"] = data.rounds
    setup["prepare_ms"] = (time.perf_counter() - t0) * 1e3
    data.fingerprint = data_fingerprint(
        plan.per_batch, plan.per_batch * plan.per_round, data.rounds, plan.workers, digests
    )
    data.setup = setup
    return data


def mini_batches(rdd: Any, runner: Callable[[Any, str], list[Any]], plan: Plan) -> tuple[Any, list[int]]:
    """Each worker's mini-batches in order: example i of the RDD in mini-batch b = i // per_batch, and
    mini-batch b with worker b % workers (shuffle), or each partition's own (no shuffle)."""
    tagged = rdd.mapPartitionsWithIndex(ex.tag_elements, True)
    if not plan.shuffle:
        cut = ex.cut_task(plan.per_batch, plan.num_classes, None)
        return tagged.mapPartitionsWithIndex(cut, True).mapPartitions(ex.join_pieces, True), []
    counted = sorted(runner(tagged.mapPartitionsWithIndex(ex.count_examples), "count"))
    offsets = list(itertools.accumulate((n for _, n, _ in counted), initial=0))
    cut = ex.cut_task(plan.per_batch, plan.num_classes, offsets)
    pieces = tagged.mapPartitionsWithIndex(cut).partitionBy(plan.workers, _identity)  # b % workers
    return pieces.mapPartitions(ex.join_pieces, True), [a for *_, a in counted]


def _identity(key: int) -> int:
    return key


def _stored_rounds(
    batches: Any, runner: Callable[[Any, str], list[Any]], plan: Plan
) -> tuple[Prepared, dict[int, tuple[int, str]], list[int]]:
    """Count each worker's mini-batches, then store each round's as one partition (written once, here)."""
    sizes = runner(batches.mapPartitionsWithIndex(ex.count_task), "count")
    rounds = max((math.ceil(nb / plan.per_round) for _, _, nb, _, _ in sizes), default=0)
    r = max(rounds, 1)
    cached = plan.source is RoundSource.CACHED
    records = (ex.round_records if cached else ex.export_records)(plan.per_round, r)
    level = memory_and_disk() if cached else disk_only()
    keyed = batches.mapPartitionsWithIndex(records)
    if plan.per_worker:  # a gang's worker reads its partition whole: workers tasks, not workers x rounds
        stored = keyed.partitionBy(plan.workers, lambda key, r=r: key // r).persist(level)
    else:
        stored = keyed.partitionBy(plan.workers * r, _identity).persist(level)
    done = runner(stored.mapPartitions(_count_and_attempt), "cache" if cached else "export")
    data = Prepared(stored, plan.workers, rounds, plan.source, stored_rounds=r, per_worker=plan.per_worker)
    digests = {w: (n, sha) for w, n, _, sha, _ in sizes}
    return data, digests, [a for *_, a in sizes] + [a for _, a in done]


def _count_and_attempt(it: Iterator[Any]) -> Iterator[tuple[int, int]]:
    yield sum(1 for _ in it), task_attempt()


def _exported_files(
    batches: Any, runner: Callable[[Any, str], list[Any]], plan: Plan, run_dir: str
) -> tuple[Prepared, dict[int, tuple[int, str]], list[int]]:
    """EXPORT to a directory: each worker's rounds written as files, and each worker's last-round digest."""
    try:
        written = runner(batches.mapPartitionsWithIndex(ex.export_task(run_dir, plan.per_round)), "export")
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    paths = {(w, k): path for w, k, path, _, _, _ in written}
    rounds = 1 + max((k for _, k in paths), default=-1)
    data = Prepared(None, plan.workers, rounds, RoundSource.FILE, paths, run_dir)
    weakref.finalize(data, shutil.rmtree, run_dir, True)  # this process's files go with the data, or at exit
    digests = {w: (n, sha) for w, k, _, n, sha, _ in sorted(written, key=lambda rec: rec[1])}  # the last round's
    return data, digests, [a for *_, a in written]


# ---- the export directory: a run directory with a marker, checked from an executor, swept -----


def open_export_run(sc: Any, runner: Callable[[Any, str], list[Any]], plan: Plan, owner: str) -> tuple[str, int]:
    """A new run directory under export_directory, with its marker; the stale runs swept first.
    Checked from an executor (one task a worker) before any round: fails at once, naming the
    directory, where the executors do not see what the driver wrote."""
    root = local_path(plan.export_directory or "")
    swept = len(sweep_stale_runs(root))
    run_dir = tempfile.mkdtemp(prefix=RUN_PREFIX, dir=root)
    token = uuid.uuid4().hex
    marker = {"host": socket.gethostname(), "pid": os.getpid(), "token": token, "started": time.time()}
    with open(os.path.join(run_dir, MARKER), "w") as f:
        json.dump(marker, f)
    try:
        probe = sc.parallelize(range(plan.workers), plan.workers).mapPartitions(check_run_task(run_dir, token))
        failed = [(host, why) for ok, host, why in runner(probe, "export directory check") if not ok]
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if failed:
        shutil.rmtree(run_dir, ignore_errors=True)
        host, why = failed[0]
        raise ValueError(
            f"{owner}(export_directory={plan.export_directory!r}): {len(failed)} executor task(s) cannot use "
            f"{run_dir}, which the driver made there (on {host}: {why}). Give a directory every executor "
            "mounts at the same path (a shared file system), or export_directory=None to keep the mini-batches "
            "in Spark's own storage"
        )
    return run_dir, swept


def check_run_task(run_dir: str, token: str) -> Callable[[Iterator[Any]], Iterator[tuple[bool, str, str]]]:
    """On an executor: the driver's marker is there with this run's token, and a file can be written."""

    def run(it: Iterator[Any]) -> Iterator[tuple[bool, str, str]]:
        list(it)
        host = socket.gethostname()
        try:
            with open(os.path.join(run_dir, MARKER)) as f:
                if json.load(f).get("token") != token:
                    yield False, host, "its marker belongs to another run"
                    return
            probe = os.path.join(run_dir, f".probe-{uuid.uuid4().hex}")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
        except OSError as exc:
            yield False, host, f"{type(exc).__name__}: {exc}"
            return
        yield True, host, ""

    return run


def sweep_stale_runs(root: str) -> list[str]:
    """Remove the run directories under `root` whose driver process is gone (same host, pid not
    running); runs of live drivers, of other hosts and without a marker are left alone."""
    removed = []
    host = socket.gethostname()
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name)
        try:
            with open(os.path.join(path, MARKER)) as f:
                marker = json.load(f)
        except (OSError, ValueError):
            continue  # not a run, or one whose marker is being written
        pid = marker.get("pid")
        if marker.get("host") == host and isinstance(pid, int) and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
