"""A fit's data, stored once in Spark for all its rounds: `Prepared`, and the storing.

    >>> from kit.spark.prepared import Prepared
    >>> Prepared(rdd=None, workers=2, rounds=3, elements_per_batch=16).stored_rounds
    0

`TrainingMaster.prepare` (kit.spark.training_master) fills one: with the EXPORT approach and no
export directory, or with DIRECT, each worker's examples are counted and each (worker, round) is
stored as one partition of its own (`prepared_rounds`), on disk or in memory and on disk; a round's
job then reads only its own partitions (`only_partitions`). Re-exported by kit.spark.masters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.spark import executor as ex

__all__ = ["Prepared"]


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


def prepared_rounds(
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
