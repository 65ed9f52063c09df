"""ParallelInference: thread-safe, batched model serving (DL4J's).

    >>> with ParallelInference(net, workers=2, inference_mode=InferenceMode.BATCHED) as pi:
    ...     probs = pi.output(x)                # from any number of client threads

- SEQUENTIAL: each request is one job; idle workers take jobs first come, first served.
- BATCHED: a worker that takes a request also takes every request already waiting with the
  same per-example shape, up to `batch_limit` requests, runs them as one batch and splits the
  results back: under light load requests run alone, under heavy load they are batched.
- INPLACE: no worker threads; the calling thread borrows a replica from a pool (FIFO).

`output` blocks until its result is ready; a worker's exception is raised in the caller (DL4J
hung here before a fix, dl4j#4813); a full request queue (`queue_limit`) makes callers wait
(back-pressure); `shutdown()` joins every thread, and a request still waiting then fails with a
clear error instead of hanging.
"""

from __future__ import annotations

import enum
import os
import queue
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from kit._lifecycle import ShutsDownOnExit
from kit.creation import asarray
from kit.devices import AnyDevice, attach_thread_to_device, detach_thread
from kit.ndarray import NDArray
from kit.nn.network import Network
from kit.parallel.wrapper import default_devices
from kit.workspace import destroy_all_workspaces_for_current_thread

__all__ = ["InferenceMode", "ParallelInference"]


class InferenceMode(enum.Enum):
    SEQUENTIAL = "SEQUENTIAL"
    BATCHED = "BATCHED"
    INPLACE = "INPLACE"


class _Request:
    __slots__ = ("features", "future", "single")

    def __init__(self, features: np.ndarray, single: bool) -> None:
        self.features, self.single = features, single
        self.future: Future = Future()


_STOP = object()


class ParallelInference(ShutsDownOnExit):
    def __init__(
        self,
        model: Network,
        workers: int | None = None,
        inference_mode: InferenceMode | str = InferenceMode.BATCHED,
        batch_limit: int = 32,
        queue_limit: int = 64,
        devices: list[Any] | None = None,
    ) -> None:
        if not isinstance(model, Network):
            raise TypeError(f"ParallelInference needs a kit.nn.Network, got {type(model).__name__}")
        self.mode = InferenceMode(inference_mode)
        workers = workers if workers is not None else (len(devices) if devices else 2)
        for name, value in (("workers", workers), ("batch_limit", batch_limit), ("queue_limit", queue_limit)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelInference({name}={value!r}): must be a positive integer")
        self.model, self.workers, self.batch_limit, self.queue_limit = model, workers, batch_limit, queue_limit
        self.devices: list[AnyDevice] = devices if devices else default_devices(workers)
        self.devices = [self.devices[i % len(self.devices)] for i in range(workers)]
        self.replicas = [model.clone(device=d) for d in self.devices]
        self._locks = [threading.Lock() for _ in self.replicas]  # update_model vs a running batch
        self._closed = False
        self.batches_run = 0
        self.requests_served = 0
        self.batch_sizes: list[int] = []  # requests merged per batch (BATCHED), for the chapter
        self._stats_lock = threading.Lock()
        self._blas = None
        if all(d.kind == "cpu" for d in self.devices) and workers > 1:
            # concurrent BLAS calls from several workers, each with all cores, fight each other:
            # share the cores out while this object lives (process-wide, restored by shutdown)
            from threadpoolctl import threadpool_limits

            self._blas = threadpool_limits(limits=max(1, (os.cpu_count() or 1) // workers), user_api="blas")
        if self.mode is InferenceMode.INPLACE:
            self._pool: queue.Queue = queue.Queue()
            for i in range(workers):
                self._pool.put(i)
            self._threads: list[threading.Thread] = []
        else:
            self._queue: queue.Queue = queue.Queue(maxsize=queue_limit)
            self._threads = [
                threading.Thread(target=self._run, args=(i,), name=f"InferenceThread-{i}", daemon=True)
                for i in range(workers)
            ]
            for t in self._threads:
                t.start()

    # ---- the client side ----------------------------------------------------------------
    def output(self, x: Any, timeout: float | None = None) -> NDArray:
        """Predictions for one example (the model's input shape) or a batch of them."""
        if self._closed:
            raise RuntimeError("ParallelInference was shut down")
        arr = x.numpy() if isinstance(x, NDArray) else np.asarray(x)
        shape = self.model.input_shape
        single = arr.shape == shape
        if single:
            arr = arr[None]
        if arr.shape[1:] != shape:
            dims = ", ".join(map(str, shape))
            raise ValueError(f"output: expected one example of shape {shape} or a batch (n, {dims}), got {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=self.model.dtype)
        if self.mode is InferenceMode.INPLACE:
            return self._inplace(arr, single)
        request = _Request(arr, single)
        while True:  # back-pressure: wait for room, but notice a shutdown
            try:
                self._queue.put(request, timeout=0.5)
                break
            except queue.Full:
                if self._closed:
                    raise RuntimeError("ParallelInference was shut down") from None
        if self._closed:  # raced with shutdown(): make sure the request is answered
            self._fail_queued()
        return self._wait(request, timeout)

    def _wait(self, request: _Request, timeout: float | None) -> NDArray:
        # Every path that drops a request (a worker's exception, shutdown, a worker's exit)
        # completes its future, so a plain blocking wait cannot hang.
        try:
            return asarray(request.future.result(timeout=timeout))
        except TimeoutError:
            raise TimeoutError(f"ParallelInference: no result within {timeout} s") from None

    def _inplace(self, arr: np.ndarray, single: bool) -> NDArray:
        i = self._pool.get()  # FIFO: exclusive use of one replica
        try:
            with self._locks[i]:
                out = self.replicas[i].output(arr).numpy()
        finally:
            self._pool.put(i)
        self._count(1)
        return asarray(out[0] if single else out)

    # ---- the worker side -------------------------------------------------------------
    def _run(self, index: int) -> None:
        attach_thread_to_device(self.devices[index])
        held: list[_Request] = []  # requests of another shape, taken while batching: served next
        try:
            while True:
                first = held.pop(0) if held else self._queue.get()
                if first is _STOP:
                    return
                group = [first]
                if self.mode is InferenceMode.BATCHED:
                    while len(group) < self.batch_limit:
                        try:
                            nxt = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if nxt is _STOP:
                            self._queue.put(_STOP)  # leave it for after this batch
                            break
                        if nxt.features.shape[1:] == first.features.shape[1:]:
                            group.append(nxt)
                        else:
                            held.append(nxt)
                self._serve(index, group)
        finally:
            for r in held:
                r.future.set_exception(RuntimeError("ParallelInference was shut down before this request ran"))
            destroy_all_workspaces_for_current_thread()
            detach_thread()

    def _serve(self, index: int, group: list[_Request]) -> None:
        try:
            feats = group[0].features if len(group) == 1 else np.concatenate([r.features for r in group])
            with self._locks[index]:
                out = self.replicas[index].output(feats).numpy()
        except BaseException as exc:  # the callers get it, the worker lives on
            for r in group:
                r.future.set_exception(exc)
            return
        start = 0
        for r in group:
            n = r.features.shape[0]
            part = out[start : start + n].copy()
            start += n
            r.future.set_result(part[0] if r.single else part)
        self._count(len(group))

    def _count(self, n: int) -> None:
        with self._stats_lock:
            self.batches_run += 1
            self.requests_served += n
            self.batch_sizes.append(n)

    # ---- control -----------------------------------------------------------------------
    def update_model(self, model: Network) -> None:
        """Swap in new parameters (same architecture) or a new model, without a restart."""
        same = model.config()["layers"] == self.model.config()["layers"] and model.input_shape == self.model.input_shape
        for i, replica in enumerate(self.replicas):
            with self._locks[i]:
                if same:
                    replica.copy_state_from(model)
                else:
                    self.replicas[i] = model.clone(device=self.devices[i])
        self.model = model

    def shutdown(self) -> None:
        """Stop and join every worker; requests still queued fail with a clear error."""
        if self._closed:
            return
        self._closed = True
        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None
        if self.mode is InferenceMode.INPLACE:
            return
        for _ in self._threads:
            while any(t.is_alive() for t in self._threads):
                try:
                    self._queue.put(_STOP, timeout=0.05)
                    break
                except queue.Full:
                    continue
        for t in self._threads:
            t.join(timeout=30)
        self._fail_queued()

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and not item.future.done():
                item.future.set_exception(RuntimeError("ParallelInference was shut down before this request ran"))

    def threads_alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)
