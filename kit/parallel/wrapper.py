"""ParallelWrapper: data-parallel training of one network on several devices (DL4J's).

    >>> with ParallelWrapper(net, workers=2, averaging_frequency=5) as pw:
    ...     pw.fit(ArrayIterator(train, 64, shuffle=True), epochs=3)
    >>> net.evaluate(...)            # the wrapper leaves the averaged parameters in `net`

One worker thread per replica, pinned to its device (worker i -> device i % n: real GPUs, or
logical devices of one GPU, or of the CPU with the cores shared among them). Replicas are
built once per wrapper, not per fit() (DL4J rebuilds them every fit: dl4j#8023). Each round the
main thread hands one batch to each worker (round-robin from an optional prefetch queue) and
waits for all of them, so the result does not depend on thread timing:

- AVERAGING: every `averaging_frequency` rounds the parameters (and the updater state when
  `average_updaters`) are averaged and broadcast. With plain SGD and frequency 1 this equals
  one model trained on the concatenated batches.
- SHARED_GRADIENTS: each worker adds its update to a residual, threshold-encodes it (+-tau per
  index, tau from the threshold algorithm), and every replica applies the sum of all workers'
  decoded messages, so replicas stay identical without ever averaging.

Differences from DL4J, on purpose: workers=1 is allowed (the baseline of a comparison); the
user's model ends with the averaged parameters rather than worker 0's; a worker's exception
stops fit() at once, names the worker, and leaves no threads behind.
"""

from __future__ import annotations

import contextlib
import enum
import os
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from kit._lifecycle import ShutsDownOnExit
from kit.data.async_iter import AsyncPrefetchIterator
from kit.data.dataset import DataSet
from kit.devices import (
    AnyDevice,
    as_device,
    attach_thread_to_device,
    blas_threads,
    detach_thread,
    gpu_count,
    logical_devices,
)
from kit.nn.network import Network
from kit.nn.workspace_mgr import WorkspaceMode
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    NoOpResidualPostProcessor,
    ThresholdAlgorithm,
    encoded_count,
    threshold_decode,
    threshold_encode,
)
from kit.workspace import destroy_all_workspaces_for_current_thread, scope_out_of_workspaces

__all__ = ["ParallelWrapper", "TrainingMode", "WorkerError", "default_devices"]


class TrainingMode(enum.Enum):
    AVERAGING = "AVERAGING"
    SHARED_GRADIENTS = "SHARED_GRADIENTS"


class WorkerError(RuntimeError):
    """A worker failed; the message names it and its device; the cause is chained."""


def default_devices(workers: int) -> list[AnyDevice]:
    """Worker i -> physical GPU i % n when there are GPUs (logical GPU slots when there are
    more workers than GPUs); on a CPU-only machine, `workers` logical slots of cpu:0."""
    n = gpu_count()
    if n >= workers:
        return [as_device(f"gpu:{i}") for i in range(workers)]
    if n:
        per = -(-workers // n)
        slots = {i: logical_devices(per, f"gpu:{i}") for i in range(n)}
        return [slots[i % n][i // n] for i in range(workers)]
    return list(logical_devices(workers, "cpu:0")) if workers > 1 else [as_device("cpu:0")]


_STOP = object()


class _Worker:
    def __init__(self, index: int, replica: Network, device: AnyDevice, wrapper: ParallelWrapper) -> None:
        self.index, self.replica, self.device, self.wrapper = index, replica, device, wrapper
        self.tasks: queue.Queue = queue.Queue(maxsize=1)
        self.results: queue.Queue = queue.Queue()
        self.residual: Any = None
        self.threshold_algorithm: ThresholdAlgorithm | None = None
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
                kind, payload = task
                try:
                    if kind == "fit":
                        result = self.replica.fit_batch(payload)
                    elif kind == "encode":
                        result = self._encode(*payload)
                    elif kind == "apply":
                        result = self._apply(payload)
                    else:  # "call": run a function on this worker's thread (tests, fault injection)
                        result = payload(self)
                    self.results.put((True, result))
                except BaseException as exc:  # reported to fit(), which stops everything
                    self.results.put((False, exc))
        finally:
            destroy_all_workspaces_for_current_thread()
            detach_thread()

    # ---- SHARED_GRADIENTS ------------------------------------------------------------
    def _encode(self, ds: DataSet, iteration: int, epoch: int) -> tuple[float, np.ndarray | None, dict]:
        net, xp = self.replica, self.replica.device.xp
        with scope_out_of_workspaces():
            before = net.flat_params.dup()  # the updater writes into params: take its step back
        score = net.fit_batch(ds)  # gradient, L2, updater -> params moved by -update
        params, old = net.flat_params.data, before.data
        if self.residual is None:
            self.residual = xp.zeros_like(params)
        update = old - params  # what this worker would have applied alone
        params[...] = old
        self.residual += update
        self.tau = self.threshold_algorithm.calculate_threshold(  # type: ignore[union-attr]
            iteration, epoch, self.tau, self.last_dense, self.last_sparsity
        )
        message = threshold_encode(self.residual, self.tau)
        self.wrapper.residual_post_processor.process_residual(iteration, epoch, self.tau, self.residual)
        count = encoded_count(message)
        self.last_dense = message is not None and int(message[3]) == 1
        self.last_sparsity = count / params.size
        return (
            score,
            message,
            {"worker": self.index, "tau": self.tau, "sparsity": self.last_sparsity, "dense": self.last_dense},
        )

    def _apply(self, messages: list[np.ndarray | None]) -> None:
        net = self.replica
        xp = net.device.xp
        total = xp.zeros_like(net.flat_params.data)
        for message in messages:  # worker order: identical sums on every replica
            if message is not None:
                threshold_decode(message, total)
        net.flat_params.data[...] -= total

    def submit(self, kind: str, payload: Any) -> None:
        self.tasks.put((kind, payload))

    def result(self, deadline: float | None = None) -> Any:
        while True:
            try:
                ok, value = self.results.get(timeout=0.05)
            except queue.Empty:
                if not self.thread.is_alive():
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


class ParallelWrapper(ShutsDownOnExit):
    def __init__(
        self,
        model: Network,
        workers: int | None = None,
        devices: list[Any] | None = None,
        prefetch_buffer: int = 16,
        averaging_frequency: int = 1,
        report_score_after_averaging: bool = False,
        average_updaters: bool = True,
        workspace_mode: WorkspaceMode | str | None = None,
        training_mode: TrainingMode | str = TrainingMode.AVERAGING,
        threshold_algorithm: ThresholdAlgorithm | None = None,
        residual_post_processor: Any = None,
        listeners: Iterable[Any] = (),
    ) -> None:
        if not isinstance(model, Network):
            raise TypeError(f"ParallelWrapper needs a kit.nn.Network, got {type(model).__name__}")
        if devices is not None:
            devices = [as_device(d) for d in devices]
            if not devices:
                raise ValueError("ParallelWrapper(devices=[]): give at least one device")
        if workers is None:
            workers = len(devices) if devices else max(gpu_count(), 2)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"ParallelWrapper(workers={workers!r}): needs at least 1 worker")
        for name, value in (("prefetch_buffer", prefetch_buffer), ("averaging_frequency", averaging_frequency)):
            if not isinstance(value, int) or value < 0 or (name == "averaging_frequency" and value < 1):
                raise ValueError(
                    f"ParallelWrapper({name}={value!r}): must be an integer >= {int(name != 'prefetch_buffer')}"
                )
        self.model = model
        self.workers = workers
        self.devices = [devices[i % len(devices)] for i in range(workers)] if devices else default_devices(workers)
        self.prefetch_buffer = prefetch_buffer
        self.averaging_frequency = averaging_frequency
        self.report_score_after_averaging = report_score_after_averaging
        self.average_updaters = average_updaters
        self.training_mode = TrainingMode(training_mode)
        self.threshold_algorithm = threshold_algorithm or AdaptiveThresholdAlgorithm()
        self.residual_post_processor = residual_post_processor or NoOpResidualPostProcessor()
        self.workspace_mode = WorkspaceMode(workspace_mode) if workspace_mode else model.training_workspace_mode
        self.listeners = list(listeners)
        self.iteration = 0
        self.epoch = 0
        self.last_score = float("nan")
        self.averagings = 0
        self.averaging_seconds = 0.0
        self.encoding_stats: list[dict[str, Any]] = []  # SHARED_GRADIENTS: tau and sparsity per worker, per round
        self.round_seconds: list[float] = []
        self._dirty: set[int] = set()  # workers that trained since the last averaging
        self._stop = False
        self._closed = False
        self._zoo: list[_Worker] = []
        self._build()

    # ---- replicas -------------------------------------------------------------------
    def _build(self) -> None:
        cfg = self.model.config()
        cfg["training_workspace_mode"] = self.workspace_mode.value
        for i, dev in enumerate(self.devices):
            replica = Network.from_config(cfg, device=dev)
            replica.copy_state_from(self.model)
            worker = _Worker(i, replica, dev, self)
            worker.threshold_algorithm = self.threshold_algorithm.clone()
            self._zoo.append(worker)

    @property
    def replicas(self) -> list[Network]:
        return [w.replica for w in self._zoo]

    def describe(self) -> str:
        kinds = {("logical" if getattr(d, "logical", False) else "physical") for d in self.devices}
        return (
            f"ParallelWrapper: {self.workers} worker(s) on "
            + ", ".join(str(d) for d in self.devices)
            + (f" ({'/'.join(sorted(kinds))})")
        )

    # ---- training -------------------------------------------------------------------
    def fit(self, data: Iterable[DataSet], epochs: int = 1) -> ParallelWrapper:
        if self._closed:
            raise RuntimeError("ParallelWrapper was shut down; make a new one")
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"fit(epochs={epochs!r}): must be a positive integer")
        self._stop = False
        cpu_slots = all(d.kind == "cpu" for d in self.devices)
        per_worker = max(1, (os.cpu_count() or 1) // self.workers)
        source = data
        wrapped = None
        if self.prefetch_buffer > 0 and getattr(data, "async_supported", False):
            wrapped = source = AsyncPrefetchIterator(data, prefetch=self.prefetch_buffer, device=self.model.device)
        try:
            with blas_threads(per_worker) if cpu_slots and self.workers > 1 else contextlib.nullcontext():
                for _ in range(epochs):
                    for listener in self.listeners:
                        _call(listener, "on_epoch_start", self.model)
                    self._epoch(source)
                    self.epoch += 1
                    for r in self.replicas:
                        r.epoch = self.epoch
                    for listener in self.listeners:
                        _call(listener, "on_epoch_end", self.model)
                    if self._stop:
                        break
                if self.training_mode is TrainingMode.AVERAGING and self._dirty and self.workers > 1:
                    self._average()  # end on the average, so the user's model holds it
        except BaseException:
            self.shutdown()
            raise
        finally:
            if wrapped is not None:
                wrapped.shutdown()
        self._publish()
        return self

    def _epoch(self, source: Iterable[DataSet]) -> None:
        batch: list[DataSet] = []
        for ds in source:
            batch.append(ds.detach() if ds.features.is_attached else ds)
            if len(batch) == self.workers:
                self._round(batch)
                batch = []
                if self._stop:
                    return
        if batch:
            self._round(batch)

    def _round(self, batches: list[DataSet]) -> None:
        t0 = time.perf_counter()
        zoo = self._zoo[: len(batches)]
        if self.training_mode is TrainingMode.AVERAGING:
            for w, ds in zip(zoo, batches):
                w.submit("fit", ds)
            scores = self._collect(zoo)
            self._dirty.update(w.index for w in zoo)
            self.iteration += 1
            if self.iteration % self.averaging_frequency == 0 and self.workers > 1:
                self._average()
        else:
            for w, ds in zip(zoo, batches):
                w.submit("encode", (ds, self.iteration, self.epoch))
            results = self._collect(zoo)
            scores = [r[0] for r in results]
            messages = [r[1] for r in results]
            self.encoding_stats.append({"iteration": self.iteration, "workers": [r[2] for r in results]})
            for w in self._zoo:  # every replica, including idle ones, applies the same sum
                w.submit("apply", messages)
            self._collect(self._zoo)
            self.iteration += 1
        self.last_score = float(np.mean(scores))
        self.round_seconds.append(time.perf_counter() - t0)
        for w in self._zoo:  # idle workers of a short last round keep the same step count
            w.replica.iteration = self.iteration
        for w, ds, score in zip(zoo, batches, scores):
            for listener in self.listeners:
                listener.iteration_done(
                    w.replica, self.iteration, self.epoch, score=score, batch_size=ds.num_examples, worker=w.index
                )

    def _collect(self, zoo: list[_Worker]) -> list[Any]:
        out = []
        for w in zoo:  # the first failure stops everything; the others finish their task first
            out.append(w.result())
        return out

    def _average(self) -> None:
        """Mean of every replica's parameters (and updater state), written back into each."""
        t0 = time.perf_counter()
        trained = [self._zoo[i].replica for i in sorted(self._dirty)] or self.replicas
        self._dirty.clear()
        groups = [([r.flat_params for r in trained], [r.flat_params for r in self.replicas])]
        if self.average_updaters:
            groups += [
                ([r.updater_state[k] for r in trained], [r.updater_state[k] for r in self.replicas])
                for k in self.model.updater_state
            ]
        for sources, targets in groups:  # the mean of those that trained, written into every replica
            mean = _mean_on(sources, sources[0].device)
            for arr in targets:
                _assign(arr, mean)
        self.averagings += 1
        self.averaging_seconds += time.perf_counter() - t0
        if self.report_score_after_averaging:
            print(f"Averaged score: {self.last_score}")

    def _publish(self) -> None:
        """Leave the (averaged) parameters and updater state in the user's model."""
        self.model.copy_state_from(self.replicas[0])
        self.model.iteration, self.model.epoch = self.iteration, self.epoch
        self.model.last_score = self.last_score

    def stop_fit(self) -> None:
        self._stop = True

    def run_on_worker(self, index: int, fn: Any) -> Any:
        """Run fn(worker) on worker `index`'s thread and return its result (tests, inspection)."""
        self._zoo[index].submit("call", fn)
        return self._zoo[index].result()

    def shutdown(self) -> None:
        for w in self._zoo:
            w.stop()
        self._closed = True

    def threads_alive(self) -> int:
        return sum(w.thread.is_alive() for w in self._zoo)


def _call(listener: Any, name: str, *args: Any) -> None:
    fn = getattr(listener, name, None)
    if fn is not None:
        fn(*args)


def _mean_on(arrays: list[Any], device: AnyDevice) -> Any:
    """Mean of NDArrays (possibly on several devices), computed on `device` in a fixed order."""
    xp = device.xp
    acc = xp.array(_raw_on(arrays[0], device), copy=True)
    for arr in arrays[1:]:
        acc += _raw_on(arr, device)
    acc /= len(arrays)
    return acc


def _raw_on(arr: Any, device: AnyDevice) -> Any:
    if arr.device.physical is device.physical:
        return arr.data
    if device.kind == "cpu":
        return arr.numpy()
    import cupy

    with device.activate():
        return cupy.asarray(arr.numpy()) if arr.device.kind == "cpu" else cupy.array(arr.data, copy=True)


def _assign(arr: Any, mean: Any) -> None:
    target = arr.data
    if arr.device.kind == "cpu":
        target[...] = mean if isinstance(mean, np.ndarray) else mean.get()
    else:
        import cupy

        with arr.device.activate():
            target[...] = cupy.asarray(mean) if isinstance(mean, np.ndarray) else cupy.array(mean, copy=True)
