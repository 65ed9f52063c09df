"""One long gang per fit: a single Spark barrier stage whose tasks train for the whole fit.

    >>> from kit.spark import ParameterAveragingTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(16, 1, execution="gang", exchange="gradients")
    >>> tm.execution, tm.exchange, tm.collective          # DDP's semantics, on gloo where torch imports
    ('gang', 'gradients', 'auto')
    >>> ParameterAveragingTrainingMaster(16, 5, exchange="gradients")
    Traceback (most recent call last):
    ValueError: ParameterAveragingTrainingMaster(averaging_frequency=5, exchange='gradients'): ...

kit's rounds (kit.spark.training_master) run one Spark job per averaging: far more Spark than
training. A gang runs one job for the fit: one partition per worker, `rdd.barrier().mapPartitions`
starts every worker at once, and the workers exchange state among themselves (kit.spark.collectives)
until the last epoch; the driver gets rank 0's final state and every worker's scores and timings.

`execution`: "auto" (default) runs a gang where one can run and the rounds otherwise, with
GangFallbackWarning naming why; "gang" refuses, naming why; "rounds" is the per-round path.
`why_not_gang` lists what a gang cannot do: what Spark refuses a barrier stage, listeners,
checkpoints between rounds, a mixed-precision loss scaler; "auto" also skips a gang whose only
collective is Spark's allGather (`slow_collective`: about a second an averaging).

`exchange`: "parameters" (DL4J's averaging) or "gradients" (DDP: an all-reduce every step;
averaging_frequency must be 1). Every wait on peers is bounded by the master's round_timeout.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from kit.nn.loop import NonFiniteScoreError
from kit.spark import collectives, scheduling
from kit.spark.executor import load_state, pack_state, state_keys
from kit.spark.gang_worker import GangSpec, gang_task
from kit.spark.master_options import EXCHANGES, EXECUTIONS, Repartition, check_gang_options
from kit.spark.prepared import Prepared

__all__ = [
    "EXCHANGES",
    "EXECUTIONS",
    "GangFallbackWarning",
    "check_gang_options",
    "record_execution",
    "run_gang",
    "use_gang",
]


class GangFallbackWarning(UserWarning):
    """execution="auto" trains in rounds because a gang cannot run here (the message says why)."""


def gang_workers(master: Any, sc: Any, rdd: Any) -> int:
    """The workers a fit of this master trains with (as kit.spark.scheduling.check_cluster counts them)."""
    partitions, repartition = rdd.getNumPartitions(), master.options.repartition
    if repartition is Repartition.NEVER or (
        repartition is Repartition.NUM_PARTITIONS_WORKERS_DIFFERS and partitions == master.workers_for(sc)
    ):
        return partitions
    return master.workers_for(sc)


def why_not_gang(master: Any, sc: Any, rdd: Any, network: Any, listeners: list[Any]) -> str | None:
    """Why this fit cannot run as a gang, in words, or None."""
    if not hasattr(master, "execution"):
        return f"{type(master).__name__} trains in rounds (it has no gang: its updates go through the driver)"
    if master.execution == "rounds":
        return "execution='rounds'"
    why = barrier_blocker(sc.getConf(), gang_workers(master, sc, rdd), scheduling.cluster_slots(sc), sc.master)
    if why:
        return why
    if master.checkpoint_every:
        return f"checkpoint_every={master.checkpoint_every}: checkpoints are written between rounds, on the driver"
    if listeners:
        return f"{len(listeners)} listener(s) given: listeners see the model between rounds, on the driver"
    if network.loss_scaler is not None:
        return "a mixed-precision network: its loss scaler's state is merged between rounds"
    if master.execution == "auto":  # "gang" runs one on any collective
        return slow_collective(master.collective, collectives.available(bool(master.gpus_per_task)))
    return None


def slow_collective(collective: str, available: str) -> str | None:
    """Why execution="auto" should not run a gang on `collective` when "auto" would open
    `available` here (kit.spark.collectives.available), or None. Spark's BarrierTaskContext looks
    for an allGather's answer once a second (it sleeps 1 s between looks), so a gang whose
    all-reduces go through allGather waits up to about a second an averaging, where a round is
    one Spark job.

        >>> slow_collective("auto", "gloo") is None and slow_collective("nccl", "allgather") is None
        True
        >>> print(slow_collective("auto", "allgather"))
        the gang's collective would be Spark's allGather (torch.distributed's Gloo is not importable here), ...
    """
    if collective == "allgather" or (collective == "auto" and available == "allgather"):
        where = (
            "collective='allgather'" if collective == "allgather" else "torch.distributed's Gloo is not importable here"
        )
        return (
            f"the gang's collective would be Spark's allGather ({where}), whose answer Spark looks for once a "
            "second (BarrierTaskContext sleeps 1 s between looks), so each averaging would wait up to about a second; "
            "install torch for Gloo, or use execution='gang' to run a gang on allGather anyway"
        )
    return None


def barrier_blocker(conf: Any, workers: int, slots: int, spark_master: str) -> str | None:
    """Why Spark would refuse a barrier stage of `workers` tasks with this SparkConf and `slots`
    task slots, or None. Spark's DAGScheduler refuses one at submission under dynamic allocation
    (SPARK-24942; Spark ignores dynamic allocation on a local master unless
    spark.dynamicAllocation.testing) and when it needs more slots than the cluster has
    (SPARK-24819); its third refusal, an RDD chain that changes the partition count inside the
    stage, cannot happen here: the gang's RDD is a shuffle's or a parallelize's output.

        >>> from pyspark import SparkConf
        >>> barrier_blocker(SparkConf(loadDefaults=False), 2, 2, "local[2]") is None
        True
        >>> dynamic = SparkConf(loadDefaults=False).set("spark.dynamicAllocation.enabled", "true")
        >>> print(barrier_blocker(dynamic, 2, 8, "yarn"))
        Spark's dynamic allocation is on (spark.dynamicAllocation.enabled=true): Spark refuses barrier stages under it
        >>> barrier_blocker(dynamic, 2, 8, "local[8]") is None   # a local master ignores it, as Spark does
        True
        >>> print(barrier_blocker(SparkConf(loadDefaults=False), 3, 2, "local[2]"))
        3 workers need 3 tasks at once but the cluster (local[2]) has 2 task slot(s)
    """
    local = spark_master == "local" or spark_master.startswith("local[")
    testing = str(conf.get("spark.dynamicAllocation.testing", "false")).lower() == "true"
    if str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true" and (not local or testing):
        return (
            "Spark's dynamic allocation is on (spark.dynamicAllocation.enabled=true): Spark refuses barrier stages "
            "under it"
        )
    if workers > slots:
        return (
            f"{workers} workers need {workers} tasks at once but the cluster ({spark_master}) has {slots} task slot(s)"
        )
    return None


def use_gang(owner: Any, rdd: Any, listeners: list[Any]) -> str | None:
    """None when this fit runs as a gang, else why it trains in rounds: execution "gang" refuses
    what cannot run as one, "auto" (the default) warns with GangFallbackWarning and falls back."""
    master = owner.training_master
    why = why_not_gang(master, owner.sc, rdd, owner.network, listeners)
    if why is None:
        return None
    name, execution = type(master).__name__, getattr(master, "execution", "rounds")  # SharedTrainingMaster: rounds
    if execution == "gang":
        raise ValueError(
            f"{name}(execution='gang'): this fit cannot run as one barrier stage: {why}; use execution='auto' "
            "(a gang where one can run, rounds otherwise) or 'rounds'"
        )
    if execution == "auto":
        warnings.warn(
            f"{name}(execution='auto') trains in rounds (one Spark job an averaging): {why}"
            + (
                "; the rounds average the parameters every step, not the gradients (DDP's semantics need a gang)"
                if getattr(master, "exchange", "parameters") == "gradients"
                else ""
            ),
            GangFallbackWarning,
            stacklevel=3,
        )
    return why


def record_execution(stats: Any, why_rounds: str | None) -> None:
    """The fit's stats say which execution ran and, for rounds, why no gang did."""
    stats.setup["execution"] = "rounds" if why_rounds else "gang"
    if why_rounds:
        stats.setup["rounds_because"] = why_rounds


def _gang_rdd(sc: Any, prepared: Prepared) -> Any:
    """Every round of worker w in partition w: the stored (worker * stored_rounds + round, payload)
    records as they were stored (per_worker), else moved by one shuffle, or the exported files'
    (round, path) records."""
    if prepared.per_worker:
        return prepared.rdd
    if prepared.stored_rounds:
        per = prepared.stored_rounds
        return prepared.rdd.partitionBy(prepared.workers, lambda key, per=per: key // per)
    by_worker = [
        [(k, path) for (w2, k), path in sorted(prepared.paths.items()) if w2 == w] for w in range(prepared.workers)
    ]
    return sc.parallelize(by_worker, prepared.workers).flatMap(lambda records: records)


def _spec(owner: Any, prepared: Prepared, first: int, epochs: int, keys: tuple[str, ...]) -> GangSpec:
    master, net = owner.training_master, owner.network
    return GangSpec(
        config_json=owner.config_json,
        keys=keys,
        sizes=tuple(net.state_arrays()[k].shape[0] for k in keys),
        workers=prepared.workers,
        rounds=prepared.rounds,
        first_round=first,
        epochs=epochs,
        batches_per_round=master.averaging_frequency,
        source=prepared.source,
        num_classes=net.output_shape[0],
        base_iteration=owner.worker_iteration,
        exchange=master.exchange,
        save_updater=master.save_updater,
        collective=master.collective,
        timeout=master.round_timeout,
        stored_rounds=prepared.stored_rounds,
        workspace_mode=master.worker_workspace_mode,
        periodic_gc=master.worker_periodic_gc,
        gc_window_ms=master.worker_gc_window_ms,
        gpus_per_task=master.gpus_per_task,
        snapshots=int(getattr(master, "gang_snapshots", 0)),
        fault=getattr(master, "gang_fault", None),
    )


def run_gang(owner: Any, run: Any, rounds: Any) -> None:
    """The fit's remaining epochs as one barrier job; the network then holds rank 0's final state."""
    sc, net, master = owner.sc, owner.network, owner.training_master
    prepared, epochs = run.prepared, rounds.epochs_left
    keys = state_keys(net)
    spec = _spec(owner, prepared, rounds.first, epochs, keys)
    t0 = time.perf_counter()
    bc = sc.broadcast(pack_state(net, keys))
    try:
        job = scheduling_job(master, sc, _gang_rdd(sc, prepared).barrier().mapPartitionsWithIndex(gang_task(spec, bc)))
        syncs = epochs * prepared.rounds
        with owner.watched("gang", timeout=master.round_timeout * (syncs + 2)):
            results = sorted(job.collect(), key=lambda r: r["worker"])
    finally:
        bc.destroy()
    _apply(owner, run, results, epochs, prepared.rounds - rounds.first + (epochs - 1) * prepared.rounds)
    run.stats.setup["gang"] = _gang_stats(results, spec, (time.perf_counter() - t0) * 1e3)
    run.stats.workers.extend(r["stats"] for r in results)
    if spec.snapshots:  # (time, rounds done, parameters): kit.bench.spark_peers
        owner.gang_snapshots = results[0].get("snapshots", []) if results else []


def scheduling_job(master: Any, sc: Any, job: Any) -> Any:
    """The gang's job with the master's GPU resource profile (kit.spark.scheduling's), if it asks for GPUs."""
    if not master.gpus_per_task:
        return job
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    requests = TaskResourceRequests().cpus(cpus).resource("gpu", master.gpus_per_task)
    return job.withResources(ResourceProfileBuilder().require(requests).build)


def _apply(owner: Any, run: Any, results: list[dict[str, Any]], epochs: int, rounds_run: int) -> None:
    """Rank 0's state into the network, the counters moved as the rounds would have moved them."""
    bad = [r for r in results if r["diverged"]]
    if bad:
        raise NonFiniteScoreError(_diverged(owner, bad))
    first = results[0]
    net = owner.network
    keys = tuple(first["state_keys"])
    load_state(net, first["state"], keys, tuple(net.state_arrays()[k].shape[0] for k in keys))
    owner.worker_iteration = first["iteration"]
    owner.iteration += rounds_run
    owner.epoch += epochs
    per_step = [r["scores"] for r in results if r["scores"]]
    if per_step:
        owner.last_score = float(np.mean([s[-1] for s in per_step]))
    run.position.update(epoch=owner.epoch, round=0)


def _diverged(owner: Any, bad: list[dict[str, Any]]) -> str:
    """The words of a gang's NonFiniteScoreError, naming the worker that diverged as the rounds do
    (kit.nn.loop's "(epoch e, worker w): the loss is nan")."""
    own = [r for r in bad if r["diverged"].get("worker", -1) >= 0] or bad  # the worker that saw it, not its peers
    where, worker = own[0]["diverged"], own[0]["diverged"].get("worker", -1)
    last = own[0]["scores"][-1] if own[0]["scores"] else float("nan")
    what = f"the loss is {last}" if not np.isfinite(last) else "its state is no longer finite"
    return (
        f"Spark gang (epoch {owner.epoch + where['epoch']}, worker {worker}): {what} in round {where['round']}; "
        "every worker stopped there and the network keeps its state from before the fit. Lower the learning rate or "
        "scale the features"
    )


def _gang_stats(results: list[dict[str, Any]], spec: GangSpec, wall_ms: float) -> dict[str, Any]:
    """What the gang did: its collective, steps and all-reduces, and the time spent waiting in them."""
    s = [r["stats"] for r in results]
    steps = max((w["steps"] for w in s), default=0)
    return {
        "exchange": spec.exchange,
        "collective": s[0].get("collective") if s else None,
        "workers": len(s),
        "steps": steps,
        "syncs": max((w["syncs"] for w in s), default=0),
        "sync_ms_per_step": max((w["sync_ms"] for w in s), default=0.0) / max(steps, 1),
        "train_ms": max((w.get("train_ms", 0.0) for w in s), default=0.0),
        "setup_ms": max((w.get("setup_ms", 0.0) for w in s), default=0.0),
        "wall_ms": wall_ms,
    }
