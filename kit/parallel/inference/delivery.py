"""Requests and their answers: what a caller hands in, and how its answer gets back to it.

A `Request` carries one caller's features and says where its answer goes: to a blocking caller
(`ParallelInference.output`), which waits on a plain lock; to a `concurrent.futures.Future`
(`submit`), settled in the worker's thread; or to an asyncio Future (`output_async`), settled in
the caller's event loop. `answer_batch` releases a whole batch's callers at once, with one call
into each event loop however many of its requests the batch holds.

The way in and the way out are copies between devices where the caller's device and the
replica's differ: `gather` brings requests' features to a replica, `deliver` brings an answer
back to the caller's device, both counted by kit.devices.transfer like every other copy.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np

from kit.arrays.creation import asarray
from kit.arrays.ndarray import NDArray
from kit.core.devices import AnyDevice, current_device, host_source, transfer

__all__ = ["SHUT_DOWN", "SHUT_DOWN_REMEDY", "Request", "answer_batch", "deliver", "gather", "shut_down_error", "within"]

SHUT_DOWN = "ParallelInference was shut down"  # the error of every request a shutdown refuses
SHUT_DOWN_REMEDY = (
    "a server serves no more once shutdown() or the end of its `with` block stopped it: "
    "make a new one, ParallelInference(net, ...), to serve more requests"
)


def shut_down_error(when: str = "") -> RuntimeError:
    """The error of a request a shut-down server refuses: what happened (`when`: " before this
    request ran" for one already queued) and what to do."""
    return RuntimeError(f"{SHUT_DOWN}{when}; {SHUT_DOWN_REMEDY}")


class Request:
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
        # set once the answer is on its way: the worker answers whatever is still unset on a crash
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.future, self.loop, self.device = future, loop, device
        self._done: Any = None
        if future is None:
            self._done = threading.Lock()
            self._done.acquire()

    def answered(self) -> bool:
        """Whether the answer is on its way (a result or an error has been given)."""
        return self.result is not None or self.error is not None

    def answer(self, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        if self.future is None:
            self._done.release()
        elif self.loop is None:
            _settle(self, result, error)
        else:
            _settle_in_loop(self.loop, [(self, result, error)])

    def wait(self, timeout: float | None) -> bool:
        """A blocking caller waits for its answer: True once it is in, False after `timeout`
        seconds (None: no limit)."""
        return self._done.acquire(timeout=-1 if timeout is None else max(0.0, timeout))

    def received(self) -> NDArray:
        """A blocking caller's answer, in its own thread once `wait` said it is in: the result as
        an array on the caller's current device, or the request's error, raised."""
        if self.error is not None:
            raise self.error
        return deliver(self.result, self.served_on)


def _settle(request: Request, result: np.ndarray | None, error: BaseException | None) -> None:
    """Complete a request's Future with its answer (wrapped on the device the caller was on when
    it submitted) or its error, at most once: a Future already done (cancelled by its caller, or
    answered) is left alone. What cannot be delivered -- no memory on the caller's device, an
    exception a Future refuses (asyncio refuses StopIteration) -- arrives as a RuntimeError."""
    future = request.future
    if future.done():
        return
    try:
        if error is None:
            future.set_result(deliver(result, request.served_on, request.device))
        else:
            future.set_exception(error)
    except Exception as exc:
        if not future.done():
            failed = RuntimeError(f"ParallelInference: the answer could not be delivered: {exc!r}")
            failed.__cause__ = error if error is not None else exc
            future.set_exception(failed)


_Settled = tuple[Request, "np.ndarray | None", "BaseException | None"]


def _settle_all(answers: list[_Settled]) -> None:
    for request, result, error in answers:
        _settle(request, result, error)


def _settle_in_loop(loop: asyncio.AbstractEventLoop, answers: list[_Settled]) -> None:
    try:
        loop.call_soon_threadsafe(_settle_all, answers)
    except RuntimeError:  # that event loop is closed: nobody is left to await these answers
        pass


def answer_batch(requests: list[Request], results: list[np.ndarray]) -> None:
    """Release a batch's callers, each with its own slice of the batch's output, in one tight
    loop: each release wakes a thread that needs the GIL, so the less this thread does in between,
    the better. Blocking callers and Futures are answered one by one; asyncio callers with one
    call into each event loop for the whole batch."""
    loops: dict[asyncio.AbstractEventLoop, list[_Settled]] | None = None
    for r, part in zip(requests, results):
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
                r.result = part  # on its way: not to be answered again


async def within(future: asyncio.Future, deadline: float | None) -> bool:
    """Wait for `future` until `deadline` (time.monotonic; None: no limit). False if it is not
    done by then; its own result or exception is left in it (a TimeoutError it holds is the
    answer's, not this wait's). A cancelled wait does not cancel `future`."""
    if deadline is None:
        await asyncio.wait((future,))
    else:
        await asyncio.wait((future,), timeout=max(0.0, deadline - time.monotonic()))
    return future.done()


# ---- the copies between the caller's device and the replica's -----------------------------


def _hop(dst: np.ndarray, to: AnyDevice, src: np.ndarray, frm: AnyDevice | None) -> None:
    """Copy host data that stands for `frm`'s (None: host data) into `dst`, standing for `to`'s,
    counted as a copy between their devices where they differ. The host side of a GPU is cpu:0:
    the GPU's own hop to and from the host is counted where it happens (numpy(), asarray)."""
    a = host_source(to).physical
    b = a if frm is None else host_source(frm).physical
    transfer(dst, a, src, b, host_arrays=True)


def _moves(frm: AnyDevice | None, to: AnyDevice) -> bool:
    return frm is not None and host_source(frm).physical is not host_source(to).physical


def deliver(result: np.ndarray, served_on: AnyDevice | None, device: AnyDevice | None = None) -> NDArray:
    """An answer computed on `served_on` as an array on `device` (None: the caller's current
    device), the copy between the two devices counted."""
    dst = current_device() if device is None else device
    if served_on is not None and _moves(served_on, dst):
        moved = np.empty_like(result)
        _hop(moved, dst, result, served_on)
        result = moved
    return asarray(result, device=dst)


def gather(parts: list[tuple[np.ndarray, AnyDevice | None]], device: AnyDevice) -> np.ndarray:
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
