"""SharedTrainingMaster (DL4J 1.0's default, gradient sharing): workers exchange threshold-encoded
updates, and each keeps its residual, updater state and threshold across rounds.

    >>> from kit.spark import SharedTrainingMaster
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.mode, tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    (<TrainingMode.SHARED_GRADIENTS: 'SHARED_GRADIENTS'>, 0.001, 2)

The round, step by step, is told in kit.spark.masters (which re-exports this class); what both
masters share (preparing the data, running the round's job) is kit.spark.training_master; the
encoding is kit.parallel.threshold.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
import warnings
from typing import Any

import numpy as np

from kit.nn.loop import StepResult
from kit.parallel.threshold import threshold_decode
from kit.spark import executor as ex
from kit.spark.master_options import SharedOptions
from kit.spark.prepared import Prepared
from kit.spark.training_master import TrainingMaster, round_diverged
from kit.spark.wire import SharedWorkerState

__all__ = ["LostWorkerStateWarning", "SharedTrainingMaster"]


class LostWorkerStateWarning(UserWarning):
    """A worker's state was not on the executor that ran its round: it went on from the driver's older copy."""


class SharedTrainingMaster(TrainingMaster):
    """DL4J 1.0's SharedTrainingMaster (gradient sharing), its exchange done through Spark:
    threshold-encoded updates with residuals, AdaptiveThresholdAlgorithm (DL4J's initial threshold),
    worker_prefetch_num_batches and periodic GC on executors as in DL4J. Its arguments are
    `SharedOptions`' fields (kit.spark.master_options). `batches_per_round`: mini-batches each worker
    fits between two exchanges (one Spark job).
    kit's defaults, so that it learns as parameter averaging does and moves fewer bytes:
    `average_updates=True`: each worker encodes its update divided by the number of workers, so a
    round moves the parameters by the workers' mean update (False: DL4J's sum, a step as many times
    Adam's as there are workers). `max_target_sparsity=1/16`: a dense message (2 bits a parameter) is
    within the band, so the threshold stays near the size of Adam's steps. `threshold_update_multiple=1.0`:
    each step's threshold is at least the step's largest update entry (kit.parallel.threshold's
    floor_to_update), since a message moves an entry by one threshold at most (None: DL4J's threshold
    alone). `keep_state_on_driver=False`: each worker's residual and updater state stay on its executor
    between rounds (kit.spark.worker_store); True sends them to the driver and back every round.
    """

    Options = SharedOptions

    @property
    def threshold(self) -> dict[str, float]:
        """The threshold settings as AdaptiveThresholdAlgorithm's keyword arguments (a copy)."""
        return self.options.threshold_settings.as_kwargs()

    def run_round(self, owner: Any, data: Prepared, k: int) -> tuple[list[StepResult], dict, list[dict]]:
        net = owner.network
        states = owner.shared_worker_states  # the driver's (and a checkpoint's) form: worker -> dict
        keys = ex.state_keys(net) if self._sends_updater_state(states, data.workers) else ("params",)
        plan = self._state_plan(owner, data, k)
        owner.__dict__["shared_round_plan"] = plan  # read by _spec
        typed = {w: SharedWorkerState.from_tree(states[w]) for w in plan["send"]}
        results, _, _, timing = self._submit(owner, data, k, keys, typed)
        t0 = time.perf_counter()
        total = np.zeros(net.num_params, np.result_type(net.dtype, np.float32))
        applied = [] if round_diverged(results, k, owner) else results
        for r in applied:  # worker order
            for message in r.messages or []:
                threshold_decode(message, total)
        if results:
            self._keep_states(owner, plan, applied, k)
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
        timing["states_synced"] = plan["sync"]
        return self._results(owner, results), timing, [r.stats.as_row() for r in results]

    def _state_plan(self, owner: Any, data: Prepared, k: int) -> dict[str, Any]:
        """Where the workers' own states are this round (kit.spark.worker_store): the rounds each
        has done, which driver copies go out (those the executors were not seen to hold), and
        whether the whole states come back (`sync`): every round with `keep_state_on_driver` or
        checkpoints, at each epoch's last round, and while some worker has none yet."""
        states = owner.shared_worker_states
        expected = {w: int(s.get("latest", s["rounds"])) for w, s in states.items()}
        if self.options.keep_state_on_driver:
            return {"store": None, "expected": expected, "send": sorted(states), "sync": True}
        token = owner.__dict__.setdefault("shared_store_token", uuid.uuid4().hex)
        seen = owner.__dict__.setdefault("shared_store_seen", {})  # worker -> rounds the executors were seen to keep
        send = sorted(w for w in states if seen.get(w) != expected[w])
        sync = bool(
            self.options.checkpoint_every or k + 1 == data.rounds or any(w not in states for w in range(data.workers))
        )
        return {"store": token, "expected": expected, "send": send, "sync": sync}

    @staticmethod
    def _keep_states(owner: Any, plan: dict[str, Any], applied: list[Any], k: int) -> None:
        """The driver's copies after the round: a worker's whole state where it came back, else
        the count of its rounds only (its state is on the executor); a worker that went on from an
        older copy than its round expected is said in a warning."""
        states, seen = owner.shared_worker_states, owner.__dict__.get("shared_store_seen", {})
        for r in applied:
            if not r.scores:
                continue
            if r.worker_state is not None:
                states[r.worker] = {**r.worker_state.as_tree(), "latest": r.worker_state.rounds}
                done = r.worker_state.rounds
            else:
                done = plan["expected"][r.worker] + 1
                states[r.worker]["latest"] = done
            if plan["store"] is not None:
                seen[r.worker] = done
            if "held no copy" in (r.stats.state_from or ""):
                warnings.warn(
                    f"SharedTrainingMaster: round {k}, worker {r.worker}: the executor that ran it held no copy "
                    f"of the worker's state, which went on from the driver's ({r.stats.state_from}); give the "
                    "master keep_state_on_driver=True for every state to travel with every round",
                    LostWorkerStateWarning,
                    stacklevel=2,
                )

    def _spec(self, owner: Any, data: Prepared, k: int, keys: tuple[str, ...], sizes: tuple[int, ...]) -> ex.RoundSpec:
        plan = owner.__dict__.get("shared_round_plan") or {"store": None, "expected": {}, "sync": True}
        spec = super()._spec(owner, data, k, keys, sizes)
        expected = tuple(sorted(plan["expected"].items()))
        scale = 1 / data.workers if self.options.average_updates else 1.0
        return dataclasses.replace(
            spec,
            store=plan["store"],
            expected=expected,
            sync_state=plan["sync"],
            update_scale=scale,
            threshold_update_multiple=self.options.threshold_update_multiple,
        )

    @staticmethod
    def _sends_updater_state(states: dict[int, Any], workers: int) -> bool:
        """The network's updater state is where a worker without a state of its own starts; once
        every worker has one, a worker would ignore it, so it is not broadcast."""
        return any(w not in states for w in range(workers))
