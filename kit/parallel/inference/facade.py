"""ParallelInference, the facade: its constructor's checks, the three ways to ask (`output`,
`submit`, `output_async`), the modes, `update_model` and `shutdown`. The queue and the workers
are the engine's (kit.parallel.inference.engine); the way answers travel back is delivery's
(kit.parallel.inference.delivery).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import math
import numbers
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kit.arrays.creation import asarray
from kit.arrays.ndarray import NDArray
from kit.core.arguments import whole
from kit.core.devices import AnyDevice, BlasThreadShare, as_device, current_device
from kit.lifecycle import ShutsDownOnExit
from kit.nn.network import Network
from kit.parallel.inference.delivery import Request, deliver, shut_down_error, within
from kit.parallel.inference.engine import Engine
from kit.parallel.wrapper import default_devices

__all__ = ["InferenceMode", "ParallelInference"]

log = logging.getLogger(__name__)


class InferenceMode(enum.Enum):
    SEQUENTIAL = "SEQUENTIAL"
    BATCHED = "BATCHED"
    INPLACE = "INPLACE"


class ParallelInference(ShutsDownOnExit):
    """A network served to any number of client threads (DL4J's ParallelInference): one replica
    of the model per worker, each on its device (`devices`, or kit's placement rule), answering
    `output(x)` calls -- one example or a batch -- from any thread, each caller with its own
    answer. `inference_mode` picks how requests reach the replicas:

    - SEQUENTIAL: each request is one job; idle workers take jobs first come, first served.
    - BATCHED (the default): a worker takes every waiting request of the same per-example shape, up
      to `batch_limit`, and runs them as one batch: alone under light load, batched under heavy.
    - INPLACE: no worker threads; the calling thread borrows a replica from a pool (FIFO).

    At most `queue_limit` requests wait in the queue; more callers wait for room. Use it as a
    context manager, or call `shutdown()`; `update_model(net)` serves another model without a
    restart. `batches_run`, `requests_served` and `batch_sizes` count what ran.

        >>> import numpy as np
        >>> from kit.nn import mlp
        >>> net = mlp(4, hidden=(8,), n_out=2)
        >>> with ParallelInference(net, workers=2, inference_mode="SEQUENTIAL") as pi:
        ...     one = pi.output(np.ones(4, np.float32))          # one example: shape (2,)
        ...     many = pi.output(np.ones((5, 4), np.float32))    # a batch: shape (5, 2)
        ...     served = pi.requests_served
        >>> one.shape, many.shape, served
        ((2,), (5, 2), 2)
    """

    def __init__(
        self,
        model: Network,
        workers: int | None = None,
        inference_mode: InferenceMode | str = InferenceMode.BATCHED,
        batch_limit: int = 32,
        queue_limit: int = 64,
        devices: Sequence[str | AnyDevice] | str | AnyDevice | None = None,
    ) -> None:
        self._closed = True  # until fully built: a failed __init__ leaves nothing to shut down
        self._blas: BlasThreadShare | None = None
        if not isinstance(model, Network):
            raise TypeError(f"ParallelInference needs a kit.nn.Network, got {type(model).__name__}")
        self.mode = InferenceMode(inference_mode)
        self.devices = _worker_devices(workers, devices, batch_limit, queue_limit)
        self.workers, self.batch_limit, self.queue_limit = len(self.devices), batch_limit, queue_limit
        replicas = [model.clone(device=d) for d in self.devices]
        merged = batch_limit if self.mode is InferenceMode.BATCHED else 1  # requests a worker runs as one batch
        self._engine = Engine(model, replicas, self.devices, merged, queue_limit)
        self._served_key = _answer_key(model)  # what the replicas answer with, parameters aside
        self._update_lock = threading.Lock()  # one update_model at a time
        self._closed = False
        if all(d.kind == "cpu" for d in self.devices) and self.workers > 1:
            # concurrent BLAS calls from several workers, each with all cores, fight each other:
            # share the cores out while this object lives (process-wide, restored by shutdown)
            self._blas = BlasThreadShare(self.workers)
        if self.mode is not InferenceMode.INPLACE:  # INPLACE lends the replicas to the callers
            self._engine.start([f"InferenceThread-{i}" for i in range(self.workers)])

    # ---- what the engine serves and counts -----------------------------------------------
    @property
    def model(self) -> Network:
        """The network served now (`update_model` swaps it)."""
        return self._engine.model

    @property
    def replicas(self) -> list[Network]:
        return self._engine.replicas

    @property
    def batches_run(self) -> int:
        return self._engine.counts.batches_run

    @property
    def requests_served(self) -> int:
        return self._engine.counts.requests_served

    @property
    def batch_sizes(self) -> list[int]:
        """Requests merged per batch run (1 in SEQUENTIAL and INPLACE), for the latest
        `BATCH_SIZES_KEPT` batches (a copy)."""
        return list(self._engine.counts.batch_sizes)

    def queued(self) -> int:
        """Requests waiting for a worker (not counting the batches running)."""
        return len(self._engine.pending)

    # ---- the client side ----------------------------------------------------------------
    def output(self, x: ArrayLike | NDArray, timeout: float | None = None) -> NDArray:
        """Predictions for one example (the model's input shape) or a batch of them.

        `timeout`: the seconds this call may wait -- for room in the queue, for a free replica
        (INPLACE), for the answer -- then TimeoutError (a request still queued is taken back, one
        waiting for a replica never runs). The same rule for every call and mode: None or math.inf
        wait without limit (shutdown() ends any wait with its error); 0 waits not at all, so what
        is not ready at once times out; a negative number or NaN raises ValueError at the call. An
        INPLACE call runs the forward pass in the calling thread, where nothing can interrupt it:
        its timeout bounds the wait for a replica."""
        deadline = _deadline(timeout, "output")
        arr, single, source = self._prepare(x)
        if arr is None:
            return single
        if self.mode is InferenceMode.INPLACE:
            i = self._engine.borrow(arr, deadline, timeout)
            assert i is not None
            return self._run_borrowed(i, arr, single, source=source)
        request = Request(arr, single, source=source)
        if threading.current_thread() in self._engine.threads:  # a done-callback runs on a worker: it would
            raise RuntimeError(  # wait for the very thread that must answer it, and wedge the server
                "ParallelInference.output() from one of the server's own threads (a Future's done-callback) would "
                "wait for itself; call submit() there instead and read its result outside the callback"
            )
        self._engine.submit(request, deadline)
        if not request.wait(_left(deadline)):
            if self._engine.withdraw(request) or not request.wait(0):
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        return request.received()

    def submit(self, x: ArrayLike | NDArray, timeout: float | None = None) -> concurrent.futures.Future:
        """`output` without waiting for the answer: a Future of it, so that one thread can keep
        many requests in flight. A wrong shape or dtype raises here, NaN data fails the Future
        (the worker finds it); a full queue makes this call wait (at most `timeout` seconds, then
        TimeoutError). The answer is wrapped on the device the calling thread is on now; the
        Future cannot be cancelled once returned (it is queued). Done-callbacks run in a worker's
        thread (keep them short; one that submits again is queued even past `queue_limit`). In
        INPLACE mode the forward pass runs here, in this call, and the Future is done on return;
        waiting for a free replica is what waiting for room is in the other modes (bounded by
        `timeout`, a TimeoutError or the shut-down error raised here); `output`'s timeout rule."""
        deadline = _deadline(timeout, "submit")
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        arr, single, source = self._prepare(x)
        if arr is None:
            future.set_result(single)
        elif self.mode is InferenceMode.INPLACE:
            i = self._engine.borrow(arr, deadline, timeout)
            assert i is not None
            try:
                future.set_result(self._run_borrowed(i, arr, single, source=source))
            except Exception as exc:
                future.set_exception(exc)
        else:
            self._engine.submit(Request(arr, single, future, device=current_device(), source=source), deadline)
        return future

    async def output_async(self, x: ArrayLike | NDArray, timeout: float | None = None) -> NDArray:
        """`output` for asyncio: awaits the answer without a thread per caller, so an event loop
        can serve any number of concurrent requests; a worker answers all of a batch's requests
        from one loop with one call into it. Waits at most `timeout` seconds in all (for room in
        a full queue, which it awaits on the loop, and for the answer), then TimeoutError; a
        request still queued when it times out or its task is cancelled is taken back. INPLACE
        runs the forward pass in the loop's default executor (the loop must not block), and the
        timeout bounds the whole wait, forward pass included; `output`'s timeout rule."""
        deadline = _deadline(timeout, "output_async")
        arr, single, source = self._prepare(x)
        if arr is None:
            return single
        loop = asyncio.get_running_loop()
        if self.mode is InferenceMode.INPLACE:
            return await self._inplace_async(loop, arr, single, timeout, deadline, source)
        request = Request(arr, single, loop.create_future(), loop, current_device(), source)
        await self._queue_async(request, loop, deadline)
        engine = self._engine
        try:
            if deadline is None:  # the common case, without asyncio.wait's extra future
                return await request.future
            if not await within(request.future, deadline):
                request.future.cancel()
                engine.withdraw(request)
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        except asyncio.CancelledError:
            request.future.cancel()
            engine.withdraw(request)  # not run if still queued; an answer already on its way is dropped
            raise
        return request.future.result()

    async def _queue_async(self, request: Request, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Queue an asyncio caller's request, awaiting room on its loop while the queue is full."""
        engine = self._engine
        while (waiter := engine.submit_async(request, loop)) is not None:  # a full queue
            try:
                if not await within(waiter, deadline):
                    raise TimeoutError(f"ParallelInference: the request queue stayed full ({self.queue_limit})")
            except BaseException:  # timed out or cancelled while waiting for room: never queued
                waiter.cancel()
                engine.forget(waiter)
                raise

    async def _inplace_async(
        self,
        loop: asyncio.AbstractEventLoop,
        arr: np.ndarray,
        single: bool,
        timeout: float | None,
        deadline: float | None,
        source: AnyDevice | None = None,
    ) -> NDArray:
        device, gone, engine = current_device(), threading.Event(), self._engine

        def run() -> NDArray | None:
            i = engine.borrow(arr, deadline, timeout, gone)
            return None if i is None else self._run_borrowed(i, arr, single, device, source)

        job = asyncio.ensure_future(loop.run_in_executor(None, run))
        try:
            if not await within(job, deadline):
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        except BaseException:
            gone.set()  # a call that has no replica yet does not run at all
            engine.wake_borrowers()
            job.cancel()
            raise
        return job.result()

    def _prepare(self, x: ArrayLike | NDArray) -> tuple[np.ndarray | None, Any, AnyDevice | None]:
        """The caller's checks, in its own thread: (contiguous features, whether one example,
        the device they came from or None for host data), or (None, the empty answer, None) for a
        batch of no examples."""
        if self._closed:
            raise shut_down_error()
        source = x.device if isinstance(x, NDArray) else None
        arr = x.numpy() if source is not None else np.asarray(x)
        if arr.dtype.kind not in "fiu":  # as Network.output: complex, bool, text are refused
            raise TypeError(f"features must be numbers, got dtype {arr.dtype}")
        model = self.model  # one model for every check (update_model may swap it meanwhile)
        shape = model.input_shape
        single = arr.shape == shape
        if single:
            arr = arr[None]
        if arr.shape[1:] != shape:
            dims = ", ".join(map(str, shape))
            raise ValueError(f"output: expected one example of shape {shape} or a batch (n, {dims}), got {arr.shape}")
        # NaN data is left to the worker's check of the whole batch (see Engine._serve): a NumPy
        # pass over one request here lets go of the GIL, and with many callers getting it back
        # costs more than the pass (measured: ~20 us per request with 64 asyncio clients)
        arr = np.ascontiguousarray(arr, dtype=model.dtype)
        if arr.shape[0] == 0:  # nothing to run: the empty answer, shaped like a real one
            return None, asarray(np.zeros((0, *model.output_shape), dtype=model.dtype)), None
        return arr, single, source

    def _run_borrowed(
        self, i: int, arr: np.ndarray, single: bool, device: AnyDevice | None = None, source: AnyDevice | None = None
    ) -> NDArray:
        """INPLACE: the forward pass on replica `i`, lent to this thread by `borrow`; the copies
        from the caller's device to the replica's and back counted as every other."""
        out, on = self._engine.run_borrowed(i, arr, source)
        return deliver(out[0] if single else out, on, device)

    # ---- control -----------------------------------------------------------------------
    def update_model(self, model: Network) -> None:
        """Serve `model` from now on, without a restart: every request made after this returns
        is answered with what `model.output()` returns (parameters, BatchNorm statistics, layers,
        loss, dtype and shapes all swapped; the replicas stay on this server's devices). With the
        same architecture, loss and dtype only the parameters are copied; otherwise new replicas
        are built. Requests already queued or running are answered by the old model or the new one.

        A model of another input shape is swapped in only while no request is queued or running;
        otherwise ValueError names both shapes and nothing changes."""
        if not isinstance(model, Network):
            raise TypeError(f"ParallelInference.update_model needs a kit.nn.Network, got {type(model).__name__}")
        if self._closed:  # it was accepted and served nothing
            raise shut_down_error()
        with model.lock:  # one whole state, also while another thread trains the model
            params = model.params()
            key = _answer_key(model)
        config = model.configuration
        with self._update_lock:
            fresh = None
            if key != self._served_key:  # another architecture, loss or dtype: new replicas
                fresh = [Network.from_config(config, device=d) for d in self.devices]
                for replica in fresh:
                    replica.flat_params.assign(params)  # as it is: output() of a NaN model is NaN here too
            self._engine.swap_model(model, fresh, params)
            self._served_key = key

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Refuse new requests, answer every waiting one with a clear error (queued, waiting for
        room, or, INPLACE, waiting for a replica), restore the BLAS limit and join every worker (a
        batch already running finishes first; a worker still running after `timeout` seconds is
        named in a warning and left to finish); `output`'s timeout rule."""
        deadline = _deadline(timeout, "shutdown")
        if self._closed:
            return
        self._closed = True
        try:
            alive = self._engine.close(_left(deadline))
            if alive:
                log.warning("ParallelInference.shutdown: %s still running after %s s", alive, timeout)
        finally:
            blas, self._blas = self._blas, None
            if blas is not None:
                blas.release()

    def threads_alive(self) -> int:
        return sum(t.is_alive() for t in self._engine.threads) if hasattr(self, "_engine") else 0


def _worker_devices(
    workers: int | None, devices: Sequence[str | AnyDevice] | str | AnyDevice | None, batch_limit: int, queue_limit: int
) -> list[AnyDevice]:
    """The constructor's numbers checked, and its workers placed: worker i on the i-th of
    `devices` (round robin; one device may be given alone, by name or object), or by kit's
    placement rule (`default_devices`). One device per worker."""
    if isinstance(devices, str) or hasattr(devices, "kind"):  # one device, by name or object
        devices = [devices]
    workers = workers if workers is not None else (len(devices) if devices else 2)
    for name, value in (("workers", workers), ("batch_limit", batch_limit), ("queue_limit", queue_limit)):
        whole("ParallelInference", name, value, 1)
    placed: list[AnyDevice] = [as_device(d) for d in devices] if devices else default_devices(workers)
    return [placed[i % len(placed)] for i in range(workers)]


def _deadline(timeout: object, call: str) -> float | None:
    """The one timeout rule (`ParallelInference.output` says it) as a time.monotonic() deadline, None
    for no limit (also past threading.TIMEOUT_MAX, ~292 years); a bad value raises at the call."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"ParallelInference.{call}(timeout={timeout!r}): must be a number of seconds >= 0, or None (no limit)"
        )
    seconds = float(timeout)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(
            f"ParallelInference.{call}(timeout={timeout!r}): must be a number of seconds >= 0 (0: do not wait), "
            "or None or math.inf (no limit)"
        )
    if seconds >= threading.TIMEOUT_MAX:  # inf, or more than a lock can wait: no limit
        return None
    return time.monotonic() + seconds


def _left(deadline: float | None) -> float | None:
    """Seconds to the deadline (never negative), None for no limit."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _answer_key(model: Network) -> tuple:
    """Everything of a network's configuration that its answers depend on, parameters aside:
    architecture, input shape, loss (its output activation) and dtype. Two networks with equal
    keys and equal parameters answer alike; the updater, L2, seed and workspace modes only
    matter for training."""
    cfg = model.configuration
    return (cfg.layers, cfg.input_shape, cfg.loss, cfg.dtype)
