"""How a round's job is scheduled: Spark's barrier execution and GPU resource profiles.

kit.spark.masters calls these for a master whose `barrier` or `gpus_per_task` is set (a live
SparkContext is needed, so only the argument checks run as doctests):

    >>> from kit.spark.scheduling import check_gpus
    >>> check_gpus("SharedTrainingMaster", 1), check_gpus("SharedTrainingMaster", 0.5)
    (1, 0.5)
    >>> check_gpus("SharedTrainingMaster", 0.7)
    Traceback (most recent call last):
    ValueError: SharedTrainingMaster(gpus_per_task=0.7): GPUs each task needs, a whole number >= 1 or a share ...

Barrier execution: Spark starts all the tasks of a stage together or none, as DL4J's gradient
sharing assumes. A fit with more workers than the cluster's task slots is refused at fit() (Spark
would wait and then fail). A barrier stage allows no change in the number of partitions, so a
barrier round first moves its stored partitions to one partition per worker.

GPUs: the round's job carries a ResourceProfile asking `gpus_per_task` GPUs a task, and each task
builds its network on the GPU Spark gave it (`task_device`). Spark's local mode cannot schedule
GPUs, which fit() says at the call.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from typing import Any

import numpy as np

from kit.core import backend
from kit.core.devices import Device, gpu_count

__all__ = [
    "MoreWorkersThanSlotsWarning",
    "check_cluster",
    "check_gpus",
    "cluster_slots",
    "round_job",
    "task_device",
    "this_task_device",
]


class MoreWorkersThanSlotsWarning(UserWarning):
    """A fit's workers outnumber the cluster's task slots: each round runs in waves (said with both numbers)."""


def check_gpus(owner: str, value: Any) -> float | None:
    if value is None:
        return None
    ok = (
        isinstance(value, int | float | np.integer | np.floating)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )
    if not ok or not ((value >= 1 and float(value).is_integer()) or 0 < value <= 0.5):
        raise ValueError(
            f"{owner}(gpus_per_task={value!r}): GPUs each task needs, a whole number >= 1 or a share of one GPU "
            "<= 0.5 (Spark's rule for fractions); None trains on the executors' default device"
        )
    return int(value) if value >= 1 else float(value)


def cluster_slots(sc: Any) -> int:
    """Tasks the cluster runs at once: local[N]'s N (local[*]: the cores), else the
    defaultParallelism (the executors' cores), each divided by spark.task.cpus."""
    master = sc.master or ""
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if found:
        cores = 1 if found.group(1) is None else (os.cpu_count() or 1) if found.group(1) == "*" else int(found.group(1))
    else:
        cores = sc.defaultParallelism
    return max(1, cores // int(sc.getConf().get("spark.task.cpus", "1")))


def round_job(master: Any, sc: Any, rounds_rdd: Any, data: Any, fn: Any) -> Any:
    """Round k's job: `fn` on every worker's partition; with `barrier`, in one barrier stage
    (Spark starts all its tasks together or none). Spark refuses a PartitionPruningRDD inside
    a barrier stage, so there the round's stored partitions are first moved to one partition
    per worker by a shuffle (one record each). `gpus_per_task`: the job's resource profile."""
    if master.barrier:
        if data.stored_rounds:
            per = data.stored_rounds
            rounds_rdd = rounds_rdd.partitionBy(data.workers, lambda key, per=per: key // per)
        job = rounds_rdd.barrier().mapPartitionsWithIndex(fn)
    else:
        job = rounds_rdd.mapPartitionsWithIndex(fn)
    if master.gpus_per_task:
        from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

        cpus = int(sc.getConf().get("spark.task.cpus", "1"))
        requests = TaskResourceRequests().cpus(cpus).resource("gpu", master.gpus_per_task)
        job = job.withResources(ResourceProfileBuilder().require(requests).build)
    return job


def check_cluster(master: Any, sc: Any, rdd: Any) -> None:
    """What the cluster must offer, checked when fit() is called: room for every worker's
    task at once (barrier: refused; otherwise MoreWorkersThanSlotsWarning, naming both numbers,
    since the round then runs in waves), GPUs Spark can schedule (gpus_per_task). The workers
    are the master's `workers_for(sc)` (num_workers, or defaultParallelism fixed at the first fit)."""
    name = type(master).__name__
    if master.gpus_per_task:
        spark_master = sc.master or ""
        if spark_master.startswith("local"):
            raise ValueError(
                f"{name}(gpus_per_task={master.gpus_per_task!r}): Spark's local mode ({spark_master}) cannot "
                "schedule GPU "
                "resources; run on a standalone, YARN or Kubernetes cluster whose executors declare GPUs "
                "(spark.executor.resource.gpu.amount and a discovery script), or leave gpus_per_task=None "
                "and pick the device with kit.Device"
            )
        declared = sc.getConf().get("spark.executor.resource.gpu.amount")
        if not declared:
            raise ValueError(
                f"{name}(gpus_per_task={master.gpus_per_task!r}): this SparkContext's executors declare no GPUs "
                "(spark.executor.resource.gpu.amount is not set); start the context with it and "
                "spark.executor.resource.gpu.discoveryScript, or leave gpus_per_task=None"
            )
        if float(declared) < master.gpus_per_task:
            raise ValueError(
                f"{name}(gpus_per_task={master.gpus_per_task!r}): each executor declares "
                f"spark.executor.resource.gpu.amount={declared}, fewer than one task asks for"
            )
    workers = master.workers_for(sc)
    source = master.workers_source()
    partitions = rdd.getNumPartitions()
    if master.repartition.value == "NEVER" or (
        master.repartition.value == "NUM_PARTITIONS_WORKERS_DIFFERS" and partitions == workers
    ):
        workers, source = partitions, f"repartition={master.repartition.value!r}: one a partition of the RDD"
    slots = cluster_slots(sc)
    if workers > slots and master.barrier:
        raise ValueError(
            f"{name}(barrier=True): {workers} workers need {workers} tasks running at once, but the cluster "
            f"({sc.master}) has {slots} task slot(s); give num_workers <= {slots} (repartition NEVER: fewer "
            "partitions), add executors or cores, or train with barrier=False"
        )
    if workers > slots:
        warnings.warn(
            f"{name}: {workers} workers ({source}) but the cluster ({sc.master}) has {slots} task slot(s): "
            f"each round runs its {workers} tasks in waves of at most {slots}, and the workers of a later wave "
            f"wait for a free slot. Give num_workers <= {slots} for one wave a round, or add executors or cores",
            MoreWorkersThanSlotsWarning,
            stacklevel=4,
        )


# ---- on the executor: the GPU Spark gave a task ------------------------------------------


def task_device(resources: dict[str, Any] | None) -> Any:
    """The kit device of the GPU Spark gave this task (`TaskContext.get().resources()`): its first
    address, as CuPy numbers the GPUs the executor sees. Says so when Spark gave no GPU address or
    CuPy sees no GPU here."""
    gpu = (resources or {}).get("gpu")
    addresses = list(getattr(gpu, "addresses", None) or [])
    if not addresses:
        raise RuntimeError(
            "gpus_per_task is set but Spark gave this task no GPU address: the executors declare no 'gpu' "
            "resource (spark.executor.resource.gpu.amount and spark.executor.resource.gpu.discoveryScript, "
            "spark.worker.resource.gpu.* on standalone workers)"
        )
    count = gpu_count()
    if count == 0:
        raise RuntimeError(
            f"Spark gave this task GPU {addresses[0]} but kit sees no GPU on this executor "
            f"({backend.gpu_status()[1]}); install kit's gpu extra on the executors, or leave gpus_per_task=None"
        )
    index = int(addresses[0])
    if index >= count:
        raise RuntimeError(
            f"Spark gave this task GPU address {addresses[0]} but CuPy sees {count} GPU(s) on this executor "
            "(CUDA_VISIBLE_DEVICES renumbers them): make the discovery script report CuPy's numbering"
        )
    return Device(f"gpu:{index}")


def this_task_device(gpus_per_task: float | None) -> Any:
    """On an executor, inside a task: the device to train on, the GPU Spark gave the task when the
    job asked for GPUs (`gpus_per_task`), else None (the executor's default device)."""
    if not gpus_per_task:
        return None
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return task_device(ctx.resources() if ctx is not None else None)
