"""kit.lifecycle.ShutsDownOnExit: the objects that own threads shut them down on `with` exit and when dropped."""

import gc
import sys
import threading

import pytest
from _datasets import random_dataset

from kit.data import ArrayIterator, AsyncPrefetchIterator
from kit.lifecycle import ShutsDownOnExit
from kit.nn import mlp
from kit.parallel import ParallelWrapper


def _threads(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_dropped_wrapper_and_prefetch_iterator_leave_no_threads():
    pw = ParallelWrapper(mlp(6, hidden=(4,), n_out=3), workers=2, prefetch_buffer=0)
    pw.fit(ArrayIterator(random_dataset(), 8))
    it = AsyncPrefetchIterator(ArrayIterator(random_dataset(), 8), prefetch=2, min_size=0)
    assert len(list(it)) == 8
    assert _threads("ParallelWrapper") and _threads("kit-prefetch")
    del pw, it
    gc.collect()
    for t in _threads("ParallelWrapper") + _threads("kit-prefetch"):
        t.join(timeout=10)
    assert not _threads("ParallelWrapper") and not _threads("kit-prefetch")


class Owner(ShutsDownOnExit):
    """A thread owner that writes down each shutdown (and may fail in it, as one can at interpreter exit)."""

    def __init__(self, log, name, fail=False):
        self.log, self.name, self.fail = log, name, fail

    def shutdown(self):
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name}: already shut down")


def test_with_returns_the_owner_and_shuts_it_down_on_exit_even_after_an_error():
    log = []
    with pytest.raises(ValueError, match="inside"):
        with Owner(log, "a") as owner:
            assert owner.name == "a" and log == []
            raise ValueError("inside")
    assert log == ["a"]  # once, on the way out; the error goes on


def test_dropping_an_owner_shuts_it_down_and_an_error_in_that_shutdown_is_swallowed(monkeypatch):
    log, unraisable = [], []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    Owner(log, "dropped")
    failing = Owner(log, "failing", fail=True)
    del failing
    gc.collect()
    assert log == ["dropped", "failing"] and unraisable == []
