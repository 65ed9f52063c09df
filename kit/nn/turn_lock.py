"""A network's lock: re-entrant, and fair to a thread that waits while another trains.

    >>> from kit.nn.turn_lock import TurnLock
    >>> lock = TurnLock()
    >>> with lock:
    ...     with lock:                     # re-entrant: save() inside a training step
    ...         lock.waiting
    0

Training holds the lock for one iteration at a time and would take it straight back after each:
a released Python lock goes to whoever asks first, and the training thread asks within
microseconds. So a thread that had to wait (save, output, score from elsewhere) is counted in
`waiting`, and the trainer calls `let_waiters_in()` between two iterations. `rlock` is the
RLock itself, for a holder that must wait for nobody (the trainer inside its iteration, and
`Network.output`'s try without waiting). A Network's is `net.lock`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["TurnLock"]


class TurnLock:
    """A network's lock (re-entrant). Training holds it for one iteration at a time and would
    take it straight back after each (a released Python lock goes to whoever asks first, and
    the training thread asks within microseconds); a thread that had to wait for it (save,
    output, score from elsewhere) is counted, and let in between two iterations."""

    __slots__ = ("_count", "rlock", "waiting")

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self._count = threading.Lock()
        self.waiting = 0

    def __enter__(self) -> TurnLock:
        if not self.rlock.acquire(blocking=False):
            with self._count:
                self.waiting += 1
            try:
                self.rlock.acquire()
            finally:
                with self._count:
                    self.waiting -= 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self.rlock.release()

    def let_waiters_in(self, patience: float = 0.05) -> None:
        """Wait (at most `patience` seconds) until the threads queued for the lock have got it."""
        if self.rlock._is_owned():  # still held further out: nobody can come in now
            return
        deadline = time.monotonic() + patience
        while self.waiting and time.monotonic() < deadline:
            time.sleep(0.0001)
