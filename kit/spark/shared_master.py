"""SharedTrainingMaster (DL4J 1.0's default, gradient sharing): workers exchange threshold-encoded
updates, and each keeps its residual, updater state and threshold across rounds.

    >>> from kit.spark import SharedTrainingMaster
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.mode, tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    ('shared', 0.0001, 2)

The round, step by step, is told in kit.spark.masters (which re-exports this class); what both
masters share (preparing the data, running the round's job) is kit.spark.training_master; the
encoding is kit.parallel.threshold.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from kit.nn.loop import StepResult
from kit.parallel.threshold import threshold_decode
from kit.spark import executor as ex
from kit.spark.master_options import RDDTrainingApproach, Repartition, check_threshold
from kit.spark.prepared import Prepared
from kit.spark.training_master import TrainingMaster, round_diverged

__all__ = ["SharedTrainingMaster"]


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
        self.threshold = check_threshold(
            "SharedTrainingMaster", initial_threshold, min_target_sparsity, max_target_sparsity, decay_rate
        )

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        states = owner.shared_worker_states
        keys = ex.state_keys(net) if self._sends_updater_state(states, data.workers) else ("params",)
        results, _, _, timing = self._submit(owner, data, k, keys, states)
        t0 = time.perf_counter()
        total = np.zeros(net.num_params, np.result_type(net.dtype, np.float32))
        if round_diverged(results, k, owner):
            results = [{**r, "messages": None, "worker_state": None} for r in results]
        for r in results:  # worker order
            for message in r.get("messages") or []:
                threshold_decode(message, total)
        if results:
            for r in results:
                if r.get("worker_state") is not None:
                    states[r["worker"]] = r["worker_state"]
            arrays = net.state_arrays()
            with net.lock:  # a save() in between sees the round whole
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
