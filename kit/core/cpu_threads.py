"""CPU threads for concurrent workers: how many BLAS threads each gets, and the process-wide share
that holds that limit while they run.

    >>> from kit.core.devices import cores_per_worker
    >>> cores_per_worker(1) >= cores_per_worker(2) >= 1
    True

n workers each calling a BLAS that uses every core would fight over the cores: each gets
`cores // n` threads (at least one). `blas_threads(n)` limits one block of code;
`BlasThreadShare` holds a limit for as long as a set of workers runs, and shares side by side
keep the smallest. Re-exported by `kit.devices` (where `Device.blas_threads` uses the same rule).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from threadpoolctl import threadpool_limits

from kit.state import STATE

__all__ = ["BlasThreadShare", "blas_threads", "cores_per_worker"]


def cores_per_worker(workers: int) -> int:
    """BLAS threads for each of `workers` concurrent CPU workers: the cores shared evenly, >= 1."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Limit BLAS threads process-wide for the duration (threadpoolctl)."""
    with threadpool_limits(limits=max(1, int(n)), user_api="blas"):
        yield


_blas_lock = threading.RLock()  # re-entrant: a share collected by the GC may be released inside a hold


def _blas_hold(limit: int) -> int:
    with _blas_lock:
        token = next(STATE.blas_tokens)
        before = min(STATE.blas_holders.values(), default=None)
        STATE.blas_holders[token] = limit
        if STATE.blas_original is None:
            STATE.blas_original = threadpool_limits(limits=limit, user_api="blas")
        elif before is None or limit < before:
            threadpool_limits(limits=limit, user_api="blas")
        return token


def _blas_let_go(token: int) -> None:
    with _blas_lock:
        if STATE.blas_holders.pop(token, None) is None:
            return
        if STATE.blas_holders:
            threadpool_limits(limits=min(STATE.blas_holders.values()), user_api="blas")
        else:
            _restore_blas_limits()


@STATE.on_reset
def _restore_blas_limits() -> None:
    """No share holds BLAS threads any more: the limits from before the first one come back."""
    with _blas_lock:
        STATE.blas_holders.clear()
        if STATE.blas_original is not None:
            STATE.blas_original.restore_original_limits()
        STATE.blas_original = None


class BlasThreadShare:
    """`cores_per_worker(workers)` BLAS threads for everything in the process, held while
    `workers` CPU workers run at once (each BLAS call with every core would fight the others for
    them): from construction until `release()`, or for a `with` block. Shares live side by side:
    the smallest limit among the live ones applies, and the last one released restores the limits
    from before the first (shares do not restore each other's). ParallelInference holds one while
    it serves from several CPU workers. `blas_threads(n)` is the plain form for one block of code.

        >>> from kit.core.devices import BlasThreadShare
        >>> with BlasThreadShare(workers=2) as share:  # two workers: half the cores each
        ...     pass                                    # run them here
        >>> share.threads == cores_per_worker(2)
        True
    """

    def __init__(self, workers: int) -> None:
        self.threads = cores_per_worker(workers)
        self._token: int | None = _blas_hold(self.threads)

    def release(self) -> None:
        """Give the share back; once released, releasing again does nothing."""
        token, self._token = self._token, None
        if token is not None:
            _blas_let_go(token)

    def __enter__(self) -> BlasThreadShare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
