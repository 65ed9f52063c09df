"""What both training masters share: the data prepared once per fit, the round's job, its results.

    >>> from kit.spark.training_master import TrainingMaster
    >>> from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
    >>> issubclass(ParameterAveragingTrainingMaster, TrainingMaster), issubclass(SharedTrainingMaster, TrainingMaster)
    (True, True)

`TrainingMaster.prepare` repartitions the RDD into one partition per worker and exports or caches
each round's mini-batches (`Prepared`, kit.spark.prepared, holds the result); `_submit` runs one round as a Spark job
whose results come back up the aggregation tree; a subclass's `run_round` applies them to the
network (kit.spark.averaging_master, kit.spark.shared_master). `round_diverged` and `timing_sizes` are
the two helpers both `run_round`s call. The whole story of the two masters is in kit.spark.masters,
which re-exports everything here.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from kit.nn.loop import NonFiniteScoreError, StepResult
from kit.nn.workspace_mgr import WorkspaceMode
from kit.spark import executor as ex
from kit.spark import scheduling
from kit.spark.aggregation import array_bytes, check_depth, merge_round, round_partial, tree_aggregate
from kit.spark.checkpoint import CheckpointStore, check_directory, check_every, data_fingerprint
from kit.spark.master_options import (
    RDDTrainingApproach,
    Repartition,
    check_bool,
    check_enum,
    check_export_directory,
    check_int,
    check_real,
    local_path,
)
from kit.spark.prepared import Prepared, disk_only, memory_and_disk, only_partitions, prepared_rounds

__all__ = ["TrainingMaster", "timing_sizes"]


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
        self.barrier = check_bool(name, "barrier", barrier)
        self.gpus_per_task = scheduling.check_gpus(name, gpus_per_task)
        timeout = check_real(name, "round_timeout", round_timeout)
        if not timeout > 0:
            raise ValueError(f"{name}(round_timeout={round_timeout!r}): seconds > 0 (default 300)")
        self.round_timeout = timeout
        self.batch_size_per_worker = check_int(name, "batch_size_per_worker", batch_size_per_worker, 1)
        self._batches_per_round = check_int(
            name, "averaging_frequency" if self.mode == "averaging" else "batches_per_round", batches_per_round, 1
        )
        if num_workers is not None:
            check_int(name, "num_workers", num_workers, 1)
        self.num_workers = num_workers
        # the workers every fit of this master uses: num_workers, or the context's
        # defaultParallelism read once, at the first fit (`workers_for`), and kept after it
        self.resolved_num_workers: int | None = num_workers
        self.rdd_data_set_num_examples = check_int(name, "rdd_data_set_num_examples", rdd_data_set_num_examples, 1)
        self.worker_prefetch_num_batches = check_int(
            name, "worker_prefetch_num_batches", worker_prefetch_num_batches, 0
        )
        self.repartition = check_enum(name, "repartition", repartition, Repartition)
        self.rdd_training_approach = check_enum(
            name, "rdd_training_approach", rdd_training_approach, RDDTrainingApproach
        )
        self.export_directory = check_export_directory(name, export_directory)
        self.collect_training_stats = check_bool(name, "collect_training_stats", collect_training_stats)
        if worker_workspace_mode is not None:
            worker_workspace_mode = check_enum(
                name, "worker_workspace_mode", worker_workspace_mode, WorkspaceMode
            ).value
        self.worker_workspace_mode = worker_workspace_mode
        self.worker_periodic_gc = check_bool(name, "worker_periodic_gc", worker_periodic_gc)
        self.worker_gc_window_ms = check_int(name, "worker_gc_window_ms", worker_gc_window_ms, 0)

    def workers_for(self, sc: Any) -> int:
        """The workers this master trains with: `num_workers`, else the context's
        defaultParallelism as it was at the master's first fit (read once and kept, so that
        executors joining or leaving later do not change the number between fits)."""
        if self.resolved_num_workers is None:
            self.resolved_num_workers = int(sc.defaultParallelism)
        return self.resolved_num_workers

    def workers_source(self) -> str:
        """Where the number of workers came from, in words (for the stats and the warnings)."""
        if self.num_workers is not None:
            return f"num_workers={self.num_workers}"
        return f"num_workers=None: the context's defaultParallelism ({self.resolved_num_workers}) at the first fit"

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
            "num_workers_from": self.workers_source(),
            "task_slots": scheduling.cluster_slots(sc),
            "repartitioned": shuffle,
            "approach": self.rdd_training_approach.value,
        }
        stored = (prepared, runner, workers, per_batch, per_round, num_classes)
        if self.rdd_training_approach is RDDTrainingApproach.EXPORT and self.export_directory is None:
            # Spark's own storage (its executors' disks, fetched by Spark where a task runs):
            # nothing needs a disk shared with the driver or between executors
            data, sizes = prepared_rounds(
                *stored, lambda r: ex.export_records(per_round, per_batch, r), disk_only(), "export"
            )
            setup["examples_per_worker"] = [n for _, n, _ in sorted(sizes)]
            setup["storage"] = "Spark (DISK_ONLY)"
            digests = {w: (n, sha) for w, n, sha in sizes}
        elif self.rdd_training_approach is RDDTrainingApproach.EXPORT:
            setup["storage"] = self.export_directory
            data, digests = self._exported_files(*stored)
        else:  # DIRECT: each round's examples one cached partition, read by that round only
            data, sizes = prepared_rounds(*stored, lambda r: ex.round_records(per_round, r), memory_and_disk(), "cache")
            setup["examples_per_worker"] = [n for _, n, _ in sorted(sizes)]
            digests = {w: (n, sha) for w, n, sha in sizes}
        data.fingerprint = data_fingerprint(per_batch, per_round, data.rounds, workers, digests)
        setup["rounds"] = data.rounds
        setup["prepare_ms"] = (time.perf_counter() - t0) * 1e3
        data.setup = setup
        return data

    def _partitioned(self, sc: Any, rdd: Any) -> tuple[int, Any, bool]:
        """The workers, the elements one example each, and whether they were shuffled to one partition per worker."""
        workers = self.workers_for(sc)
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
        export_dir = tempfile.mkdtemp(prefix="kit-spark-export-", dir=local_path(self.export_directory))
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
            return only_partitions(sc, data.rdd, [w * data.stored_rounds + k for w in range(data.workers)])
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


def round_diverged(results: list[dict], k: int, owner: Any) -> bool:
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
