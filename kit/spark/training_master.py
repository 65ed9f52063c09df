"""What both training masters share: the data prepared once per fit, the round's job, its results.

    >>> from kit.spark.training_master import TrainingMaster
    >>> from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
    >>> issubclass(ParameterAveragingTrainingMaster, TrainingMaster), issubclass(SharedTrainingMaster, TrainingMaster)
    (True, True)

A master's arguments are one frozen options object (kit.spark.master_options).
`TrainingMaster.prepare` gives the fit its data, prepared once per RDD and settings (`Prepared`,
kit.spark.prepared); `_submit` runs one round as a Spark job whose results (kit.spark.wire's
`RoundResult`) come back up the aggregation tree; a subclass's `run_round` applies them to the
network (kit.spark.averaging_master, kit.spark.shared_master). `round_diverged` and
`timing_sizes` are the two helpers both `run_round`s call. The whole story of the two masters is
in kit.spark.masters, which re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from typing import Any, ClassVar

import numpy as np

from kit.nn.loop import NonFiniteScoreError, StepResult
from kit.parallel.wrapper import TrainingMode
from kit.spark import executor as ex
from kit.spark import scheduling
from kit.spark.aggregation import array_bytes, merge_round, round_partial, tree_aggregate
from kit.spark.checkpoint import CheckpointStore
from kit.spark.master_options import MasterOptions, RDDTrainingApproach, Repartition
from kit.spark.prepared import Plan, Prepared, PreparedCache, free, only_partitions, prepare_data
from kit.spark.wire import RoundResult, RoundSource

__all__ = ["TrainingMaster", "timing_sizes"]


class TrainingMaster:
    """What both masters share: the options, preparation, the job runner. A master's arguments
    are its `Options` dataclass's fields (kit.spark.master_options), checked at construction
    and kept frozen in `self.options`; `tm.batch_size_per_worker` and the like read them.
    `round_timeout` (seconds): a Spark job of a fit or evaluation that has not finished within it is
    cancelled, and SparkTrainingError says how many executors were alive; the network keeps its state
    from the last complete round. `aggregation_depth` (DL4J's aggregationDepth): the depth of the tree
    the workers' results come back by (kit.spark.aggregation), evaluation's too.

    kit's scheduling and recovery options (none in DL4J's masters): `checkpoint_every` and
    `checkpoint_directory` (kit.spark.checkpoint), `barrier` and `gpus_per_task`
    (kit.spark.scheduling). The data are prepared once per RDD and settings (kit.spark.prepared): a
    later fit on the same RDD reuses them until `close()` or until newer data take their place.
    """

    Options: ClassVar[type[MasterOptions]] = MasterOptions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = inspect.signature(cls.Options)  # help() and inspect show the options' fields

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            options = self.Options(*args, **kwargs)
        except TypeError as exc:  # an unknown keyword, too many positional arguments
            names = ", ".join(f.name for f in dataclasses.fields(self.Options))
            said = str(exc).replace(f"{self.Options.__name__}.__init__()", f"{type(self).__name__}()")
            raise TypeError(f"{said}; its arguments: {names}") from None
        object.__setattr__(self, "options", options)
        # the workers every fit of this master uses: num_workers, or the context's
        # defaultParallelism read once, at the first fit (`workers_for`), and kept after it
        self.resolved_num_workers: int | None = options.num_workers
        self.prepared = PreparedCache()

    def __getattr__(self, name: str) -> Any:
        """`tm.save_updater`, `tm.repartition`, ...: the options, read (only called for what the
        master itself does not hold)."""
        options = self.__dict__.get("options")
        if options is None or name.startswith("__") or not hasattr(options, name):
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
        return getattr(options, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in {f.name for f in dataclasses.fields(self.Options)}:
            raise AttributeError(
                f"{type(self).__name__}.{name} is fixed at construction (the options are frozen); make another "
                f"master with {name}={value!r}"
            )
        object.__setattr__(self, name, value)

    @property
    def mode(self) -> TrainingMode:
        return self.options.mode

    def workers_for(self, sc: Any) -> int:
        """The workers this master trains with: `num_workers`, else the context's
        defaultParallelism as it was at the master's first fit (read once and kept, so that
        executors joining or leaving later do not change the number between fits)."""
        if self.resolved_num_workers is None:
            self.resolved_num_workers = int(sc.defaultParallelism)
        return self.resolved_num_workers

    def workers_source(self) -> str:
        """Where the number of workers came from, in words (for the stats and the warnings)."""
        if self.options.num_workers is not None:
            return f"num_workers={self.options.num_workers}"
        return f"num_workers=None: the context's defaultParallelism ({self.resolved_num_workers}) at the first fit"

    # ---- preparation -------------------------------------------------------------------
    def prepare(self, sc: Any, rdd: Any, runner: Any, num_classes: int, gang: bool = False) -> Prepared:
        """The fit's data: this master's from an earlier fit on the same RDD and settings, else
        prepared now (kit.spark.prepared); `gang`: stored one partition a worker, for one barrier
        stage. `setup["preparations"]`: 1 if this fit prepared, 0 if not."""
        t0 = time.perf_counter()
        plan = self._plan(sc, rdd, num_classes, gang)
        data = self.prepared.get(plan)
        prepared_now = data is None
        if data is None:
            data = prepare_data(sc, rdd, runner, plan, type(self).__name__)
            self.prepared.keep(plan, data)
        reused = {} if prepared_now else {"retries": 0, "export_runs_swept": 0} if data.paths else {"retries": 0}
        data.setup = {
            **data.setup,
            **reused,  # what this fit did: nothing to retry or sweep when the data were kept
            "num_workers_from": self.workers_source(),
            "task_slots": scheduling.cluster_slots(sc),
            "approach": self.options.rdd_training_approach.value,
            "preparations": int(prepared_now),
            "preparations_total": self.prepared.preparations,
            "prepare_ms": (time.perf_counter() - t0) * 1e3,
        }
        return data

    def _plan(self, sc: Any, rdd: Any, num_classes: int, gang: bool = False) -> Plan:
        o = self.options
        workers, partitions = self.workers_for(sc), rdd.getNumPartitions()
        shuffle = o.repartition is Repartition.ALWAYS or (
            o.repartition is Repartition.NUM_PARTITIONS_WORKERS_DIFFERS and partitions != workers
        )
        if o.rdd_training_approach is RDDTrainingApproach.DIRECT:
            source = RoundSource.CACHED
        else:  # EXPORT: Spark's own storage (nothing needs a disk shared with the driver), or the directory's files
            source = RoundSource.STORED if o.export_directory is None else RoundSource.FILE
        return Plan(
            app=sc.applicationId,
            rdd=rdd.id(),
            workers=workers if shuffle else partitions,
            per_batch=o.batch_size_per_worker,
            per_round=o.steps_per_round,
            shuffle=shuffle,
            source=source,
            export_directory=o.export_directory,
            num_classes=num_classes,
            per_worker=gang and source is not RoundSource.FILE,  # files are read by path, whatever the layout
        )

    def release(self, data: Prepared) -> None:
        """The end of a fit: data this master keeps for later fits stay; any other are freed."""
        if not self.prepared.holds(data):
            free(data)

    def close(self) -> None:
        """Free the data kept for later fits (cached partitions, exported files)."""
        self.prepared.clear()

    # ---- one round -----------------------------------------------------------------------
    def _spec(self, owner: Any, data: Prepared, k: int, keys: tuple[str, ...], sizes: tuple[int, ...]) -> ex.RoundSpec:
        o = self.options
        return ex.RoundSpec(
            config_json=owner.config_json,
            keys=keys,
            sizes=sizes,
            round=k,
            base_iteration=owner.worker_iteration,
            num_classes=owner.network.output_shape[0],
            send_updater=len(keys) > 1,
            source=data.source,
            mode=o.mode,
            workspace_mode=o.worker_workspace_mode,
            periodic_gc=o.worker_periodic_gc,
            gc_window_ms=o.worker_gc_window_ms,
            threshold=o.threshold_settings,
            scaler=ex.scaler_state(owner.network),
            stored_rounds=data.stored_rounds,
            gpus_per_task=o.gpus_per_task,
        )

    def _round_rdd(self, sc: Any, data: Prepared, k: int) -> Any:
        """An RDD of round k's work, one partition per worker in worker order: the stored
        partitions of the round only (Spark's PartitionPruningRDD, so no other round's data is
        read), or one (worker, file) record per partition (EXPORT to a directory)."""
        if data.per_worker:
            raise RuntimeError("round k's partitions asked of data stored one partition a worker (for a gang)")
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
        return CheckpointStore(self.options.checkpoint_directory) if self.options.checkpoint_directory else None

    def training_settings(self) -> dict[str, Any]:
        """The settings a checkpoint's rounds depend on (resuming with others is refused)."""
        return self.options.checkpoint_settings()

    def _submit(
        self, owner: Any, data: Prepared, k: int, keys: tuple[str, ...], workers: dict[int, Any] | None = None
    ) -> tuple[list[RoundResult], np.ndarray | None, int, dict[str, Any]]:
        """Broadcast the state (and `workers`, each worker's own state), run the round's job and
        bring its results back by tree aggregation. Returns the workers' results (state left
        out), the float64 sum of the states of the `trained` workers that sent one, and the
        timings, byte counts and retries (what is counted: `SparkTrainingStats`)."""
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
                partial, tree = tree_aggregate(job, None, round_partial, merge_round, self.options.aggregation_depth)
        finally:
            bc.destroy()
            if workers_bc is not None:
                workers_bc.destroy()
        t2 = time.perf_counter()
        results = sorted(partial.workers if partial else [], key=lambda r: r.worker)
        timing = {
            "start": start,
            "broadcast_ms": (t1 - t0) * 1e3,
            "job_ms": (t2 - t1) * 1e3,
            "broadcast_bytes": array_bytes(flat) + array_bytes(workers),
            "driver_received_bytes": tree["driver_bytes"],
            "partials": tree["partials"],
            "tree_levels": tree["levels"],
            "tree_bytes": tree["tree_bytes"],
            "retries": sum(r.stats.attempt for r in results),  # Spark's retries of the round's tasks
        }
        return results, (partial.sum if partial else None), (partial.trained if partial else 0), timing

    def _results(self, owner: Any, results: list[RoundResult]) -> list[StepResult]:
        return [
            StepResult(float(np.mean(r.scores)), int(sum(r.sizes)), owner.network, r.worker, skipped=all(r.skipped))
            for r in results
            if r.scores
        ]

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        raise NotImplementedError


def round_diverged(results: list[RoundResult], k: int, owner: Any) -> bool:
    """A round whose loss was not finite on some worker is not applied (the TrainingLoop then
    raises NonFiniteScoreError naming the worker, or an early-stopping condition stops); a state
    that is not finite after finite losses is refused here, naming the round and worker."""
    if any(not math.isfinite(v) for r in results for v in r.scores):
        return True
    for r in results:
        if not r.finite:  # checked on the executor: the driver receives sums
            raise NonFiniteScoreError(
                f"Spark round {k} (epoch {owner.epoch}), worker {r.worker}: its parameters are no longer finite "
                "after finite losses; the network keeps the state from before this round. Lower the learning "
                "rate or scale the features"
            )
    return False


def timing_sizes(net: Any, keys: tuple[str, ...]) -> tuple[int, ...]:
    arrays = net.state_arrays()
    return tuple(arrays[key].shape[0] for key in keys)
