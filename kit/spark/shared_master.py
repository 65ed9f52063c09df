"""SharedTrainingMaster (DL4J 1.0's default, gradient sharing): workers exchange threshold-encoded
updates, and each keeps its residual, updater state and threshold across rounds.

    >>> from kit.spark import SharedTrainingMaster
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.mode, tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    (<TrainingMode.SHARED_GRADIENTS: 'SHARED_GRADIENTS'>, 0.0001, 2)

The round, step by step, is told in kit.spark.masters (which re-exports this class); what both
masters share (preparing the data, running the round's job) is kit.spark.training_master; the
encoding is kit.parallel.threshold.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kit.nn.loop import StepResult
from kit.parallel.threshold import threshold_decode
from kit.spark import executor as ex
from kit.spark.master_options import SharedOptions
from kit.spark.prepared import Prepared
from kit.spark.training_master import TrainingMaster, round_diverged
from kit.spark.wire import SharedWorkerState

__all__ = ["SharedTrainingMaster"]


class SharedTrainingMaster(TrainingMaster):
    """DL4J 1.0's SharedTrainingMaster (gradient sharing), its exchange done through Spark:
    threshold-encoded updates with residuals, AdaptiveThresholdAlgorithm (initial threshold
    1e-4, target sparsity 1e-4..1e-2), worker_prefetch_num_batches 2, periodic GC on executors
    with a 5000 ms window (DL4J's workerTogglePeriodicGC / workerPeriodicGCFrequency). Its
    arguments are `SharedOptions`' fields (kit.spark.master_options).
    `batches_per_round`: mini-batches each worker fits between two exchanges (one Spark job)."""

    Options = SharedOptions

    @property
    def threshold(self) -> dict[str, float]:
        """The threshold settings as AdaptiveThresholdAlgorithm's keyword arguments (a copy)."""
        return self.options.threshold_settings.as_kwargs()

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        states = owner.shared_worker_states  # the driver's (and a checkpoint's) form: worker -> dict
        keys = ex.state_keys(net) if self._sends_updater_state(states, data.workers) else ("params",)
        typed = {w: SharedWorkerState.from_tree(s) for w, s in states.items()}
        results, _, _, timing = self._submit(owner, data, k, keys, typed)
        t0 = time.perf_counter()
        total = np.zeros(net.num_params, np.result_type(net.dtype, np.float32))
        applied = [] if round_diverged(results, k, owner) else results
        for r in applied:  # worker order
            for message in r.messages or []:
                threshold_decode(message, total)
        if results:
            for r in applied:
                if r.worker_state is not None:
                    states[r.worker] = r.worker_state.as_tree()
            arrays = net.state_arrays()
            with net.lock:  # a save() in between sees the round whole
                net.set_params(ex.weights(net).numpy() - total)  # mixed: the float32 master weights
                if states:  # the network's updater state (and loss scale): worker 0's (the lowest that has one)
                    first = states[min(states)]
                    for key, value in first["updater"].items():
                        arrays[key].assign(value)
                    if net.loss_scaler is not None and first.get("scaler") is not None:
                        net.loss_scaler.load_state(first["scaler"])
            owner.worker_iteration += max((r.iterations for r in results), default=0)  # what the steps moved
        timing["aggregate_ms"] = (time.perf_counter() - t0) * 1e3
        return self._results(owner, results), timing, [r.stats.as_row() for r in results]

    @staticmethod
    def _sends_updater_state(states: dict[int, Any], workers: int) -> bool:
        """The network's updater state is where a worker without a state of its own starts; once
        every worker has one, a worker would ignore it, so it is not broadcast."""
        return any(w not in states for w in range(workers))
