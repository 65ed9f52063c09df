"""DataSet, ArrayIterator, async prefetch (and the kept-batch trap). IDX files, data sets: test_datasets.py."""

import threading

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, AsyncPrefetchIterator, AsyncShieldIterator, DataSet
from kit.workspaces.workspace import ArrayOverwrittenError


def small(n=100, features=4, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((n, features)), rng.integers(0, classes, n), num_classes=classes)


def test_dataset_one_hot_and_checks():
    ds = DataSet(np.zeros((3, 2)), [2, 0, 1], num_classes=3)
    assert ds.labels.numpy().tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0]]
    assert ds.features.dtype == np.float64 and ds.num_classes == 3  # floating data keep their dtype
    assert ds.labels.dtype == np.float64  # and the labels follow the features
    with pytest.raises(ValueError, match="3 feature rows but 2 labels"):
        DataSet(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match=r"label -1 at index 0 is out of range"):
        DataSet(np.zeros((1, 2)), [-1], num_classes=2)
    with pytest.raises(ValueError, match=r"label 0\.5 at index 0 is not a whole number: class labels must be integers"):
        DataSet(np.zeros((2, 2)), [0.5, 1.0])
    with pytest.raises(ValueError, match="need a batch axis"):
        DataSet(np.zeros(3), [0, 1, 2])


def test_array_iterator_covers_every_example_once_per_epoch():
    data = small(103)
    it = ArrayIterator(data, batch_size=10, shuffle=True, seed=3)
    assert len(it) == 11
    for _ in range(2):
        seen = np.concatenate([b.features.numpy() for b in it])
        assert seen.shape == (103, 4)
        np.testing.assert_array_equal(np.sort(seen, axis=0), np.sort(data.features.numpy(), axis=0))
    first = [b.features.numpy()[0].copy() for b in ArrayIterator(data, 10, shuffle=True, seed=3)]
    again = [b.features.numpy()[0].copy() for b in ArrayIterator(data, 10, shuffle=True, seed=3)]
    np.testing.assert_array_equal(first, again)  # seeded
    assert len(list(ArrayIterator(data, 10, drop_last=True))) == 10


def test_unshuffled_batches_are_views_no_allocation():
    data = small(64)
    before = kit.memory.heap_allocations(this_thread=True)
    batches = list(ArrayIterator(data, batch_size=16))
    assert kit.memory.heap_allocations(this_thread=True) == before and len(batches) == 4


@pytest.mark.usefixtures("host_devices")
def test_async_prefetch_yields_the_same_batches_in_order():
    data = small(200)
    plain = [b.features.numpy().copy() for b in ArrayIterator(data, 16)]
    with AsyncPrefetchIterator(ArrayIterator(data, 16), prefetch=3, min_size=0) as it:
        for _ in range(2):  # two epochs on one background thread
            got = [b.features.numpy().copy() for b in it]
            assert len(got) == len(plain)
            for a, b in zip(got, plain):
                np.testing.assert_array_equal(a, b)
        assert it.workspace.config.circular and it.workspace.resets > 0
    assert not any(t.name == "kit-prefetch" for t in threading.enumerate())


def test_a_batch_kept_past_its_turn_raises_instead_of_changing():
    data = small(600)
    with AsyncPrefetchIterator(ArrayIterator(data, 20), prefetch=2, min_size=0) as it:
        batches = iter(it)
        for _ in range(3):
            next(batches)  # past the learning cycle, into the ring
        kept = next(batches)
        raw_view = kept.features.data  # the raw view (what ND4J users hold): the memory itself
        snapshot = raw_view.copy()
        for _ in range(12):
            next(batches)
        with pytest.raises(ArrayOverwrittenError, match="wrapped around"):
            kept.features.sum()
        assert not np.array_equal(raw_view, snapshot)  # the memory really holds other data now
        safe = next(batches).detach()
        for _ in range(5):
            next(batches)
        assert safe.features.is_valid


@pytest.mark.usefixtures("host_devices")
def test_async_prefetch_reports_producer_errors():
    class Exploding:
        batch_size = 4

        def __iter__(self):
            yield small(4)
            raise OSError("disk went away")

    it = AsyncPrefetchIterator(Exploding(), prefetch=2, min_size=0)
    with pytest.raises(OSError, match="disk went away"):
        list(it)
    it.shutdown()


def test_stopping_early_and_shield():
    data = small(100)
    with AsyncPrefetchIterator(ArrayIterator(data, 10), prefetch=2, min_size=0) as it:
        for i, _ in enumerate(it):
            if i == 2:
                break
        assert len(list(it)) == 10  # the next epoch is whole
    shield = AsyncShieldIterator(ArrayIterator(data, 10))
    assert not shield.async_supported and len(list(shield)) == 10


def test_shutdown_with_a_suspended_consumer_does_not_hang():
    data = small(400)
    with AsyncPrefetchIterator(ArrayIterator(data, 10), prefetch=2, min_size=0) as it:
        batches = iter(it)
        for _ in range(3):
            next(batches)  # the producer is now blocked on a full queue
    assert not it._thread.is_alive()
    batches.close()  # the generator's cleanup must not wait for a producer that is gone
    with pytest.raises(RuntimeError, match="shut down"):
        list(it)


def _shut_down_from_another_thread(it):
    t = threading.Thread(target=it.shutdown)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()


@pytest.mark.parametrize("use_workspace", [True, False])
def test_a_shutdown_from_another_thread_mid_epoch_is_an_error_not_the_end_of_the_data(use_workspace):
    """Issue 21 item 12: the epoch used to end silently after the batches already seen."""
    from kit.data import IteratorShutDownError

    it = AsyncPrefetchIterator(ArrayIterator(small(400), 10), prefetch=2, min_size=0, use_workspace=use_workspace)
    batches = iter(it)
    seen = [next(batches) for _ in range(3)]
    _shut_down_from_another_thread(it)
    with pytest.raises(IteratorShutDownError, match="shut down during an epoch, after 3 batch"):
        next(batches)
    assert len(seen) == 3
    with pytest.raises(IteratorShutDownError, match="make a new one"):  # and every later epoch says so too
        next(iter(it))


def test_every_way_of_stopping_the_iterator_tells_its_consumer():
    """The class: a consumer blocked waiting, one that shuts it down itself inside its loop, a
    finished epoch then shutdown (no error: the data did end), and Network.fit(prefetch=) whose
    iterator is shut down from another thread mid-fit."""
    from kit.data import IteratorShutDownError
    from kit.nn import Sgd, mlp

    # a consumer blocked in next() while the producer waits inside a slow base iterator
    release, inside, got_first = threading.Event(), threading.Event(), threading.Event()

    class Slow:
        batch_size = 10

        def __iter__(self):
            yield small(10)
            inside.set()
            release.wait(timeout=30)  # bounded: the test releases it
            yield small(10)

    it = AsyncPrefetchIterator(Slow(), prefetch=2, min_size=0)
    outcome = []

    def consume():
        try:
            for _ in it:
                got_first.set()
            outcome.append("ended")
        except IteratorShutDownError as exc:
            outcome.append(str(exc))

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert inside.wait(timeout=30) and got_first.wait(timeout=30)  # the consumer now waits for batch 2
    with pytest.warns(RuntimeWarning, match="still inside the base iterator"):
        assert it.shutdown(timeout=0.2) is False  # the producer is stuck in Slow: bounded, says so
    consumer.join(timeout=30)
    assert not consumer.is_alive() and outcome and "after 1 batch" in outcome[0]
    release.set()
    it._thread.join(timeout=30)
    assert not it._thread.is_alive()

    # the consumer shuts it down itself inside its loop: the next batch raises
    it = AsyncPrefetchIterator(ArrayIterator(small(100), 10), prefetch=2, min_size=0)
    with pytest.raises(IteratorShutDownError, match="after 2 batch"):
        for i, _ in enumerate(it):
            if i == 1:
                it.shutdown()

    # a whole epoch, then shutdown: the epoch really ended, nothing to report
    it = AsyncPrefetchIterator(ArrayIterator(small(100), 10), prefetch=2, min_size=0)
    assert len(list(it)) == 10
    assert it.shutdown() is True

    # Network.fit with prefetch: the loop's iterator is shut down from another thread
    net = mlp(4, hidden=(8,), n_out=3, updater=Sgd(0.1))
    data = ArrayIterator(small(2000), 10)
    wrapped = []
    real = AsyncPrefetchIterator.__iter__

    def spy(self):  # keep a handle on fit's iterator; the real one runs
        wrapped.append(self)
        return real(self)

    from kit.training.listeners import TrainingListener

    class Stopper(TrainingListener):
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == 5:
                _shut_down_from_another_thread(wrapped[0])

    AsyncPrefetchIterator.__iter__ = spy
    try:
        with pytest.raises(IteratorShutDownError, match="after 5 batch"):
            net.fit(data, epochs=1, prefetch=2, listeners=[Stopper()])
    finally:
        AsyncPrefetchIterator.__iter__ = real
    assert net.iteration == 5


@pytest.mark.parametrize("bad", [-1, float("nan"), "1"])
def test_shutdown_refuses_a_bad_timeout(bad):
    it = AsyncPrefetchIterator(ArrayIterator(small(20), 10), prefetch=2, min_size=0)
    with pytest.raises(ValueError, match=r"shutdown\(timeout="):
        it.shutdown(timeout=bad)
    assert it.shutdown() is True
