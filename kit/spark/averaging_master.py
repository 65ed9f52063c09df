"""ParameterAveragingTrainingMaster (DL4J 0.x's default): each round, workers fit from the same
parameters and the driver takes the mean of their states.

    >>> from kit.spark import ParameterAveragingTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5)
    >>> tm.mode, tm.averaging_frequency, tm.save_updater
    ('averaging', 5, True)

The round, step by step, is told in kit.spark.masters (which re-exports this class); what both
masters share (preparing the data, running the round's job) is kit.spark.training_master.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from kit.nn.loop import StepResult
from kit.nn.mixed import LossScaler
from kit.spark import executor as ex
from kit.spark.gang import check_gang_options
from kit.spark.master_options import RDDTrainingApproach, Repartition, check_bool
from kit.spark.prepared import Prepared
from kit.spark.training_master import TrainingMaster, round_diverged, timing_sizes

__all__ = ["ParameterAveragingTrainingMaster"]


class ParameterAveragingTrainingMaster(TrainingMaster):
    """DL4J's ParameterAveragingTrainingMaster with its defaults: batch_size_per_worker 16,
    averaging_frequency 5, worker_prefetch_num_batches 0, num_workers = the context's
    defaultParallelism (read at the master's first fit and kept for its later fits; the stats'
    setup says which), repartition ALWAYS, rdd_training_approach EXPORT, collect_training_stats
    False, and save_updater True: the updater's state (Adam's moments) is averaged and broadcast
    with the parameters, so it lasts across averagings, as DL4J's Javadoc says the default is.
    `save_updater=False` (DL4J's builder field) sends the parameters only: every round's workers
    then start their updater from zero, which with Adam and averaging_frequency 5 costs accuracy
    (chapter 7 measures it), for a broadcast a third the size.
    `worker_prefetch_num_batches` is accepted for DL4J compatibility: a kit worker stacks its
    round's mini-batches before fitting, so there is nothing to prefetch.
    kit's `execution` ("auto", "gang", "rounds"), `exchange` ("parameters", or "gradients": DDP's
    all-reduce every step) and `collective` ("auto", "gloo", "nccl", "allgather"): one barrier
    stage for the whole fit, workers exchanging among themselves (kit.spark.gang); execution=None is
    "rounds" for exchange="parameters" (the round-by-round stats and listeners chapter 7 reads) and
    "auto" for "gradients"."""

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
        save_updater: bool = True,
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
        execution: str | None = None,
        exchange: str = "parameters",
        collective: str = "auto",
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
        self.save_updater = check_bool("ParameterAveragingTrainingMaster", "save_updater", save_updater)
        # one barrier stage for the whole fit, or one job a round (kit.spark.gang)
        self.execution, self.exchange, self.collective = check_gang_options(
            "ParameterAveragingTrainingMaster", execution, exchange, collective, averaging_frequency
        )

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        keys = ex.state_keys(net) if self.save_updater else ("params",)
        results, total, trained, timing = self._submit(owner, data, k, keys)
        t0 = time.perf_counter()
        if round_diverged(results, k, owner):  # nothing applied: the loop raises NonFiniteScoreError naming the worker
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
