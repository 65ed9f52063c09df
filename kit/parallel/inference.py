"""ParallelInference: thread-safe, batched model serving (DL4J's).

    >>> import numpy as np
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from kit.nn import mlp
    >>> from kit.parallel import InferenceMode, ParallelInference
    >>> net = mlp(8, hidden=(16,), n_out=3)
    >>> x = np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32)
    >>> requests = [x[0:2], x[2:4], x[4:6]]
    >>> with ParallelInference(net, workers=2, inference_mode=InferenceMode.BATCHED) as pi:
    ...     with ThreadPoolExecutor(3) as clients:  # from any number of client threads
    ...         probs = list(clients.map(pi.output, requests))
    >>> probs[0]
    NDArray(shape=(2, 3), dtype=float32, device=..., heap)
      [...]
    >>> bool(np.allclose(np.concatenate([p.numpy() for p in probs]), net.output(x).numpy()))
    True

- SEQUENTIAL: each request is one job; idle workers take jobs first come, first served.
- BATCHED: a worker takes, under one lock acquisition, every request already waiting with the
  same per-example shape, up to `batch_limit` requests, runs them as one batch and splits the
  results back: under light load requests run alone, under heavy load they are batched.
- INPLACE: no worker threads; the calling thread borrows a replica from a pool (FIFO).

`output` blocks until its result is ready. Every request is answered: with its result, or with
an error that belongs to it alone -- a wrong shape or dtype is refused in the caller's thread;
NaN data is found by the worker's check of the whole batch, and a batch that fails is split: the
requests with NaN fail with indices into their own rows, the others run again as one batch (any
other failure: request by request), so only the request that caused it fails (DL4J hung callers
here before a fix, dl4j#4813, and fails whole batches).
A full request queue (`queue_limit`) makes callers wait (back-pressure); `shutdown()` answers
every waiting request with a clear error (INPLACE callers waiting for a replica too) and joins
every thread; dropping the last reference does the same (the worker threads hold only the
engine, never the ParallelInference). Every `timeout=` follows one rule, in every mode: None or
math.inf wait without limit, 0 does not wait, a negative value or NaN is a ValueError at the
call (see `output`). `update_model(net)` swaps in everything answers depend on (parameters,
layers, loss and output activation, dtype, shapes): from its return on, every answer is what
`net.output()` gives.

The hot path has no per-request thread: one lock guards the queue, a worker drains a whole batch
per acquisition and wakes only its own callers, each through a plain lock. Every waiting caller
thread still costs a wake-up and a turn at the GIL per answer, and with dozens of them those
turns, not the model, bound the throughput (measured in `python -m kit bench parallel`). So
there are two ways to keep many requests in flight without a thread each: `submit` returns a
concurrent Future, and `await output_async(x)` serves asyncio code (a web server, say): a worker
settles all of a batch's asyncio answers with one call into the event loop.

    >>> import asyncio
    >>> async def serve(pi, rows):  # 64 concurrent requests, one thread
    ...     return await asyncio.gather(*(pi.output_async(r) for r in rows))
    >>> with ParallelInference(net, workers=2) as pi:
    ...     answers = asyncio.run(serve(pi, list(np.tile(x, (11, 1))[:64])))
    ...     futures = [pi.submit(r) for r in x]  # or Futures, from one thread
    ...     firsts = [f.result() for f in futures]
    >>> len(answers), bool(np.allclose(answers[0].numpy(), firsts[0].numpy()))
    (64, True)
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import enum
import logging
import math
import numbers
import os
import threading
import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from kit._lifecycle import ShutsDownOnExit
from kit.creation import asarray
from kit.devices import (
    AnyDevice,
    as_device,
    attach_thread_to_device,
    current_device,
    detach_thread,
    host_source,
    transfer,
)
from kit.ndarray import NDArray
from kit.nn.network import Network
from kit.parallel.wrapper import default_devices
from kit.workspace import destroy_all_workspaces_for_current_thread

__all__ = ["InferenceMode", "ParallelInference"]

log = logging.getLogger(__name__)

SHUT_DOWN = "ParallelInference was shut down"
BATCH_SIZES_KEPT = 100_000  # `batch_sizes` remembers this many of the latest batches


class InferenceMode(enum.Enum):
    SEQUENTIAL = "SEQUENTIAL"
    BATCHED = "BATCHED"
    INPLACE = "INPLACE"


class _Request:
    """One caller's features and where its answer goes. A blocking caller (`output`) waits on
    `_done`, held from creation until the answer is in (the worker releases it once); `submit`
    hands back a concurrent Future, settled in the worker's thread; `output_async` awaits an
    asyncio Future that the worker settles in the caller's event loop, a whole batch's answers
    in one call of the loop (one wake-up of the loop's thread, however many requests)."""

    __slots__ = ("_done", "device", "error", "features", "future", "loop", "result", "served_on", "single", "source")

    def __init__(
        self,
        features: np.ndarray,
        single: bool,
        future: Any = None,
        loop: asyncio.AbstractEventLoop | None = None,
        device: AnyDevice | None = None,
        source: AnyDevice | None = None,
    ) -> None:
        self.features, self.single = features, single
        # the device the features came from (None: host data) and the replica's that answered:
        # the two hops between them are counted copies (kit.devices.transfer) where they differ
        self.source, self.served_on = source, None
        # set once the answer is on its way: `_serve` answers whatever is still unset on a crash
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.future, self.loop, self.device = future, loop, device
        self._done: Any = None
        if future is None:
            self._done = threading.Lock()
            self._done.acquire()

    def answer(self, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        if self.future is None:
            self._done.release()
        elif self.loop is None:
            _settle(self, result, error)
        else:
            _settle_in_loop(self.loop, [(self, result, error)])

    def wait(self, timeout: float | None) -> bool:
        return self._done.acquire(timeout=-1 if timeout is None else max(0.0, timeout))


def _settle(request: _Request, result: np.ndarray | None, error: BaseException | None) -> None:
    """Complete a request's Future with its answer (wrapped on the device the caller was on when
    it submitted) or its error, at most once: a Future already done (cancelled by its caller, or
    answered) is left alone. What cannot be delivered -- no memory on the caller's device, an
    exception a Future refuses (asyncio refuses StopIteration) -- arrives as a RuntimeError."""
    future = request.future
    if future.done():
        return
    try:
        if error is None:
            future.set_result(_deliver(result, request.served_on, request.device))
        else:
            future.set_exception(error)
    except Exception as exc:
        if not future.done():
            failed = RuntimeError(f"ParallelInference: the answer could not be delivered: {exc!r}")
            failed.__cause__ = error if error is not None else exc
            future.set_exception(failed)


def _hop(dst: np.ndarray, to: AnyDevice, src: np.ndarray, frm: AnyDevice | None) -> None:
    """Copy host data that stands for `frm`'s (None: host data) into `dst`, standing for `to`'s,
    counted as a copy between their devices where they differ. The host side of a GPU is cpu:0:
    the GPU's own hop to and from the host is counted where it happens (numpy(), asarray)."""
    a = host_source(to).physical
    b = a if frm is None else host_source(frm).physical
    transfer(dst, a, src, b, host_arrays=True)


def _moves(frm: AnyDevice | None, to: AnyDevice) -> bool:
    return frm is not None and host_source(frm).physical is not host_source(to).physical


def _deliver(result: np.ndarray, served_on: AnyDevice | None, device: AnyDevice | None = None) -> NDArray:
    """An answer computed on `served_on` as an array on `device` (None: the caller's current
    device), the copy between the two devices counted."""
    dst = current_device() if device is None else device
    if served_on is not None and _moves(served_on, dst):
        moved = np.empty_like(result)
        _hop(moved, dst, result, served_on)
        result = moved
    return asarray(result, device=dst)


def _gather(parts: list[tuple[np.ndarray, AnyDevice | None]], device: AnyDevice) -> np.ndarray:
    """Requests' features, each with the device it came from (None: host data), as one array for
    a replica on `device`: features from another device are copies between devices, counted (a
    simulated host device's data needs no physical copy, but on real devices it is one, and
    transfer_stats() must show it)."""
    if len(parts) == 1 and not _moves(parts[0][1], device):
        return parts[0][0]
    first = parts[0][0]
    out = np.empty((sum(f.shape[0] for f, _ in parts), *first.shape[1:]), dtype=first.dtype)
    start = 0
    for features, source in parts:
        n = features.shape[0]
        _hop(out[start : start + n], device, features, source)
        start += n
    return out


_Settled = tuple[_Request, "np.ndarray | None", "BaseException | None"]


def _settle_all(answers: list[_Settled]) -> None:
    for request, result, error in answers:
        _settle(request, result, error)


def _settle_in_loop(loop: asyncio.AbstractEventLoop, answers: list[_Settled]) -> None:
    try:
        loop.call_soon_threadsafe(_settle_all, answers)
    except RuntimeError:  # that event loop is closed: nobody is left to await these answers
        pass


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _within(future: asyncio.Future, deadline: float | None) -> bool:
    """Wait for `future` until `deadline` (time.monotonic; None: no limit). False if it is not
    done by then; its own result or exception is left in it (a TimeoutError it holds is the
    answer's, not this wait's). A cancelled wait does not cancel `future`."""
    if deadline is None:
        await asyncio.wait((future,))
    else:
        await asyncio.wait((future,), timeout=max(0.0, deadline - time.monotonic()))
    return future.done()


def _deadline(timeout: Any, call: str) -> float | None:
    """The one timeout rule of every call that waits (`output`, `submit`, `output_async`, and
    `shutdown` for its joins), in every mode: None or +inf (or more than threading.TIMEOUT_MAX,
    ~292 years) wait without limit; a number >= 0 is the seconds the call may wait, counted from
    now (0: no waiting at all, so what is not ready at once times out); a negative number or NaN
    raises ValueError and a non-number TypeError, at the call, naming the value, before anything
    is queued. Returns the time.monotonic() deadline (None: no limit)."""
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


# ---------------------------------------------------------------------------------------
# the process-wide BLAS limit, shared by every live ParallelInference: the first one sets it,
# the last one to go restores what was there before (nested objects do not restore each other's)

_blas_lock = threading.RLock()  # re-entrant: a collected instance may release inside acquire
_blas_holders: dict[int, int] = {}  # token -> BLAS threads it asked for
_blas_original: Any = None  # the first holder's limiter: it remembers the original limits
_blas_tokens = iter(range(1, 1 << 62))


def _blas_acquire(limit: int) -> int:
    global _blas_original
    with _blas_lock:
        token = next(_blas_tokens)
        before = min(_blas_holders.values(), default=None)
        _blas_holders[token] = limit
        if _blas_original is None:
            _blas_original = threadpool_limits(limits=limit, user_api="blas")
        elif before is None or limit < before:
            threadpool_limits(limits=limit, user_api="blas")
        return token


def _blas_release(token: int) -> None:
    global _blas_original
    with _blas_lock:
        if _blas_holders.pop(token, None) is None:
            return
        if not _blas_holders:
            if _blas_original is not None:
                _blas_original.restore_original_limits()
            _blas_original = None
        else:
            threadpool_limits(limits=min(_blas_holders.values()), user_api="blas")


# ---------------------------------------------------------------------------------------
# the engine: queue, replicas and worker threads. Workers reference only this, so the
# ParallelInference that owns it can be garbage collected (and then shuts the engine down).


class _Engine:
    def __init__(
        self,
        replicas: list[Network],
        devices: list[AnyDevice],
        batched: bool,
        batch_limit: int,
        queue_limit: int,
        input_shape: tuple[int, ...],
    ) -> None:
        self.replicas, self.devices = replicas, devices
        self.locks = [threading.Lock() for _ in replicas]  # update_model vs a running batch
        # the served model's per-example shape: every request is checked against it when it is
        # queued (or borrows a replica), under the lock, so none reaches a model that cannot take it
        self.input_shape = input_shape
        self.batch_limit = batch_limit if batched else 1
        self.queue_limit = queue_limit
        # re-entrant: the garbage collector can finalize the owning ParallelInference (shutdown ->
        # close) in any thread at any allocation, also in one that holds this lock
        self.lock = threading.RLock()
        self.has_work = threading.Condition(self.lock)
        self.has_room = threading.Condition(self.lock)
        self.pending: collections.deque[_Request] = collections.deque()
        self.closed = False
        self.idle = 0  # workers waiting for work: a request wakes one only if there is one
        self.blocked = 0  # callers waiting for room in the queue
        # asyncio callers waiting for room: (their loop, a Future of that loop set when there may be
        # room); they wait on their loop, never in a thread
        self.room_waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = collections.deque()
        self.live = 0  # workers that have not exited
        # requests taken by a worker (or, INPLACE, admitted to borrow a replica) and not answered
        # yet: with `pending`, what an update_model to another input shape must wait for
        self.running = 0
        # INPLACE: the replicas not lent out, and the callers waiting for one
        self.free: collections.deque[int] = collections.deque(range(len(replicas)))
        self.has_replica = threading.Condition(self.lock)
        self.borrowers_waiting = 0
        self.batches_run = 0
        self.requests_served = 0
        # requests merged per batch, for the chapter: the latest ones only, so a server that runs
        # for days does not grow without bound (DL4J's ParallelInference did, dl4j#4018)
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=BATCH_SIZES_KEPT)
        self.threads: list[threading.Thread] = []

    def start(self, names: list[str]) -> None:
        self.live = len(names)
        self.threads = [
            threading.Thread(target=self._work, args=(i,), name=name, daemon=True) for i, name in enumerate(names)
        ]
        for t in self.threads:
            t.start()

    # ---- client side -----------------------------------------------------------------
    def _admit_locked(self, features: np.ndarray) -> None:
        """Refuse a request once shut down, or one checked against a model that update_model
        replaced by one of another input shape while the request was on its way here."""
        if self.closed:
            raise RuntimeError(SHUT_DOWN)
        if features.shape[1:] != self.input_shape:
            dims = ", ".join(map(str, self.input_shape))
            raise ValueError(
                f"output: expected one example of shape {self.input_shape} or a batch (n, {dims}), got "
                f"{features.shape}: update_model changed the input shape while this request was on its way"
            )

    def submit(self, request: _Request, deadline: float | None) -> None:
        """Queue a request; with a full queue wait for room (back-pressure). A worker's own thread
        (a Future's done-callback that asks again) queues past the limit: it would wait for itself."""
        with self.lock:
            while not self.closed and len(self.pending) >= self.queue_limit:  # back-pressure
                if threading.current_thread() in self.threads:  # a worker never waits: only workers make room
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"ParallelInference: the request queue stayed full ({self.queue_limit})")
                self.blocked += 1
                try:
                    self.has_room.wait(left)
                finally:
                    self.blocked -= 1
            self._admit_locked(request.features)
            self.pending.append(request)
            if self.idle:
                self.has_work.notify()

    def submit_async(self, request: _Request, loop: asyncio.AbstractEventLoop) -> asyncio.Future | None:
        """From an event loop's thread: queue the request (None), or, with the queue full, return
        a Future of the loop that is set when there may be room (then try again)."""
        with self.lock:
            self._admit_locked(request.features)
            if len(self.pending) < self.queue_limit:
                self.pending.append(request)
                if self.idle:
                    self.has_work.notify()
                return None
            waiter = loop.create_future()
            self.room_waiters.append((loop, waiter))
            return waiter

    def forget(self, waiter: asyncio.Future) -> None:
        """An asyncio caller stops waiting for room (timeout, cancellation): drop its place, or,
        if room was already signalled to it, pass that on to the next one waiting."""
        with self.lock:
            for i, (_, w) in enumerate(self.room_waiters):
                if w is waiter:
                    del self.room_waiters[i]
                    return
            self._make_room_locked(1)

    def _make_room_locked(self, n: int) -> None:
        """Room for `n` more requests: wake that many waiting callers, threads and asyncio tasks."""
        if self.blocked:
            self.has_room.notify(n)
        while n > 0 and self.room_waiters:
            loop, waiter = self.room_waiters.popleft()
            try:
                loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                continue
            if loop.is_running():  # a stopped loop tries again when it runs again: not counted
                n -= 1

    def borrow(
        self, features: np.ndarray, deadline: float | None, timeout: Any, gone: threading.Event | None = None
    ) -> int | None:
        """INPLACE: lend the calling thread a replica (the index), waiting for one until
        `deadline`: TimeoutError after it, the shut-down error if shutdown() comes first, None if
        `gone` is set first (its asyncio caller stopped waiting). Counted as running until
        `give_back`."""
        with self.lock:
            self._admit_locked(features)
            self.running += 1
            try:
                while not self.free:
                    if gone is not None and gone.is_set():
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"ParallelInference: no result within {timeout} s (every replica in use)")
                    self.borrowers_waiting += 1
                    try:
                        self.has_replica.wait(left)
                    finally:
                        self.borrowers_waiting -= 1
                    if self.closed:
                        raise RuntimeError(f"{SHUT_DOWN} before this request ran")
                if gone is not None and gone.is_set():
                    self.running -= 1
                    return None
                return self.free.popleft()
            except BaseException:
                self.running -= 1
                raise

    def give_back(self, index: int, served: bool) -> None:
        with self.lock:
            self.free.append(index)
            self.running -= 1
            if served:
                self.batches_run += 1
                self.requests_served += 1
                self.batch_sizes.append(1)
            self.has_replica.notify()

    def wake_borrowers(self) -> None:
        """A borrower's caller gave up (`gone`): let the waiting ones look again."""
        with self.lock:
            self.has_replica.notify_all()

    def withdraw(self, request: _Request) -> bool:
        """Take a request that timed out back out of the queue; False if a worker has it."""
        with self.lock:
            try:
                self.pending.remove(request)
            except ValueError:
                return False
            self._make_room_locked(1)
            return True

    # ---- worker side -----------------------------------------------------------------
    def _work(self, index: int) -> None:
        attach_thread_to_device(self.devices[index])
        try:
            while True:
                group = self._take()
                if group is None:
                    return
                self._serve(index, group)
        finally:
            with self.lock:
                self.live -= 1
                orphans = self._close_locked() if self.live == 0 else []
            _refuse(orphans)
            destroy_all_workspaces_for_current_thread()
            detach_thread()

    def _take(self) -> list[_Request] | None:
        """The next batch: the oldest request and every waiting one of its shape, up to the
        batch limit, all under one acquisition of the lock. None once shut down."""
        with self.lock:
            while not self.pending:
                if self.closed:
                    return None
                self.idle += 1
                try:
                    self.has_work.wait()
                finally:
                    self.idle -= 1
            if self.closed:
                return None
            pending = self.pending
            first = pending.popleft()
            group = [first]
            self.running += 1  # and one for each request merged below
            if self.batch_limit > 1 and pending:
                shape = first.features.shape[1:]
                skipped = []
                while pending and len(group) < self.batch_limit:
                    r = pending.popleft()
                    (group if r.features.shape[1:] == shape else skipped).append(r)
                if skipped:  # other shapes keep their place at the head of the queue
                    pending.extendleft(reversed(skipped))
                    if self.idle:
                        self.has_work.notify()
            self.running += len(group) - 1
            self._make_room_locked(len(group))
            return group

    def _fail(self, request: _Request, error: BaseException) -> None:
        """Answer a request the worker took with an error (counted as no longer running first:
        a caller that has its answer never finds its request still counted)."""
        with self.lock:
            self.running -= 1
        request.answer(error=error)

    def _serve(self, index: int, group: list[_Request]) -> None:
        counted = False  # the whole group counted as served and no longer running
        try:
            try:
                out = self._run(index, group)
            except Exception as exc:
                if len(group) == 1:
                    self._fail(group[0], exc)
                    return
                # one bad request must not fail the others. NaN data, the common case, is found by
                # a check of each request: those fail with indices into their own rows, the rest
                # run again as one batch. Any other failure: each request runs alone, so every
                # error is the failing request's own.
                good = []
                for r in group:
                    try:
                        _check_finite(r.features)
                    except ValueError as bad:
                        self._fail(r, bad)
                    else:
                        good.append(r)
                if len(good) < len(group):
                    if good:
                        self._serve(index, good)
                    return
                for r in group:
                    self._serve(index, [r])
                return
            # every answer sliced first, then the callers released in one tight loop: each release
            # wakes a thread that needs the GIL, so the less this thread does in between, the better
            start, parts = 0, []
            for r in group:
                n = r.features.shape[0]
                parts.append(out[start] if r.single else out[start : start + n])
                start += n
            # counted before any caller is released: a caller that has its answer finds it counted
            # (counted after, a test read 160 of 192 under load)
            with self.lock:
                self.batches_run += 1
                self.requests_served += len(group)
                self.batch_sizes.append(len(group))
                self.running -= len(group)
                counted = True
            loops: dict[asyncio.AbstractEventLoop, list[_Settled]] | None = None
            for r, part in zip(group, parts):
                if r.loop is None:
                    r.answer(result=part)
                else:  # asyncio callers: one call into each event loop for the whole batch
                    if loops is None:
                        loops = {}
                    loops.setdefault(r.loop, []).append((r, part, None))
            if loops:
                for loop, answers in loops.items():
                    _settle_in_loop(loop, answers)
                    for r, part, _ in answers:
                        r.result = part  # on its way: not to be answered again below
        except BaseException as exc:  # never leave a caller waiting, whatever happened
            error = exc
            if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt: this thread's, not the callers'
                error = RuntimeError(f"ParallelInference: the worker stopped ({exc!r}) before answering")
                error.__cause__ = exc
            for r in group:
                if r.result is None and r.error is None:  # not answered yet
                    if counted:
                        r.answer(error=error)
                    else:
                        self._fail(r, error)
            raise

    def _run(self, index: int, group: list[_Request]) -> np.ndarray:
        device = self.devices[index]
        feats = _gather([(r.features, r.source) for r in group], device)
        for r in group:
            r.served_on = device
        with self.locks[index]:
            out = self.replicas[index].output(feats)
            # one copy the callers own: their views must not share memory kit may reuse
            return np.array(out.numpy(), copy=True)

    # ---- shutdown ----------------------------------------------------------------------
    def _close_locked(self) -> list[_Request]:
        self.closed = True
        orphans = list(self.pending)
        self.pending.clear()
        self.has_work.notify_all()
        self._make_room_locked(len(self.room_waiters))  # they try again and find it shut down
        self.has_room.notify_all()
        self.has_replica.notify_all()  # INPLACE callers waiting for a replica: refused
        return orphans

    def close(self, timeout: float | None) -> list[str]:
        """Refuse new requests, answer the waiting ones with an error, join the workers (the
        batches they are running finish first). Returns the names of threads still alive."""
        with self.lock:
            orphans = self._close_locked()
        _refuse(orphans)
        me = threading.current_thread()
        if self.lock._is_owned():  # finalized inside a locked section: the workers need the lock to leave
            return [t.name for t in self.threads if t.is_alive() and t is not me]
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self.threads:
            if t is not me:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive() and t is not me]


def _refuse(requests: list[_Request]) -> None:
    for r in requests:
        r.answer(error=RuntimeError(f"{SHUT_DOWN} before this request ran"))


def _check_finite(arr: np.ndarray) -> None:
    """Network.output's check, done on one request of a batch that failed: the index is into
    that request's own rows."""
    if arr.dtype.kind != "f" or math.isfinite(float(np.add.reduce(arr, axis=None))):
        return
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        where = ", ".join(str(int(i)) for i in bad[0])
        raise ValueError(f"features contain NaN or infinity ({len(bad)} values; first at index [{where}])")


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
        self._closed = True  # until fully built: a failed __init__ leaves nothing to shut down
        self._blas_token: int | None = None
        if not isinstance(model, Network):
            raise TypeError(f"ParallelInference needs a kit.nn.Network, got {type(model).__name__}")
        self.mode = InferenceMode(inference_mode)
        if isinstance(devices, str) or hasattr(devices, "kind"):  # one device, by name or object
            devices = [devices]
        workers = workers if workers is not None else (len(devices) if devices else 2)
        for name, value in (("workers", workers), ("batch_limit", batch_limit), ("queue_limit", queue_limit)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelInference({name}={value!r}): must be a positive integer")
        self.model, self.workers, self.batch_limit, self.queue_limit = model, workers, batch_limit, queue_limit
        self.devices: list[AnyDevice] = [as_device(d) for d in devices] if devices else default_devices(workers)
        self.devices = [self.devices[i % len(self.devices)] for i in range(workers)]
        replicas = [model.clone(device=d) for d in self.devices]
        self._engine = _Engine(
            replicas, self.devices, self.mode is InferenceMode.BATCHED, batch_limit, queue_limit, model.input_shape
        )
        self._served_key = _answer_key(model)  # what the replicas answer with, parameters aside
        self._update_lock = threading.Lock()  # one update_model at a time
        self._closed = False
        if all(d.kind == "cpu" for d in self.devices) and workers > 1:
            # concurrent BLAS calls from several workers, each with all cores, fight each other:
            # share the cores out while this object lives (process-wide, restored by shutdown)
            self._blas_token = _blas_acquire(max(1, (os.cpu_count() or 1) // workers))
        if self.mode is not InferenceMode.INPLACE:  # INPLACE lends the replicas to the callers
            self._engine.start([f"InferenceThread-{i}" for i in range(workers)])

    # ---- what the engine counts --------------------------------------------------------
    @property
    def replicas(self) -> list[Network]:
        return self._engine.replicas

    @property
    def batches_run(self) -> int:
        return self._engine.batches_run

    @property
    def requests_served(self) -> int:
        return self._engine.requests_served

    @property
    def batch_sizes(self) -> list[int]:
        """Requests merged per batch run (1 in SEQUENTIAL and INPLACE), for the latest
        `BATCH_SIZES_KEPT` batches (a copy)."""
        return list(self._engine.batch_sizes)

    def queued(self) -> int:
        """Requests waiting for a worker (not counting the batches running)."""
        return len(self._engine.pending)

    # ---- the client side ----------------------------------------------------------------
    def output(self, x: Any, timeout: float | None = None) -> NDArray:
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
        request = _Request(arr, single, source=source)
        self._engine.submit(request, deadline)
        if not request.wait(_left(deadline)):
            if self._engine.withdraw(request) or not request.wait(0):
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        if request.error is not None:
            raise request.error
        return _deliver(request.result, request.served_on)

    def submit(self, x: Any, timeout: float | None = None) -> concurrent.futures.Future:
        """`output` without waiting for the answer: a Future of it, so that one thread can keep
        many requests in flight. A wrong shape or dtype raises here, NaN data fails the Future
        (the worker finds it); a full queue makes this call wait (at most `timeout` seconds, then
        TimeoutError). The answer is wrapped on the device the calling thread is on now; the
        Future cannot be cancelled once returned (it is queued). Done-callbacks run in a worker's
        thread (keep them short; one that submits again is queued even past `queue_limit`). In
        INPLACE mode the forward pass runs here, in this call, and the Future is done on return;
        waiting for a free replica is what waiting for room is in the other modes (bounded by
        `timeout`, a TimeoutError or the shut-down error raised here). `timeout` follows
        `output`'s rule (None, inf, 0, and ValueError for a negative one or NaN)."""
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
            self._engine.submit(_Request(arr, single, future, device=current_device(), source=source), deadline)
        return future

    async def output_async(self, x: Any, timeout: float | None = None) -> NDArray:
        """`output` for asyncio: awaits the answer without a thread per caller, so an event loop
        can serve any number of concurrent requests; a worker answers all of a batch's requests
        from one loop with one call into it. Waits at most `timeout` seconds in all (for room in
        a full queue, which it awaits on the loop, and for the answer), then TimeoutError; a
        request still queued when it times out or its task is cancelled is taken back. INPLACE
        runs the forward pass in the loop's default executor (the loop must not block), and the
        timeout bounds the whole wait, forward pass included. `timeout` follows `output`'s rule
        (None, inf, 0, and ValueError for a negative one or NaN)."""
        deadline = _deadline(timeout, "output_async")
        arr, single, source = self._prepare(x)
        if arr is None:
            return single
        loop = asyncio.get_running_loop()
        if self.mode is InferenceMode.INPLACE:
            return await self._inplace_async(loop, arr, single, timeout, deadline, source)
        engine = self._engine
        request = _Request(arr, single, loop.create_future(), loop, current_device(), source)
        while (waiter := engine.submit_async(request, loop)) is not None:  # a full queue
            try:
                if not await _within(waiter, deadline):
                    raise TimeoutError(f"ParallelInference: the request queue stayed full ({self.queue_limit})")
            except BaseException:  # timed out or cancelled while waiting for room: never queued
                waiter.cancel()
                engine.forget(waiter)
                raise
        try:
            if deadline is None:  # the common case, without asyncio.wait's extra future
                return await request.future
            if not await _within(request.future, deadline):
                request.future.cancel()
                engine.withdraw(request)
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        except asyncio.CancelledError:
            request.future.cancel()
            engine.withdraw(request)  # not run if still queued; an answer already on its way is dropped
            raise
        return request.future.result()

    async def _inplace_async(
        self,
        loop: asyncio.AbstractEventLoop,
        arr: np.ndarray,
        single: bool,
        timeout: float | None,
        deadline: Any,
        source: AnyDevice | None = None,
    ) -> NDArray:
        device, gone, engine = current_device(), threading.Event(), self._engine

        def run() -> NDArray | None:
            i = engine.borrow(arr, deadline, timeout, gone)
            return None if i is None else self._run_borrowed(i, arr, single, device, source)

        job = asyncio.ensure_future(loop.run_in_executor(None, run))
        try:
            if not await _within(job, deadline):
                raise TimeoutError(f"ParallelInference: no result within {timeout} s")
        except BaseException:
            gone.set()  # a call that has no replica yet does not run at all
            engine.wake_borrowers()
            job.cancel()
            raise
        return job.result()

    def _prepare(self, x: Any) -> tuple[np.ndarray | None, Any, AnyDevice | None]:
        """The caller's checks, in its own thread: (contiguous features, whether one example,
        the device they came from or None for host data), or (None, the empty answer, None) for a
        batch of no examples."""
        if self._closed:
            raise RuntimeError(SHUT_DOWN)
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
        # NaN data is left to the worker's check of the whole batch (see _serve): a NumPy pass
        # over one request here lets go of the GIL, and with many callers getting it back costs
        # more than the pass (measured: ~20 us per request with 64 asyncio clients)
        arr = np.ascontiguousarray(arr, dtype=model.dtype)
        if arr.shape[0] == 0:  # nothing to run: the empty answer, shaped like a real one
            return None, asarray(np.zeros((0, *model.output_shape), dtype=model.dtype)), None
        return arr, single, source

    def _run_borrowed(
        self, i: int, arr: np.ndarray, single: bool, device: AnyDevice | None = None, source: AnyDevice | None = None
    ) -> NDArray:
        """INPLACE: the forward pass on replica `i`, lent to this thread by `borrow`; the copies
        from the caller's device to the replica's and back counted as every other."""
        engine, served = self._engine, False
        on = engine.devices[i]
        try:
            feats = _gather([(arr, source)], on)
            with engine.locks[i]:
                out = np.array(engine.replicas[i].output(feats).numpy(), copy=True)
            served = True
        finally:
            engine.give_back(i, served)
        return _deliver(out[0] if single else out, on, device)

    # ---- control -----------------------------------------------------------------------
    def update_model(self, model: Network) -> None:
        """Serve `model` from now on, without a restart: every request made after this returns
        is answered with what `model.output()` returns. Everything answers depend on is swapped:
        parameters (BatchNorm's running statistics among them), layers, loss and its output
        activation, dtype, input and output shape; nothing else is asked of `model` (its updater,
        L2, seed, workspace modes and device may be anything: the replicas stay on this server's
        devices). With the same architecture, loss and dtype only the parameters are copied into
        the replicas; otherwise new replicas are built. Requests already queued or running are
        answered by the old model or the new one.

        A model of another input shape cannot answer the requests queued for the old one: such
        an update is made only while no request is queued or running, and otherwise raises
        ValueError naming both shapes and changes nothing (every queued request is answered by
        the current model). A request checked against the old shape that arrives after the swap
        is refused at its call with the usual shape error."""
        if not isinstance(model, Network):
            raise TypeError(f"ParallelInference.update_model needs a kit.nn.Network, got {type(model).__name__}")
        engine = self._engine
        with model._lock:  # one whole state, also while another thread trains the model
            params = model.params()
            key = _answer_key(model)
        config = model.configuration
        with self._update_lock:
            rebuild = key != self._served_key
            fresh = [Network.from_config(config, device=d) for d in self.devices] if rebuild else []
            for replica in fresh:
                replica.flat_params.assign(params)  # as it is: output() of a NaN model is NaN here too
            if model.input_shape != engine.input_shape:
                with engine.lock:  # nothing is admitted meanwhile: the swap is atomic for every caller
                    waiting = len(engine.pending) + engine.running
                    if waiting:
                        raise ValueError(
                            f"ParallelInference.update_model: the new model takes examples of shape "
                            f"{model.input_shape} but the served one takes {engine.input_shape}, and {waiting} "
                            f"request(s) of shape {engine.input_shape} are queued or running; they stay with the "
                            "current model. Update to another input shape when no request is in flight"
                        )
                    for i, replica in enumerate(fresh):  # no batch runs: the replica locks are free
                        with engine.locks[i]:
                            engine.replicas[i] = replica
                    engine.input_shape = model.input_shape
                    self.model, self._served_key = model, key
                return
            for i in range(len(engine.replicas)):
                with engine.locks[i]:  # after the batch it may be running
                    if rebuild:
                        engine.replicas[i] = fresh[i]
                    else:
                        engine.replicas[i].flat_params.assign(params)
            self.model, self._served_key = model, key

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Refuse new requests, answer every waiting one with a clear error (queued, waiting for
        room, or, INPLACE, waiting for a replica), restore the BLAS limit and join every worker (a
        batch already running finishes first; a worker still running after `timeout` seconds is
        named in a warning and left to finish). `timeout` follows `output`'s rule: None or
        math.inf join without limit, 0 does not wait, a negative one or NaN raises ValueError."""
        deadline = _deadline(timeout, "shutdown")
        if self._closed:
            return
        self._closed = True
        try:
            alive = self._engine.close(_left(deadline))
            if alive:
                log.warning("ParallelInference.shutdown: %s still running after %s s", alive, timeout)
        finally:
            token, self._blas_token = self._blas_token, None
            if token is not None:
                _blas_release(token)

    def threads_alive(self) -> int:
        return sum(t.is_alive() for t in self._engine.threads) if hasattr(self, "_engine") else 0
