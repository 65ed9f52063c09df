"""One gang task: a worker that trains for the whole fit inside one Spark barrier stage.

kit.spark.gang builds the task (`rounds_rdd.barrier().mapPartitionsWithIndex(gang_task(...))`);
each worker builds its network (kit.spark.executor.network_for), sets the broadcast state, opens
a collective (kit.spark.collectives) and, for every round of every epoch, runs one of two exchanges:

- "parameters" (DL4J's averaging): `batches_per_round` local steps, then every worker's flat
  state (the updater's too with save_updater) and a 1 go into one float64 all-reduce; the sum
  over the count is the mean every worker goes on from (with two workers the same bits as kit's
  round path; with more, gloo's summation order is not kit's tree's).
- "gradients" (DDP's semantics): every step, each worker's gradient times its batch size, and
  the batch size, go into one all-reduce in the network's precision (a float64 network's in
  float64); the sum over the examples is the gradient of the
  concatenated global batch, which every worker's updater applies (its state kept on every
  worker, identical). A worker with no batch left that step adds zeros and still steps.

A non-finite loss on any worker is counted in the same all-reduce, so every worker stops at the
same step with the state from before it; the driver then raises NonFiniteScoreError. What comes
back: each worker's scores and timings, and rank 0's final state.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.core import memory
from kit.data.dataset import DataSet
from kit.nn.network import Network
from kit.spark import collectives
from kit.spark.elements import PartitionError, partition_error, read_npz
from kit.spark.executor import load_state, network_for, pack_state, state_keys
from kit.spark.scheduling import this_task_device
from kit.spark.wire import RoundSource

__all__ = ["GangSpec", "gang_task"]


@dataclass(frozen=True)
class GangSpec:
    """Everything a gang task needs, as plain values (pickled by Spark with the closure)."""

    config_json: str
    keys: tuple[str, ...]  # the broadcast state's arrays, in order (all of state_keys)
    sizes: tuple[int, ...]
    workers: int
    rounds: int  # rounds an epoch (each worker's mini-batches in groups of batches_per_round)
    first_round: int  # the first epoch starts here (a resumed fit)
    epochs: int
    batches_per_round: int
    source: RoundSource  # where the prepared rounds are (kit.spark.prepared): cached, stored or files
    num_classes: int
    base_iteration: int
    exchange: str  # "parameters" or "gradients"
    save_updater: bool
    collective: str
    timeout: float
    stored_rounds: int
    workspace_mode: str | None = None
    periodic_gc: bool = True
    gc_window_ms: int = 5000
    gpus_per_task: float | None = None
    snapshots: int = 0  # rank 0 keeps its parameters this many times an epoch, with the time and rounds done
    fault: tuple[int, int] | None = None  # tests: (rank, step) at which that worker's process exits


def gang_task(spec: GangSpec, state_bc: Any) -> Any:
    def run(partition: int, it: Iterator[Any]) -> Iterator[dict[str, Any]]:
        from pyspark import BarrierTaskContext

        try:
            yield _Worker(spec, BarrierTaskContext.get(), it).train(state_bc.value)
        except PartitionError:
            raise
        except Exception as exc:
            raise partition_error(partition, "gang", exc) from exc

    return run


def _records_batches(spec: GangSpec, records: list[Any]) -> dict[int, list[DataSet]]:
    """The worker's mini-batches by round, from its records (cut and checked once, when the data
    were prepared: kit.spark.elements): (worker * stored_rounds + round, [(features, labels), ...])
    (CACHED), the same key with .npz bytes (STORED), or (round, path) (FILE)."""
    out: dict[int, list[DataSet]] = {}
    for key, payload in records:
        k = key if spec.source is RoundSource.FILE else key % spec.stored_rounds
        pairs = payload if spec.source is RoundSource.CACHED else read_npz(payload)
        out[k] = [DataSet(x, y, num_classes=spec.num_classes) for x, y in pairs]
    return out


class _Worker:
    """One worker of the gang: its network, its batches, its collective, its counters."""

    def __init__(self, spec: GangSpec, ctx: Any, it: Iterator[Any]) -> None:
        self.spec, self.ctx = spec, ctx
        self.rank = ctx.partitionId()
        self.t0 = time.perf_counter()
        records = [r for r in it if r is not None]
        self.batches = _records_batches(spec, records)
        self.stats: dict[str, Any] = {"worker": self.rank, "pid": os.getpid(), "start": time.time()}
        self.stats["load_ms"] = (time.perf_counter() - self.t0) * 1e3
        self.scores: list[float] = []
        self.sync_s = 0.0
        self.syncs = 0
        self.steps = 0
        self.snapshots: list[tuple[float, int, np.ndarray]] = []

    def train(self, state: np.ndarray) -> dict[str, Any]:
        spec = self.spec
        memory.toggle_periodic_gc(spec.periodic_gc)
        memory.set_auto_gc_window(spec.gc_window_ms)
        device = this_task_device(spec.gpus_per_task)
        net = network_for(spec.config_json, spec.workspace_mode, device)
        self.xp = net.device.xp
        load_state(net, state, spec.keys, spec.sizes)
        net.iteration = spec.base_iteration
        t1 = time.perf_counter()
        mine = [len(self.batches.get(k, [])) for k in range(spec.rounds)]
        coll = collectives.open_collective(spec.collective, self.ctx, spec.timeout, device is not None, hello=mine)
        self.stats["collective"] = coll.name
        try:
            counts = coll.hellos  # every worker's batches a round, in rank order
            self.stats["setup_ms"] = (time.perf_counter() - t1) * 1e3
            t2 = time.perf_counter()
            diverged = self._epochs(net, coll, counts)
            self.stats["train_ms"] = (time.perf_counter() - t2) * 1e3
        finally:
            coll.close()  # peers blocked on this worker fail at once instead of waiting out the timeout
        return self._result(net, diverged)

    def _epochs(self, net: Network, coll: Any, counts: list[list[int]]) -> dict[str, int] | None:
        spec = self.spec
        marks = {math.ceil(spec.rounds * j / spec.snapshots) for j in range(1, spec.snapshots + 1)}
        for epoch in range(spec.epochs):
            for k in range(spec.first_round if epoch == 0 else 0, spec.rounds):
                steps = max(c[k] for c in counts)
                if spec.exchange == "gradients":
                    bad = self._gradient_round(net, coll, k, steps)
                else:
                    bad = self._averaging_round(net, coll, k, steps)
                if bad is not None:
                    return {"epoch": epoch, "round": k, **bad}
                if k + 1 in marks and self.rank == 0:
                    self.snapshots.append((time.time(), epoch * spec.rounds + k + 1, pack_state(net, ("params",))))
        return None

    def _sync(self, coll: Any, buf: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        if coll.name == "nccl":  # NCCL sums device arrays: there and back (UNTESTED here, no GPU executors)
            buf[...] = _host(coll.allreduce_sum(self.xp.asarray(buf)))
        else:
            coll.allreduce_sum(buf)
        self.sync_s += time.perf_counter() - t
        self.syncs += 1
        return buf

    def _maybe_fail(self) -> None:
        fault = self.spec.fault
        if fault is not None and fault == (self.rank, self.steps):
            os._exit(17)  # a test's way to lose this worker's process mid-fit, as a lost executor would

    def _averaging_round(self, net: Network, coll: Any, k: int, steps: int) -> dict[str, int] | None:
        """DL4J's round: local steps, then the mean of the states of the workers that trained."""
        spec = self.spec
        keys = state_keys(net) if spec.save_updater else ("params",)
        if not spec.save_updater:  # DL4J's saveUpdater(false): each round's updater starts fresh
            for arr in net.updater_state.values():
                arr.assign(np.zeros(arr.shape, arr.dtype))
        start_iteration = net.iteration
        finite = True
        batches = self.batches.get(k, [])
        for ds in batches:
            self._maybe_fail()
            score = float(net.fit_batch(ds))
            self.scores.append(score)
            self.steps += 1
            finite = finite and math.isfinite(score)
        flat = pack_state(net, keys) if batches else None
        n = sum(spec.sizes[: len(keys)])
        buf = np.zeros(n + 2, np.float64)
        if flat is not None:
            finite = finite and bool(np.all(np.isfinite(flat)))
            buf[:n] = flat
            buf[n] = 1.0
        buf[n + 1] = 0.0 if finite else 1.0
        self._sync(coll, buf)
        if buf[n + 1] > 0:
            return {"bad_workers": int(buf[n + 1]), "worker": -1 if finite else self.rank}
        mean = buf[:n]
        mean /= buf[n]  # the float64 sum over the workers that trained, as kit's round path divides it
        load_state(net, mean, keys, spec.sizes)
        net.iteration = start_iteration + steps
        return None

    def _gradient_round(self, net: Network, coll: Any, k: int, steps: int) -> dict[str, int] | None:
        """DDP's steps: each step's gradient all-reduced (weighted by examples), applied by every worker."""
        batches = self.batches.get(k, [])
        grads = net.flat_grads
        n = grads.shape[0]
        dtype = np.promote_types(grads.data.dtype, np.float32)  # the network's precision, at least float32
        buf = np.zeros(n + 2, dtype)
        direct = isinstance(grads.data, np.ndarray) and grads.data.dtype == buf.dtype  # the mean written in place
        for s in range(steps):
            self._maybe_fail()
            finite = True
            if s < len(batches):  # every slot of buf written: no zeroing pass
                ds = batches[s]
                score = float(net.compute_gradient_and_score(ds))
                self.scores.append(score)
                np.multiply(_host(grads.data), ds.num_examples, out=buf[:n])
                buf[n] = ds.num_examples
                finite = math.isfinite(score)
                buf[n + 1] = 0.0 if finite else 1.0
            else:
                buf[:] = 0.0
            self._sync(coll, buf)
            if buf[n + 1] > 0:
                return {"bad_workers": int(buf[n + 1]), "step": s, "worker": -1 if finite else self.rank}
            if direct:  # the same division, straight into the gradients (no temporary, no copy)
                np.divide(buf[:n], buf[n], out=grads.data)
            else:
                grads.assign(buf[:n] / buf[n])
            net.apply_update()
            self.steps += 1
        return None

    def _result(self, net: Network, diverged: dict[str, int] | None) -> dict[str, Any]:
        spec = self.spec
        self.stats.update(
            steps=self.steps,
            syncs=self.syncs,
            sync_ms=self.sync_s * 1e3,
            examples=sum(ds.num_examples for b in self.batches.values() for ds in b) * spec.epochs,
            end=time.time(),
        )
        out: dict[str, Any] = {"worker": self.rank, "scores": self.scores, "stats": self.stats, "diverged": diverged}
        out["iteration"] = net.iteration
        if self.rank == 0:
            keys = state_keys(net) if spec.exchange == "gradients" or spec.save_updater else ("params",)
            out["state"], out["state_keys"] = pack_state(net, keys), keys
            out["snapshots"] = self.snapshots
        return out


def _host(arr: Any) -> np.ndarray:
    """A device array's values on the host (CuPy's .get()), a NumPy array as it is."""
    return arr if isinstance(arr, np.ndarray) else arr.get()
