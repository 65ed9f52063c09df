"""The engine behind ParallelInference: the request queue, batching, back-pressure, the replica
workers, and recovery after a failed batch.

One lock guards everything here. A caller queues a `Request` (`submit`, or `submit_async` from
an event loop); a full queue makes it wait for room (back-pressure). A worker thread takes the
oldest request and, BATCHED, every waiting one of its shape (`_take`), runs them as one batch on
its own replica (`_serve`), counts the batch and only then releases the batch's callers (a
caller holding its answer finds it counted). A batch that fails is split so that only the
request that caused it fails (`_retry_apart`). INPLACE has no workers: callers borrow a replica
(`borrow`, `run_borrowed`, `give_back`: kit.parallel.inference.lending).

The worker threads reference only the engine, never the ParallelInference that owns it, so the
owner can be garbage collected (and then shuts the engine down).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

import numpy as np

from kit.arrays.checks import check_finite
from kit.core.devices import AnyDevice, attach_thread_to_device, detach_thread
from kit.nn.network import Network
from kit.parallel.inference.delivery import SHUT_DOWN, Request, answer_batch, gather, shut_down_error
from kit.parallel.inference.lending import Lending
from kit.workspaces.workspace import destroy_all_workspaces_for_current_thread

__all__ = ["BATCH_SIZES_KEPT", "SHUT_DOWN", "Counts", "Engine"]

BATCH_SIZES_KEPT = 100_000  # `batch_sizes` remembers this many of the latest batches


class _Waiters(threading.Condition):
    """A condition of the engine's lock that counts the threads waiting on it: a notify is sent
    only when one waits."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.count = 0

    def wait_until(self, deadline: float | None, late: str) -> None:
        """Wait (the lock held) to be notified, at most until `deadline` (None: no limit); a
        TimeoutError saying `late` if the deadline has passed already."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(f"ParallelInference: {late}")
        self.count += 1
        try:
            self.wait(left)
        finally:
            self.count -= 1


class Counts:
    """What the engine counts, for the chapter: batches run, requests served, and the requests
    merged per batch -- the latest `BATCH_SIZES_KEPT` only, so a server that runs for days does
    not grow without bound (DL4J's ParallelInference did, dl4j#4018). Written under the engine's
    lock, before the batch's callers are released."""

    def __init__(self) -> None:
        self.batches_run = 0
        self.requests_served = 0
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=BATCH_SIZES_KEPT)

    def add_batch(self, requests: int) -> None:
        self.batches_run += 1
        self.requests_served += requests
        self.batch_sizes.append(requests)


class Engine(Lending):
    """The queue and the replicas of one ParallelInference: `replicas[i]` on `devices[i]`,
    served by worker thread i (`start`), or, INPLACE (no `start`), lent to the callers. At most
    `queue_limit` requests wait; a worker merges up to `batch_limit` of them (1: every request
    runs alone). Everything here is guarded by `lock`."""

    def __init__(
        self, model: Network, replicas: list[Network], devices: list[AnyDevice], batch_limit: int, queue_limit: int
    ) -> None:
        self.replicas, self.devices = replicas, devices
        self.locks = [threading.Lock() for _ in replicas]  # update_model vs a running batch
        # the served model and its per-example shape: every request is checked against it when it
        # is queued (or borrows a replica), under the lock, so none reaches a model that cannot take it
        self.model, self.input_shape = model, model.input_shape
        self.batch_limit = batch_limit
        self.queue_limit = queue_limit
        # re-entrant: the garbage collector can finalize the owning ParallelInference (shutdown ->
        # close) in any thread at any allocation, also in one that holds this lock
        self.lock = threading.RLock()
        self.has_work = threading.Condition(self.lock)
        self.has_room = _Waiters(self.lock)  # callers waiting for room in the queue
        self.pending: collections.deque[Request] = collections.deque()
        self.closed = False
        self.idle = 0  # workers waiting for work: a request wakes one only if there is one
        # asyncio callers waiting for room: (their loop, a Future of that loop set when there may be
        # room); they wait on their loop, never in a thread
        self.room_waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = collections.deque()
        self.live = 0  # workers that have not exited
        # requests taken by a worker (or, INPLACE, admitted to borrow a replica) and not answered
        # yet: with `pending`, what an update_model to another input shape must wait for
        self.running = 0
        # INPLACE: the replicas not lent out, and the callers waiting for one
        self.free: collections.deque[int] = collections.deque(range(len(replicas)))
        self.has_replica = _Waiters(self.lock)  # INPLACE callers waiting for a replica
        self.counts = Counts()
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
            raise shut_down_error()
        if features.shape[1:] != self.input_shape:
            dims = ", ".join(map(str, self.input_shape))
            raise ValueError(
                f"output: expected one example of shape {self.input_shape} or a batch (n, {dims}), got "
                f"{features.shape}: update_model changed the input shape while this request was on its way"
            )

    def submit(self, request: Request, deadline: float | None) -> None:
        """Queue a request; with a full queue wait for room (back-pressure). A worker's own thread
        (a Future's done-callback that asks again) queues past the limit: it would wait for itself."""
        with self.lock:
            while not self.closed and len(self.pending) >= self.queue_limit:  # back-pressure
                if threading.current_thread() in self.threads:  # a worker never waits: only workers make room
                    break
                self.has_room.wait_until(deadline, f"the request queue stayed full ({self.queue_limit})")
            self._admit_locked(request.features)
            self._queue_locked(request)

    def submit_async(self, request: Request, loop: asyncio.AbstractEventLoop) -> asyncio.Future | None:
        """From an event loop's thread: queue the request (None), or, with the queue full, return
        a Future of the loop that is set when there may be room (then try again)."""
        with self.lock:
            self._admit_locked(request.features)
            if len(self.pending) < self.queue_limit:
                self._queue_locked(request)
                return None
            waiter = loop.create_future()
            self.room_waiters.append((loop, waiter))
            return waiter

    def _queue_locked(self, request: Request) -> None:
        self.pending.append(request)
        if self.idle:
            self.has_work.notify()

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
        if self.has_room.count:
            self.has_room.notify(n)
        while n > 0 and self.room_waiters:
            loop, waiter = self.room_waiters.popleft()
            try:
                loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                continue
            if loop.is_running():  # a stopped loop tries again when it runs again: not counted
                n -= 1

    def withdraw(self, request: Request) -> bool:
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

    def _take(self) -> list[Request] | None:
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

    def _serve(self, index: int, group: list[Request]) -> None:
        """Run a batch on replica `index` and answer every request in it: with its slice of the
        output, or, if the batch fails, with an error of its own (`_retry_apart`). Whatever
        happens, no caller is left waiting."""
        counted = False  # the whole group counted as served and no longer running
        try:
            try:
                out = self._run(index, group)
            except Exception as exc:
                self._retry_apart(index, group, exc)
                return
            # every answer sliced first, then the callers released in one tight loop (answer_batch)
            start, parts = 0, []
            for r in group:
                n = r.features.shape[0]
                parts.append(out[start] if r.single else out[start : start + n])
                start += n
            # counted before any caller is released: a caller that has its answer finds it counted
            # (counted after, a test read 160 of 192 under load)
            with self.lock:
                self.counts.add_batch(len(group))
                self.running -= len(group)
                counted = True
            answer_batch(group, parts)
        except BaseException as exc:  # never leave a caller waiting, whatever happened
            self._answer_the_rest(group, exc, counted)
            raise

    def _retry_apart(self, index: int, group: list[Request], exc: Exception) -> None:
        """A batch failed with `exc`: one bad request must not fail the others. NaN data, the
        common case, is found by a check of each request: those fail with indices into their own
        rows, the rest run again as one batch. Any other failure: each request runs alone, so
        every error is the failing request's own."""
        if len(group) == 1:
            self._fail(group[0], exc)
            return
        good = []
        for r in group:
            try:
                check_finite(r.features, "features")  # Network.output's check, on one request's own rows
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

    def _answer_the_rest(self, group: list[Request], exc: BaseException, counted: bool) -> None:
        """The worker is failing with `exc` (its own bug, or SystemExit, KeyboardInterrupt): every
        request of the group not answered yet gets an error (uncounted as running first)."""
        error = exc
        if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt: this thread's, not the callers'
            error = RuntimeError(f"ParallelInference: the worker stopped ({exc!r}) before answering")
            error.__cause__ = exc
        for r in group:
            if not r.answered():
                if counted:
                    r.answer(error=error)
                else:
                    self._fail(r, error)

    def _fail(self, request: Request, error: BaseException) -> None:
        """Answer a request the worker took with an error (counted as no longer running first:
        a caller that has its answer never finds its request still counted)."""
        with self.lock:
            self.running -= 1
        request.answer(error=error)

    def _run(self, index: int, group: list[Request]) -> np.ndarray:
        device = self.devices[index]
        feats = gather([(r.features, r.source) for r in group], device)
        for r in group:
            r.served_on = device
        return self.forward(index, feats)

    def forward(self, index: int, features: np.ndarray) -> np.ndarray:
        """Replica `index`'s output for `features` (already on its device), under the replica's
        lock (update_model waits for it), as one copy the callers own: their views must not share
        memory kit may reuse."""
        with self.locks[index]:
            out = self.replicas[index].output(features)
            return np.array(out.numpy(), copy=True)

    # ---- update_model ------------------------------------------------------------------
    def swap_model(self, model: Network, fresh: list[Network] | None, params: Any) -> None:
        """Serve `model` from now on: `fresh` replicas (one per worker, built for it) replace the
        old ones, or, None, `params` are copied into the old ones, each after the batch it may be
        running. To another input shape only while no request is queued or running: otherwise
        ValueError naming both shapes, and nothing changes."""
        if model.input_shape != self.input_shape:
            self._swap_input_shape(model, fresh or [])  # another input shape: new replicas
            return
        for i in range(len(self.replicas)):
            with self.locks[i]:  # after the batch it may be running
                if fresh is not None:
                    self.replicas[i] = fresh[i]
                else:
                    self.replicas[i].flat_params.assign(params)
        self.model = model

    def _swap_input_shape(self, model: Network, fresh: list[Network]) -> None:
        with self.lock:  # nothing is admitted meanwhile: the swap is atomic for every caller
            waiting = len(self.pending) + self.running
            if waiting:
                raise ValueError(
                    f"ParallelInference.update_model: the new model takes examples of shape "
                    f"{model.input_shape} but the served one takes {self.input_shape}, and {waiting} "
                    f"request(s) of shape {self.input_shape} are queued or running; they stay with the "
                    "current model. Update to another input shape when no request is in flight"
                )
            for i, replica in enumerate(fresh):  # no batch runs: the replica locks are free
                with self.locks[i]:
                    self.replicas[i] = replica
            self.model, self.input_shape = model, model.input_shape

    # ---- shutdown ----------------------------------------------------------------------
    def _close_locked(self) -> list[Request]:
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


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _refuse(requests: list[Request]) -> None:
    for r in requests:
        r.answer(error=shut_down_error(" before this request ran"))
