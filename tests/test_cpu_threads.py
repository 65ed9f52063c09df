"""kit.core.cpu_threads: concurrent CPU workers share the cores, BLAS's thread limit read back from
threadpoolctl itself: a share holds it while it lives, side-by-side shares keep the smallest, and
the last one released restores what was there before."""

import os

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from kit.core.cpu_threads import BlasThreadShare, blas_threads, cores_per_worker

CORES = os.cpu_count() or 1


def _blas_limit() -> int | None:
    """The thread limit of the first BLAS threadpoolctl sees, None where there is none."""
    blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return blas[0]["num_threads"] if blas else None


needs_blas = pytest.mark.skipif(_blas_limit() is None, reason="threadpoolctl sees no BLAS here")


@pytest.mark.parametrize("workers", [0, 1, 2, 3, CORES, 4 * CORES])
def test_each_worker_gets_an_even_share_of_the_cores_and_at_least_one(workers):
    share = cores_per_worker(workers)
    assert share == max(1, CORES // max(1, workers)) and share >= 1
    assert share * max(1, workers) <= max(CORES, max(1, workers))  # never more threads than cores, one each


@needs_blas
def test_blas_threads_limits_a_block_and_gives_the_limit_back():
    before = _blas_limit()
    with blas_threads(1):
        assert _blas_limit() == 1
    assert _blas_limit() == before


@needs_blas
def test_shares_side_by_side_keep_the_smallest_and_the_last_restores_the_limit_from_before():
    with threadpool_limits(limits=max(2, CORES), user_api="blas"):
        before = _blas_limit()
        wide = BlasThreadShare(workers=1)
        assert _blas_limit() == wide.threads == cores_per_worker(1)
        narrow = BlasThreadShare(workers=CORES * 2)  # one thread each
        assert narrow.threads == 1 and _blas_limit() == 1
        narrow.release()
        assert _blas_limit() == wide.threads  # the live share's limit again
        narrow.release()  # releasing twice does nothing
        assert _blas_limit() == wide.threads
        wide.release()
        assert _blas_limit() == before


@needs_blas
def test_a_share_in_a_with_block_is_released_by_it():
    before = _blas_limit()
    with BlasThreadShare(workers=CORES * 2) as share:
        assert share.threads == 1 and _blas_limit() == 1
    assert _blas_limit() == before
