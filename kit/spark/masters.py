"""Training masters: how a SparkNetwork spreads a fit over Spark's executors (DL4J's names).

    >>> from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5)
    >>> tm.repartition, tm.rdd_training_approach         # DL4J's defaults
    (<Repartition.ALWAYS: 'ALWAYS'>, <RDDTrainingApproach.EXPORT: 'EXPORT'>)
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    (0.0001, 2)

Both prepare the data once per fit (repartition into one partition per worker, cache or export
to files), then run rounds. A round is one step of kit's TrainingLoop on the driver:

ParameterAveragingTrainingMaster (DL4J 0.x's default): broadcast the flat parameters (and the
updater state when `save_updater`) as one float array; each worker sets them into the network
it built from the JSON config, fits `averaging_frequency` mini-batches of
`batch_size_per_worker` examples, and sends its flat state back up a tree
(`aggregation_depth`, kit.spark.aggregation): executors sum neighbouring workers' states in
float64, in worker order, and the driver divides the sum by the workers that had data in the
round and starts the next round from the mean.

SharedTrainingMaster (DL4J 1.0's default, gradient sharing): each worker adds every step's
update to its residual, threshold-encodes it (kit.parallel.threshold, adaptive threshold) and
applies what it encoded; the messages come back through the same tree, still encoded (a dense
sum would be larger than the sparse messages), and the driver applies their sum in worker
order, then broadcasts the parameters for the next round (they changed by every worker's
messages; an executor cannot be relied on to hold the last round's). Each worker's residual,
updater state and threshold are its own for the whole training, as in DL4J: they go back to
the driver with the messages and out again with the next round, so they last across rounds,
epochs and fits whichever executor (or host) runs the task, and a retried task starts from
exactly the state the failed one started from. The network's updater state is broadcast only
while some worker has none of its own yet (it is where such a worker starts). The network's
updater state after a fit is worker 0's.

Assignment of data (both masters, `repartition` ALWAYS): example i of the RDD (in order, every
element's examples one by one, whatever the elements hold) goes to mini-batch
i // batch_size_per_worker, and mini-batch b to worker b % num_workers, in order; so
in the first epoch, round r of worker w trains on the same mini-batches as ParallelWrapper's
worker w between its averagings. Spark starts a new round at each epoch while ParallelWrapper
counts its averaging period across the boundary, so later epochs keep this only when each
worker's mini-batches per epoch are a multiple of the frequency. With NEVER each existing
partition is one worker and keeps its order.
"""

from __future__ import annotations

import enum
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.nn.loop import NonFiniteScoreError, StepResult
from kit.nn.mixed import LossScaler
from kit.nn.workspace_mgr import WorkspaceMode
from kit.parallel.threshold import threshold_decode
from kit.spark import _executor as ex
from kit.spark import scheduling
from kit.spark.aggregation import array_bytes, check_depth, merge_round, round_partial, tree_aggregate
from kit.spark.checkpoint import CheckpointStore, check_directory, check_every, data_fingerprint

__all__ = [
    "ParameterAveragingTrainingMaster",
    "RDDTrainingApproach",
    "Repartition",
    "SharedTrainingMaster",
    "TrainingMaster",
]


class Repartition(enum.Enum):
    ALWAYS = "ALWAYS"
    NEVER = "NEVER"
    NUM_PARTITIONS_WORKERS_DIFFERS = "NUM_PARTITIONS_WORKERS_DIFFERS"


class RDDTrainingApproach(enum.Enum):
    EXPORT = "EXPORT"  # each round's mini-batches written to .npz files, executors load them
    DIRECT = "DIRECT"  # executors slice their cached partition


@dataclass
class Prepared:
    """The data of one fit, ready for rounds."""

    rdd: Any  # cached RDD: one partition per worker (DIRECT), or None (EXPORT)
    workers: int
    rounds: int
    elements_per_batch: int
    paths: dict[tuple[int, int], str] = field(default_factory=dict)  # EXPORT: (worker, round) -> file
    export_dir: str | None = None
    setup: dict[str, Any] = field(default_factory=dict)
    stored_rounds: int = 0  # EXPORT into Spark's storage: partition w * stored_rounds + k holds (w, k)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # what a checkpoint checks on resuming


def _memory_and_disk() -> Any:
    from pyspark import StorageLevel

    return StorageLevel.MEMORY_AND_DISK


def _disk_only() -> Any:
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


def _local_path(directory: str) -> str:
    """A plain path or a file:// URL as a path (the directory every executor must see)."""
    return directory[len("file://") :] if directory.startswith("file://") else directory


def _check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): must be an integer >= {minimum}")
    return value


def _check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{owner}({name}={value!r}): must be True or False")
    return bool(value)


def _check_enum(owner: str, name: str, value: Any, kind: type[enum.Enum]) -> Any:
    try:
        return kind(value.value if isinstance(value, kind) else value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{owner}({name}={value!r}): must be one of {choices}") from None


def _check_real(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{owner}({name}={value!r}): must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{owner}({name}={value!r}): must be finite")
    return value


def _check_export_directory(name: str, export_directory: Any) -> str | None:
    """None, or a directory on the driver (a path or a file:// URL) that every executor is to see too."""
    if export_directory is None:
        return None
    if not isinstance(export_directory, (str, os.PathLike)):
        raise ValueError(f"{name}(export_directory={export_directory!r}): a path or a file:// URL")
    export_directory = os.fspath(export_directory)
    if "://" in export_directory and not export_directory.startswith("file://"):
        raise ValueError(
            f"{name}(export_directory={export_directory!r}): kit writes mini-batch files to plain paths and "
            "file:// URLs (a directory every executor mounts); for other storage leave export_directory=None "
            "and kit keeps the mini-batches in Spark's own storage"
        )
    if not os.path.isdir(_local_path(export_directory)):
        raise ValueError(
            f"{name}(export_directory={export_directory!r}): not a directory on the driver; give an existing "
            "directory that every executor sees too, or None to keep the mini-batches in Spark's storage"
        )
    return export_directory


def _check_threshold(
    name: str, initial_threshold: Any, min_target_sparsity: Any, max_target_sparsity: Any, decay_rate: Any
) -> dict[str, float]:
    """SharedTrainingMaster's threshold settings, checked: a threshold > 0, sparsities in order, a decay in [0.5, 1)."""
    t = {
        "initial_threshold": _check_real(name, "initial_threshold", initial_threshold),
        "min_target_sparsity": _check_real(name, "min_target_sparsity", min_target_sparsity),
        "max_target_sparsity": _check_real(name, "max_target_sparsity", max_target_sparsity),
        "decay_rate": _check_real(name, "decay_rate", decay_rate),
    }
    if not t["initial_threshold"] > 0:
        raise ValueError(f"{name}(initial_threshold={initial_threshold!r}): must be > 0 (DL4J's default: 1e-4)")
    if not 0 < t["min_target_sparsity"] < t["max_target_sparsity"] <= 1:
        raise ValueError(
            f"{name}(min_target_sparsity={min_target_sparsity!r}, max_target_sparsity={max_target_sparsity!r}): "
            "need 0 < min_target_sparsity < max_target_sparsity <= 1 (DL4J's defaults: 1e-4 and 1e-2)"
        )
    if not 0.5 <= t["decay_rate"] < 1:
        raise ValueError(
            f"{name}(decay_rate={decay_rate!r}): must be in [0.5, 1) (DL4J's default: 0.5 ** (1 / 20) = 0.966)"
        )
    return t


def _only_partitions(sc: Any, rdd: Any, partitions: list[int]) -> Any:
    """The given partitions of `rdd` as an RDD of their own, in `rdd`'s order (Spark's
    PartitionPruningRDD, which PySpark does not expose: reached through the JVM gateway). Its
    tasks read those partitions only, from the cache or storage `rdd` is persisted in."""
    from pyspark import RDD

    jvm = sc._jvm
    keep = jvm.org.apache.spark.api.python.PythonUtils.toSeq(list(partitions)).toSet()  # a Scala Int => Boolean
    pruned = jvm.org.apache.spark.rdd.PartitionPruningRDD.create(rdd._jrdd.rdd(), keep)
    return RDD(pruned.toJavaRDD(), sc, rdd._jrdd_deserializer)


def _stored_rounds(
    prepared: Any,
    runner: Any,
    workers: int,
    per_batch: int,
    per_round: int,
    num_classes: int,
    records: Callable[[int], Any],
    level: Any,
    what: str,
) -> tuple[Prepared, list[tuple[int, int, str]]]:
    """Count each worker's examples, then store each round's as one partition at `level` (written once, here)."""
    sizes = runner(prepared.mapPartitionsWithIndex(ex.count_task(per_batch, num_classes)), "count")
    rounds = max((math.ceil(n / per_round) for _, n, _ in sizes), default=0)
    r = max(rounds, 1)
    stored = prepared.mapPartitionsWithIndex(records(r)).partitionBy(workers * r, lambda key: key).persist(level)
    runner(stored.mapPartitions(lambda it: [sum(1 for _ in it)]), what)
    return Prepared(stored, workers, rounds, per_batch, stored_rounds=r), sizes


class TrainingMaster:
    """What both masters share: the data knobs, preparation, the job runner. `round_timeout`
    (kit's, seconds, default 300): a Spark job of a fit or evaluation (the data preparation, a
    round) that has not finished within it is cancelled, and SparkTrainingError says how many
    executors were alive; the network keeps its state from the last complete round.
    `aggregation_depth` (DL4J's aggregationDepth, default 2): the workers' results come back by
    tree aggregation (kit.spark.aggregation), so the driver receives at most
    ceil(workers ** (1 / depth)) partial results a round; 1 brings every worker's result to the
    driver. Distributed evaluation merges its partitions the same way.

    kit's scheduling and recovery options (none in DL4J's masters):
    `checkpoint_every` (rounds; None or 0: off) and `checkpoint_directory` (a path, a file:// URL,
    or a URL fsspec opens): the driver checkpoints the fit, and `SparkNetwork.fit(...,
    resume=True)` goes on from the latest checkpoint bit for bit (kit.spark.checkpoint).
    `barrier` (default False): each round's job is one Spark barrier stage, every worker's task
    started together or none (Spark's barrier execution); more workers than the cluster's task
    slots is refused when fit() is called. A barrier round first shuffles its stored partitions
    to one partition per worker (Spark allows no PartitionPruningRDD in a barrier stage).
    `gpus_per_task` (None, a whole number, or a share <= 0.5): the round's job asks Spark for
    that many GPUs per task (a ResourceProfile), and each task trains on the GPU whose address
    Spark gave it (`TaskContext.resources()["gpu"]`); Spark's local mode cannot schedule GPUs,
    which fit() says at the call."""

    mode = "averaging"

    def __init__(
        self,
        batch_size_per_worker: int,
        batches_per_round: int,
        num_workers: int | None,
        rdd_data_set_num_examples: int,
        worker_prefetch_num_batches: int,
        repartition: Repartition | str,
        rdd_training_approach: RDDTrainingApproach | str,
        export_directory: str | None,
        collect_training_stats: bool,
        worker_workspace_mode: str | None,
        worker_periodic_gc: bool,
        worker_gc_window_ms: int,
        round_timeout: float = 300.0,
        aggregation_depth: int = 2,
        checkpoint_every: int | None = None,
        checkpoint_directory: str | os.PathLike | None = None,
        barrier: bool = False,
        gpus_per_task: float | None = None,
    ) -> None:
        name = type(self).__name__
        self.aggregation_depth = check_depth(name, aggregation_depth)
        self.checkpoint_every = check_every(name, checkpoint_every)
        self.checkpoint_directory = check_directory(name, checkpoint_directory)
        if self.checkpoint_every and self.checkpoint_directory is None:
            raise ValueError(
                f"{name}(checkpoint_every={checkpoint_every!r}): checkpoints need a checkpoint_directory (a path or "
                "URL the driver writes to, and a later driver reads from)"
            )
        self.barrier = _check_bool(name, "barrier", barrier)
        self.gpus_per_task = scheduling.check_gpus(name, gpus_per_task)
        timeout = _check_real(name, "round_timeout", round_timeout)
        if not timeout > 0:
            raise ValueError(f"{name}(round_timeout={round_timeout!r}): seconds > 0 (default 300)")
        self.round_timeout = timeout
        self.batch_size_per_worker = _check_int(name, "batch_size_per_worker", batch_size_per_worker, 1)
        self._batches_per_round = _check_int(
            name, "averaging_frequency" if self.mode == "averaging" else "batches_per_round", batches_per_round, 1
        )
        if num_workers is not None:
            _check_int(name, "num_workers", num_workers, 1)
        self.num_workers = num_workers
        self.rdd_data_set_num_examples = _check_int(name, "rdd_data_set_num_examples", rdd_data_set_num_examples, 1)
        self.worker_prefetch_num_batches = _check_int(
            name, "worker_prefetch_num_batches", worker_prefetch_num_batches, 0
        )
        self.repartition = _check_enum(name, "repartition", repartition, Repartition)
        self.rdd_training_approach = _check_enum(
            name, "rdd_training_approach", rdd_training_approach, RDDTrainingApproach
        )
        self.export_directory = _check_export_directory(name, export_directory)
        self.collect_training_stats = _check_bool(name, "collect_training_stats", collect_training_stats)
        if worker_workspace_mode is not None:
            worker_workspace_mode = _check_enum(
                name, "worker_workspace_mode", worker_workspace_mode, WorkspaceMode
            ).value
        self.worker_workspace_mode = worker_workspace_mode
        self.worker_periodic_gc = _check_bool(name, "worker_periodic_gc", worker_periodic_gc)
        self.worker_gc_window_ms = _check_int(name, "worker_gc_window_ms", worker_gc_window_ms, 0)

    # ---- preparation -------------------------------------------------------------------
    def prepare(self, sc: Any, rdd: Any, runner: Any, num_classes: int) -> Prepared:
        """Tag each element with where it began, repartition (one partition per worker), cache
        and count, or write the files (EXPORT), checking every element on the way."""
        t0 = time.perf_counter()
        per_batch = self.batch_size_per_worker  # examples, one per element after single_examples
        per_round = per_batch * self._batches_per_round
        workers, prepared, shuffle = self._partitioned(sc, rdd)
        setup: dict[str, Any] = {
            "workers": workers,
            "repartitioned": shuffle,
            "approach": self.rdd_training_approach.value,
        }
        stored = (prepared, runner, workers, per_batch, per_round, num_classes)
        if self.rdd_training_approach is RDDTrainingApproach.EXPORT and self.export_directory is None:
            # Spark's own storage (its executors' disks, fetched by Spark where a task runs):
            # nothing needs a disk shared with the driver or between executors
            data, sizes = _stored_rounds(
                *stored, lambda r: ex.export_records(per_round, per_batch, r), _disk_only(), "export"
            )
            setup["examples_per_worker"] = [n for _, n, _ in sorted(sizes)]
            setup["storage"] = "Spark (DISK_ONLY)"
            digests = {w: (n, sha) for w, n, sha in sizes}
        elif self.rdd_training_approach is RDDTrainingApproach.EXPORT:
            setup["storage"] = self.export_directory
            data, digests = self._exported_files(*stored)
        else:  # DIRECT: each round's examples one cached partition, read by that round only
            data, sizes = _stored_rounds(*stored, lambda r: ex.round_records(per_round, r), _memory_and_disk(), "cache")
            setup["examples_per_worker"] = [n for _, n, _ in sorted(sizes)]
            digests = {w: (n, sha) for w, n, sha in sizes}
        data.fingerprint = data_fingerprint(per_batch, per_round, data.rounds, workers, digests)
        setup["rounds"] = data.rounds
        setup["prepare_ms"] = (time.perf_counter() - t0) * 1e3
        data.setup = setup
        return data

    def _partitioned(self, sc: Any, rdd: Any) -> tuple[int, Any, bool]:
        """The workers, the elements one example each, and whether they were shuffled to one partition per worker."""
        workers = self.num_workers or sc.defaultParallelism
        per_batch = self.batch_size_per_worker
        partitions = rdd.getNumPartitions()
        # errors name the user's partition and element; then one example per element, so that a
        # mini-batch is batch_size_per_worker examples whatever the elements hold (DL4J re-batches)
        rdd = rdd.mapPartitionsWithIndex(ex.tag_elements, True).flatMap(ex.single_examples, True)
        shuffle = self.repartition is Repartition.ALWAYS or (
            self.repartition is Repartition.NUM_PARTITIONS_WORKERS_DIFFERS and partitions != workers
        )
        if not shuffle:
            return partitions, rdd, False
        w = workers

        def keyed(pair: tuple[Any, int]) -> tuple[int, tuple[int, Any]]:
            element, i = pair
            return (i // per_batch) % w, (i, element)

        prepared = (
            rdd.zipWithIndex()
            .map(keyed)
            .partitionBy(w, lambda key: key)
            .mapPartitions(lambda it: (e for _, (_, e) in sorted(it, key=lambda kv: kv[1][0])), True)
        )
        return workers, prepared, True

    def _exported_files(
        self, prepared: Any, runner: Any, workers: int, per_batch: int, per_round: int, num_classes: int
    ) -> tuple[Prepared, dict[int, tuple[int, str]]]:
        """EXPORT to export_directory: each worker's rounds written as files, and each worker's last-round digest."""
        export_dir = tempfile.mkdtemp(prefix="kit-spark-export-", dir=_local_path(self.export_directory))
        try:
            written = runner(
                prepared.mapPartitionsWithIndex(ex.export_task(export_dir, per_round, per_batch, num_classes)),
                "export",
            )
        except BaseException:
            shutil.rmtree(export_dir, ignore_errors=True)
            raise
        paths = {(worker, k): path for worker, k, path, _, _ in written}
        rounds = 1 + max((k for _, k in paths), default=-1)
        data = Prepared(None, workers, rounds, per_batch, paths, export_dir)
        digests = {w: (n, sha) for w, k, _, n, sha in sorted(written, key=lambda rec: rec[1])}  # the last round's
        return data, digests

    def release(self, data: Prepared) -> None:
        if data.rdd is not None:
            data.rdd.unpersist()
        if data.export_dir:
            shutil.rmtree(data.export_dir, ignore_errors=True)

    # ---- one round -----------------------------------------------------------------------
    def _spec(self, owner: Any, data: Prepared, k: int, keys: tuple[str, ...], sizes: tuple[int, ...]) -> ex.RoundSpec:
        return ex.RoundSpec(
            config_json=owner.config_json,
            keys=keys,
            sizes=sizes,
            round=k,
            elements_per_batch=data.elements_per_batch,
            batches_per_round=self._batches_per_round,
            base_iteration=owner.worker_iteration,
            num_classes=owner.network.output_shape[0],
            send_updater=len(keys) > 1,
            mode=self.mode,
            workspace_mode=self.worker_workspace_mode,
            periodic_gc=self.worker_periodic_gc,
            gc_window_ms=self.worker_gc_window_ms,
            threshold=getattr(self, "threshold", {}),
            scaler=ex.scaler_state(owner.network),
            stored_rounds=data.stored_rounds,
            gpus_per_task=self.gpus_per_task,
        )

    def _round_rdd(self, sc: Any, data: Prepared, k: int) -> Any:
        """An RDD of round k's work, one partition per worker in worker order: the stored
        partitions of the round only (Spark's PartitionPruningRDD, so no other round's data is
        read), or one (worker, file) record per partition (EXPORT to a directory)."""
        if data.stored_rounds:
            return _only_partitions(sc, data.rdd, [w * data.stored_rounds + k for w in range(data.workers)])
        records = [(w, data.paths[(w, k)]) for w in range(data.workers) if (w, k) in data.paths]
        return sc.parallelize(records, max(len(records), 1))

    def _job(self, sc: Any, data: Prepared, k: int, fn: Any) -> Any:
        """Round k's job (kit.spark.scheduling: barrier stage, GPU resource profile)."""
        return scheduling.round_job(self, sc, self._round_rdd(sc, data, k), data, fn)

    def check_cluster(self, sc: Any, rdd: Any) -> None:
        """What the cluster must offer, checked when fit() is called (kit.spark.scheduling)."""
        scheduling.check_cluster(self, sc, rdd)

    def checkpoint_store(self) -> CheckpointStore | None:
        return CheckpointStore(self.checkpoint_directory) if self.checkpoint_directory else None

    def training_settings(self) -> dict[str, Any]:
        """The settings a checkpoint's rounds depend on (resuming with others is refused)."""
        return {
            "master": type(self).__name__,
            "batch_size_per_worker": self.batch_size_per_worker,
            "batches_per_round": self._batches_per_round,
            "repartition": self.repartition.value,
            "save_updater": getattr(self, "save_updater", None),
            "threshold": getattr(self, "threshold", None),
        }

    def _submit(
        self, owner: Any, data: Prepared, k: int, keys: tuple[str, ...], workers: dict[int, Any] | None = None
    ) -> tuple[list[dict], np.ndarray | None, int, dict]:
        """Broadcast the state (and `workers`, each worker's own state), run the round's job and
        bring its results back by tree aggregation. Returns the workers' results (state left
        out), the float64 sum of the states of the `trained` workers that sent one, and the
        timings and byte counts (what is counted: `SparkTrainingStats`)."""
        sc, net = owner.sc, owner.network
        sizes = timing_sizes(net, keys)
        start = time.time()
        t0 = time.perf_counter()
        flat = ex.pack_state(net, keys)  # in the state's dtypes (a mixed network's float32 master weights)
        bc = sc.broadcast(flat)
        workers_bc = sc.broadcast(workers) if workers else None
        t1 = time.perf_counter()
        try:
            fn = ex.round_task(self._spec(owner, data, k, keys, sizes), bc, workers_bc)
            job = self._job(sc, data, k, fn)
            with owner.watched(f"round {k}"):
                partial, tree = tree_aggregate(job, None, round_partial, merge_round, self.aggregation_depth)
        finally:
            bc.destroy()
            if workers_bc is not None:
                workers_bc.destroy()
        t2 = time.perf_counter()
        results = sorted(partial["workers"] if partial else [], key=lambda r: r["worker"])
        timing = {
            "start": start,
            "broadcast_ms": (t1 - t0) * 1e3,
            "job_ms": (t2 - t1) * 1e3,
            "broadcast_bytes": array_bytes(flat) + array_bytes(workers),
            "driver_received_bytes": tree["driver_bytes"],
            "partials": tree["partials"],
            "tree_levels": tree["levels"],
            "tree_bytes": tree["tree_bytes"],
        }
        total = partial["sum"] if partial else None
        return results, total, (partial["trained"] if partial else 0), timing

    def _results(self, owner: Any, results: list[dict]) -> list[StepResult]:
        out = []
        for r in results:
            if r["scores"]:
                out.append(StepResult(float(np.mean(r["scores"])), int(sum(r["sizes"])), owner.network, r["worker"]))
        return out

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        raise NotImplementedError


class ParameterAveragingTrainingMaster(TrainingMaster):
    """DL4J's ParameterAveragingTrainingMaster with its defaults: batch_size_per_worker 16,
    averaging_frequency 5, worker_prefetch_num_batches 0, num_workers = the context's
    defaultParallelism, repartition ALWAYS, rdd_training_approach EXPORT, save_updater False
    (DL4J's builder field; its Javadoc says otherwise), collect_training_stats False.
    `worker_prefetch_num_batches` is accepted for DL4J compatibility: a kit worker stacks its
    round's mini-batches before fitting, so there is nothing to prefetch."""

    mode = "averaging"

    def __init__(
        self,
        batch_size_per_worker: int = 16,
        averaging_frequency: int = 5,
        *,
        num_workers: int | None = None,
        rdd_data_set_num_examples: int = 1,
        worker_prefetch_num_batches: int = 0,
        repartition: Repartition | str = Repartition.ALWAYS,
        rdd_training_approach: RDDTrainingApproach | str = RDDTrainingApproach.EXPORT,
        export_directory: str | None = None,
        save_updater: bool = False,
        collect_training_stats: bool = False,
        worker_workspace_mode: str | None = None,
        worker_periodic_gc: bool = True,
        worker_gc_window_ms: int = 5000,
        round_timeout: float = 300.0,
        aggregation_depth: int = 2,
        checkpoint_every: int | None = None,
        checkpoint_directory: str | os.PathLike | None = None,
        barrier: bool = False,
        gpus_per_task: float | None = None,
    ) -> None:
        super().__init__(
            batch_size_per_worker,
            averaging_frequency,
            num_workers,
            rdd_data_set_num_examples,
            worker_prefetch_num_batches,
            repartition,
            rdd_training_approach,
            export_directory,
            collect_training_stats,
            worker_workspace_mode,
            worker_periodic_gc,
            worker_gc_window_ms,
            round_timeout,
            aggregation_depth,
            checkpoint_every,
            checkpoint_directory,
            barrier,
            gpus_per_task,
        )
        self.averaging_frequency = averaging_frequency
        self.save_updater = _check_bool("ParameterAveragingTrainingMaster", "save_updater", save_updater)

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        keys = ex.state_keys(net) if self.save_updater else ("params",)
        results, total, trained, timing = self._submit(owner, data, k, keys)
        t0 = time.perf_counter()
        if _diverged(results, k, owner):  # nothing applied: the loop raises NonFiniteScoreError naming the worker
            trained = 0
        if trained:
            # the float64 sum of the trained workers' states, summed up the tree in worker order
            mean = total.astype(np.float64, copy=trained == 1)
            mean /= trained
            ex.load_state(net, mean, keys, timing_sizes(net, keys))  # each array takes its own dtype
            scalers = [r["scaler"] for r in results if r.get("scaler") is not None]
            if scalers:  # averaged replicas share one scaler state again: the most careful scale
                net.loss_scaler.load_state(LossScaler.merge_states(scalers))
            owner.worker_iteration += max(len(r["scores"]) for r in results)
        timing["aggregate_ms"] = (time.perf_counter() - t0) * 1e3
        return self._results(owner, results), timing, [r["stats"] for r in results]


class SharedTrainingMaster(TrainingMaster):
    """DL4J 1.0's SharedTrainingMaster (gradient sharing), its exchange done through Spark:
    threshold-encoded updates with residuals, AdaptiveThresholdAlgorithm (initial threshold
    1e-4, target sparsity 1e-4..1e-2), worker_prefetch_num_batches 2, periodic GC on executors
    with a 5000 ms window (DL4J's workerTogglePeriodicGC / workerPeriodicGCFrequency).
    `batches_per_round`: mini-batches each worker fits between two exchanges (one Spark job)."""

    mode = "shared"

    def __init__(
        self,
        batch_size_per_worker: int = 16,
        batches_per_round: int = 5,
        *,
        num_workers: int | None = None,
        rdd_data_set_num_examples: int = 1,
        worker_prefetch_num_batches: int = 2,
        repartition: Repartition | str = Repartition.ALWAYS,
        rdd_training_approach: RDDTrainingApproach | str = RDDTrainingApproach.EXPORT,
        export_directory: str | None = None,
        initial_threshold: float = 1e-4,
        min_target_sparsity: float = 1e-4,
        max_target_sparsity: float = 1e-2,
        decay_rate: float = 0.5 ** (1 / 20),
        collect_training_stats: bool = False,
        worker_workspace_mode: str | None = None,
        worker_periodic_gc: bool = True,
        worker_gc_window_ms: int = 5000,
        round_timeout: float = 300.0,
        aggregation_depth: int = 2,
        checkpoint_every: int | None = None,
        checkpoint_directory: str | os.PathLike | None = None,
        barrier: bool = False,
        gpus_per_task: float | None = None,
    ) -> None:
        super().__init__(
            batch_size_per_worker,
            batches_per_round,
            num_workers,
            rdd_data_set_num_examples,
            worker_prefetch_num_batches,
            repartition,
            rdd_training_approach,
            export_directory,
            collect_training_stats,
            worker_workspace_mode,
            worker_periodic_gc,
            worker_gc_window_ms,
            round_timeout,
            aggregation_depth,
            checkpoint_every,
            checkpoint_directory,
            barrier,
            gpus_per_task,
        )
        self.batches_per_round = batches_per_round
        self.threshold = _check_threshold(
            "SharedTrainingMaster", initial_threshold, min_target_sparsity, max_target_sparsity, decay_rate
        )

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        states = owner.shared_worker_states
        keys = ex.state_keys(net) if self._sends_updater_state(states, data.workers) else ("params",)
        results, _, _, timing = self._submit(owner, data, k, keys, states)
        t0 = time.perf_counter()
        total = np.zeros(net.num_params, np.result_type(net.dtype, np.float32))
        if _diverged(results, k, owner):
            results = [{**r, "messages": None, "worker_state": None} for r in results]
        for r in results:  # worker order
            for message in r.get("messages") or []:
                threshold_decode(message, total)
        if results:
            for r in results:
                if r.get("worker_state") is not None:
                    states[r["worker"]] = r["worker_state"]
            arrays = net.state_arrays()
            with net._lock:  # a save() in between sees the round whole
                net.set_params(ex.weights(net).numpy() - total)  # mixed: the float32 master weights
                if states:  # the network's updater state (and loss scale): worker 0's (the lowest that has one)
                    first = states[min(states)]
                    for key, value in first["updater"].items():
                        arrays[key].assign(value)
                    if net.loss_scaler is not None and first.get("scaler") is not None:
                        net.loss_scaler.load_state(first["scaler"])
            owner.worker_iteration += max((len(r["scores"]) for r in results), default=0)
        timing["aggregate_ms"] = (time.perf_counter() - t0) * 1e3
        return self._results(owner, results), timing, [r["stats"] for r in results]

    @staticmethod
    def _sends_updater_state(states: dict[int, Any], workers: int) -> bool:
        """The network's updater state is where a worker without a state of its own starts; once
        every worker has one, a worker would ignore it, so it is not broadcast."""
        return any(w not in states for w in range(workers))


def _diverged(results: list[dict], k: int, owner: Any) -> bool:
    """A round whose loss was not finite on some worker is not applied (the TrainingLoop then
    raises NonFiniteScoreError naming the worker, or an early-stopping condition stops); a state
    that is not finite after finite losses is refused here, naming the round and worker."""
    if any(not math.isfinite(v) for r in results for v in r["scores"]):
        return True
    for r in results:
        if not r.get("finite", True):  # checked on the executor: the driver receives sums
            raise NonFiniteScoreError(
                f"Spark round {k} (epoch {owner.epoch}), worker {r['worker']}: its parameters are no longer finite "
                "after finite losses; the network keeps the state from before this round. Lower the learning "
                "rate or scale the features"
            )
    return False


def timing_sizes(net: Any, keys: tuple[str, ...]) -> tuple[int, ...]:
    arrays = net.state_arrays()
    return tuple(arrays[key].shape[0] for key in keys)
