"""ParameterAveragingTrainingMaster (DL4J 0.x's default): each round, workers fit from the same
parameters and the driver takes the mean of their states.

    >>> from kit.spark import ParameterAveragingTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5)
    >>> tm.mode, tm.averaging_frequency, tm.save_updater
    (<TrainingMode.AVERAGING: 'AVERAGING'>, 5, True)

The round, step by step, is told in kit.spark.masters (which re-exports this class); what both
masters share (preparing the data, running the round's job) is kit.spark.training_master.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kit.nn.loop import StepResult
from kit.nn.mixed import LossScaler
from kit.spark import executor as ex
from kit.spark.master_options import AveragingOptions
from kit.spark.prepared import Prepared
from kit.spark.training_master import TrainingMaster, round_diverged, timing_sizes

__all__ = ["ParameterAveragingTrainingMaster"]


class ParameterAveragingTrainingMaster(TrainingMaster):
    """DL4J's ParameterAveragingTrainingMaster: each round, every worker fits
    `averaging_frequency` mini-batches of `batch_size_per_worker` examples from the same state,
    and the driver takes the mean of their states (a tree sum, kit.spark.aggregation). Its
    arguments are `AveragingOptions`' fields (kit.spark.master_options), DL4J's defaults:
    repartition ALWAYS, rdd_training_approach EXPORT, collect_training_stats False, and save_updater
    True: the updater's state (Adam's moments) is averaged and broadcast with the parameters.
    `save_updater=False` sends the parameters only, and every round's workers start their updater
    from zero (chapter 7 measures what that costs). `worker_prefetch_num_batches` is accepted for
    DL4J compatibility (a kit worker stacks its round's mini-batches first: nothing to prefetch).
    kit's `execution`, `exchange` and `collective` choose one barrier stage for the whole fit
    (kit.spark.gang) or per-round Spark jobs; the fit's stats say which ran: `setup["execution"]`,
    and `setup["rounds_because"]` for rounds.
    """

    Options = AveragingOptions

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        keys = ex.state_keys(net) if self.options.save_updater else ("params",)
        results, total, trained, timing = self._submit(owner, data, k, keys)
        t0 = time.perf_counter()
        if round_diverged(results, k, owner):  # nothing applied: the loop raises NonFiniteScoreError naming the worker
            trained = 0
        if trained:
            # the float64 sum of the trained workers' states, summed up the tree in worker order
            mean = total.astype(np.float64, copy=trained == 1)
            mean /= trained
            ex.load_state(net, mean, keys, timing_sizes(net, keys))  # each array takes its own dtype
            scalers = [r.scaler for r in results if r.scaler is not None]
            if scalers:  # averaged replicas share one scaler state again: the most careful scale
                net.loss_scaler.load_state(LossScaler.merge_states(scalers))
            owner.worker_iteration += max((r.iterations for r in results), default=0)  # what the steps moved
        timing["aggregate_ms"] = (time.perf_counter() - t0) * 1e3
        return self._results(owner, results), timing, [r.stats.as_row() for r in results]
