"""AsyncPrefetchIterator's ring of batches: a batch taken as NumPy is a copy that stays; the ring grows
for larger batches instead of overwriting (more of kit.data.async_iter in tests/data/test_data.py)."""

import numpy as np
from _datasets import random_dataset

from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.nn import mlp


def test_a_prefetched_batch_as_numpy_is_a_stable_copy():
    with AsyncPrefetchIterator(ArrayIterator(random_dataset(200), 10), prefetch=2, min_size=0) as it:
        batches = iter(it)
        first = next(batches).features.numpy()
        snapshot = first.copy()
        for _ in range(12):
            next(batches)
    np.testing.assert_array_equal(first, snapshot)


def test_prefetch_ring_grows_for_larger_batches_instead_of_overwriting():
    class Growing:
        async_supported = True
        batch_size = 4

        def __iter__(self):
            rng = np.random.default_rng(0)
            for n in (4, 4, 40, 40, 40, 40, 40, 40):
                yield DataSet(rng.random((n, 6)), rng.integers(0, 3, n), num_classes=3)

    net = mlp(6, hidden=(4,), n_out=3)
    net.fit(Growing(), epochs=2, prefetch=2)  # raised ArrayOverwrittenError before the ring could grow
    assert net.iteration == 16


def test_an_epoch_left_early_over_a_stalled_source_does_not_wait_forever(monkeypatch):
    """`for ds in it: break` over a base iterator that then blocks waited forever in the drain (and
    fit with a listener that raised never raised)."""
    import threading
    import time

    import pytest

    from kit.data import async_iter

    monkeypatch.setattr(async_iter, "DRAIN_TIMEOUT", 0.5)
    release = threading.Event()
    ds = random_dataset()

    class Stalls:
        async_supported = True

        def __iter__(self):
            yield ds
            release.wait(30)  # a reader whose source stopped answering
            yield ds

    it = AsyncPrefetchIterator(Stalls(), prefetch=1)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="gave no batch within 0.5 s of the epoch's early end"):
        for _ in it:
            break
    assert time.monotonic() - t0 < 10
    with pytest.raises(RuntimeError, match="the previous epoch's producer is still waiting"):  # not its stale batch
        next(iter(it))
    release.set()
    it.shutdown(timeout=10)
