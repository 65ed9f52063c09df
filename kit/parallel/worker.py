"""ParallelWrapper's workers: one thread pinned to one device with one replica, running tasks in order.

    >>> from kit.core.devices import as_device
    >>> from kit.nn import mlp
    >>> from kit.parallel import ParallelWrapper
    >>> from kit.parallel.worker import Worker
    >>> with ParallelWrapper(mlp(4, hidden=(8,), n_out=2), workers=1) as pw:
    ...     worker = Worker(9, pw.replicas[0], as_device("cpu:0"), pw)
    ...     worker.submit(lambda w: (w.index, w.replica.num_params))
    ...     worker.result()
    ...     worker.stop()
    (9, 58)

The wrapper hands each worker a task (a callable of the worker: `fit`, and for SHARED_GRADIENTS
`encode` and `apply`) and waits for its result. The caller's side (`submit`, `result`, `stop`) turns
a worker's failure, death or silence into WorkerError naming it, and a shutdown during fit() into
RuntimeError saying so. kit.parallel.wrapper re-exports WorkerError.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.core.context import scope_out_of_workspaces
from kit.core.devices import AnyDevice, attach_thread_to_device, detach_thread, transfer
from kit.data.dataset import DataSet
from kit.nn.network import Network
from kit.parallel.threshold import ThresholdAlgorithm, encoded_count, threshold_decode, threshold_encode
from kit.workspaces.workspace import destroy_all_workspaces_for_current_thread

__all__ = ["WorkerError"]


class WorkerError(RuntimeError):
    """A worker failed; the message names it and its device; the cause is chained."""


_STOP = object()
Task = Callable[["Worker"], Any]
SHUT_DOWN_DURING_FIT = (
    "ParallelWrapper was shut down while fit() ran: shutdown() stopped the workers after their current tasks, and "
    "the interrupted fit() wrote none of its rounds into the model"
)


class Worker:
    """One thread pinned to one device with one replica; runs tasks (callables) in order."""

    def __init__(self, index: int, replica: Network, device: AnyDevice, wrapper: Any) -> None:
        self.index, self.replica, self.device = index, replica, device
        self.residual_post_processor = wrapper.residual_post_processor
        self.tasks: queue.Queue = queue.Queue(maxsize=1)
        self.results: queue.Queue = queue.Queue()
        self.stopping = False  # set by stop() (shutdown): a fit waiting on this worker says so
        self.residual: Any = None
        self.threshold_algorithm: ThresholdAlgorithm = wrapper.threshold_algorithm.clone()
        self.tau: float | None = None
        self.last_dense: bool | None = None
        self.last_sparsity: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"ParallelWrapper training thread {index}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        attach_thread_to_device(self.device)
        try:
            while True:
                task = self.tasks.get()
                if task is _STOP:
                    return
                try:
                    self.results.put((True, task(self)))
                except BaseException as exc:  # reported to fit(), which stops everything
                    self.results.put((False, exc))
        finally:
            destroy_all_workspaces_for_current_thread()
            detach_thread()

    # ---- tasks (run on this worker's thread) ----------------------------------------
    def fit(self, ds: DataSet) -> float:
        """One iteration on a batch sent to this worker's device (the one transfer path)."""
        return self.replica.fit_batch(ds.to(self.device))

    def encode(self, ds: DataSet, iteration: int, epoch: int) -> tuple[float, np.ndarray | None, dict]:
        """SHARED_GRADIENTS: train, take the step back, add it to the residual, encode it."""
        net = self.replica
        xp = net.device.xp
        with scope_out_of_workspaces():  # the updater writes into params (the float32 master weights of a
            before = net.flat_master.dup()  # mixed-precision net, so the encoding acts on those): take its step back
        score = net.fit_batch(ds.to(self.device))  # gradient, L2, updater -> params moved by -update
        params, old = net.flat_master.data, before.data
        if self.residual is None:
            self.residual = xp.zeros_like(params)
        update = old - params  # what this worker would have applied alone (0 for a skipped step)
        frozen = [params[sl].copy() for sl in net.frozen_slices]  # BatchNorm's running statistics: no gradient
        params[...] = old
        for sl, moved in zip(net.frozen_slices, frozen):  # they stay as this batch moved them (the wrapper
            params[sl], update[sl] = moved, 0  # averages them over the workers), never in a message
        if not math.isfinite(score) and not net.last_step_skipped:  # a refused step sends nothing, keeps all
            net.cast_master()
            return score, None, {"worker": self.index, "tau": self.tau, "sparsity": 0.0, "dense": False}
        net.cast_master()
        self.residual += update
        self.tau = self.threshold_algorithm.calculate_threshold(
            iteration, epoch, self.tau, self.last_dense, self.last_sparsity
        )
        message = threshold_encode(self.residual, self.tau)
        self.residual_post_processor.process_residual(iteration, epoch, self.tau, self.residual)
        count = encoded_count(message)
        self.last_dense = message is not None and int(message[3]) == 1
        self.last_sparsity = count / params.size
        stats = {"worker": self.index, "tau": self.tau, "sparsity": self.last_sparsity, "dense": self.last_dense}
        return score, message, stats

    def apply(self, messages: list[tuple[np.ndarray | None, AnyDevice]]) -> None:
        """SHARED_GRADIENTS: apply the sum of every worker's decoded message (worker order). A
        message from another worker's device reaches this one through the counted transfer path:
        the traffic the mode is about shows in transfer_stats()."""
        net = self.replica
        total = net.device.xp.zeros_like(net.flat_master.data)
        for message, source in messages:  # worker order: identical sums on every replica
            if message is None:
                continue
            if source is not self.device:
                moved = np.empty_like(message)  # encoded messages are host arrays on every backend
                transfer(moved, self.device, message, source, host_arrays=True)
                message = moved
            threshold_decode(message, total)
        net.flat_master.data[...] -= total
        net.cast_master()

    # ---- the caller's side ------------------------------------------------------------
    def submit(self, task: Task) -> None:
        while True:
            if self.stopping:
                raise RuntimeError(SHUT_DOWN_DURING_FIT)
            try:
                self.tasks.put(task, timeout=0.05)
                return
            except queue.Full:
                if not self.thread.is_alive():
                    raise WorkerError(f"worker {self.index} on {self.device} died without reporting") from None

    def result(self, deadline: float | None = None) -> Any:
        while True:
            try:
                ok, value = self.results.get(timeout=0.05)
            except queue.Empty:
                if not self.thread.is_alive():
                    if self.stopping:  # shutdown() stopped it: its task (if any) was called off
                        raise RuntimeError(SHUT_DOWN_DURING_FIT) from None
                    raise WorkerError(f"worker {self.index} on {self.device} died without reporting") from None
                if deadline is not None and time.monotonic() > deadline:
                    raise WorkerError(f"worker {self.index} on {self.device} did not answer in time") from None
                continue
            if not ok:
                raise WorkerError(
                    f"worker {self.index} on {self.device} failed: {type(value).__name__}: {value}"
                ) from value
            return value

    def stop(self) -> None:
        self.stopping = True
        if self.thread.is_alive():
            while True:
                try:
                    self.tasks.put_nowait(_STOP)
                    break
                except queue.Full:
                    try:
                        self.tasks.get_nowait()
                    except queue.Empty:
                        pass
            self.thread.join(timeout=30)


WorkerError.__module__ = "kit.parallel.wrapper"  # the public path, as tracebacks name it
