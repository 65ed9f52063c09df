"""INPLACE inference: no worker threads and no queue; each caller borrows a replica, runs its
forward pass on it in its own thread, and gives it back (`borrow`, `run_borrowed`, `give_back`).
A mixin of kit.parallel.inference.engine.Engine, under the engine's one lock: a borrower is
admitted as a queued request is (the shape checked against the served model, refused once shut
down), counted as running until it gives the replica back, and counted as served before its
caller has the answer.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kit.core.devices import AnyDevice
from kit.parallel.inference.delivery import gather, shut_down_error

__all__ = ["Lending"]


class Lending:
    """Lending replicas to the callers (INPLACE)."""

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
                    self.has_replica.wait_until(deadline, f"no result within {timeout} s (every replica in use)")
                    if self.closed:
                        raise shut_down_error(" before this request ran")
                if gone is not None and gone.is_set():
                    self.running -= 1
                    return None
                return self.free.popleft()
            except BaseException:
                self.running -= 1
                raise

    def run_borrowed(self, index: int, features: np.ndarray, source: AnyDevice | None) -> tuple[np.ndarray, AnyDevice]:
        """INPLACE: the forward pass on replica `index`, lent to this thread by `borrow`, which
        it gives back (counted as served before the caller has its answer). Returns the output
        and the device that computed it; the copy from the caller's device is counted as every
        other."""
        served, on = False, self.devices[index]
        try:
            out = self.forward(index, gather([(features, source)], on))
            served = True
        finally:
            self.give_back(index, served)
        return out, on

    def give_back(self, index: int, served: bool) -> None:
        with self.lock:
            self.free.append(index)
            self.running -= 1
            if served:
                self.counts.add_batch(1)
            self.has_replica.notify()

    def wake_borrowers(self) -> None:
        """A borrower's caller gave up (`gone`): let the waiting ones look again."""
        with self.lock:
            self.has_replica.notify_all()
