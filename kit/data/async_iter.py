"""Asynchronous prefetch (ND4J's AsyncDataSetIterator) and its shield.

    >>> from kit.data import ArrayIterator, AsyncPrefetchIterator, load_digits
    >>> from kit.nn import mlp
    >>> train, test = load_digits()
    >>> net = mlp(64, hidden=(32,), n_out=10)
    >>> it = AsyncPrefetchIterator(ArrayIterator(train, 64), prefetch=4)
    >>> for batch in it:                         # batches made ahead on a background thread
    ...     score = net.fit_batch(batch)
    >>> net.iteration                            # 1,438 examples: 23 batches of 64
    23
    >>> it.shutdown()                            # True: the thread ended (or: with AsyncPrefetchIterator(...) as it:)
    True

A background thread copies each batch into a *circular* workspace (ND4J's: room for prefetch + 3
batches) and queues it. ND4J's rule: `detach()` a batch you keep, because its memory will be
overwritten; ND4J does not check it (dl4j#3281), kit raises ArrayOverwrittenError once the ring has
laid new data over the kept batch. A `shutdown()` from any thread ends the iterator with
IteratorShutDownError at the next batch, never a silent end of the epoch; it waits at most `timeout`.

AsyncShieldIterator wraps an iterator so that nothing prefetches it (async_supported False).
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.arguments import whole
from kit.core.devices import AnyDevice, as_device, attach_thread_to_device
from kit.data.dataset import DataSet, DataSetIterator, dataset_of
from kit.lifecycle import ShutsDownOnExit
from kit.state import STATE
from kit.workspaces.workspace import (
    AllocationPolicy,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    Workspace,
    WorkspaceConfig,
    get_workspace_for_current_thread,
)

__all__ = ["AsyncPrefetchIterator", "AsyncShieldIterator", "IteratorShutDownError"]

_EPOCH, _STOP, _END, _CUT = object(), object(), object(), object()  # _CUT: an epoch stopped before its end


class IteratorShutDownError(RuntimeError):
    """The iterator was shut down while its consumer was still in an epoch: the data did not end."""


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


DRAIN_TIMEOUT = 10.0  # seconds an early-ended epoch waits for its producer to stop (as shutdown()'s default)


class AsyncPrefetchIterator(DataSetIterator, ShutsDownOnExit):
    async_supported = False  # never wrapped twice

    def __init__(
        self,
        base: Iterable[DataSet],
        prefetch: int = 8,
        use_workspace: bool = True,
        min_size: int = 10 << 20,
        device: str | AnyDevice | None = None,
    ) -> None:
        prefetch = whole("AsyncPrefetchIterator", "prefetch", prefetch, 1)
        self.base = base
        self.prefetch = max(2, prefetch)  # ND4J: a queue smaller than 2 becomes 2
        self.batch_size = getattr(base, "batch_size", 0)
        self.use_workspace = use_workspace
        self.config = WorkspaceConfig(
            min_size=min_size,
            overallocation_limit=float(self.prefetch + 2),
            policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
            policy_learning=LearningPolicy.FIRST_LOOP,
            policy_allocation=AllocationPolicy.OVERALLOCATE,
            policy_spill=SpillPolicy.REALLOCATE,
        )
        self.device = as_device(device)
        self.workspace = None  # the producer thread's circular workspace, once it exists
        self._undrained = False  # an epoch ended early while its producer was blocked (see _drain)
        self._requests: queue.Queue = queue.Queue()
        self._out: queue.Queue = queue.Queue(maxsize=self.prefetch)
        self._abort = threading.Event()
        self._shut = threading.Event()  # shutdown() was called: the consumer must hear of it
        self._thread: threading.Thread | None = None
        self._closed = False

    # ---- the producer --------------------------------------------------------------
    # The thread holds only a weak reference to the iterator between epochs, so dropping the
    # iterator (del, or the end of a function) lets it be collected, and its __del__ stops the
    # thread: no thread outlives the object that owned it.
    @staticmethod
    def _run(ref: weakref.ref, requests: queue.Queue, device: AnyDevice, config: WorkspaceConfig) -> None:
        attach_thread_to_device(device)
        ws = get_workspace_for_current_thread(config, STATE.unique_name("ADSI_ITER-"), device)
        owner = ref()
        if owner is not None:
            owner.workspace = ws
        del owner
        try:
            while requests.get() is not _STOP:
                owner = ref()
                if owner is None:
                    return
                owner._epoch(ws)
                del owner
        finally:
            ws.destroy()

    def _epoch(self, ws: Workspace | None) -> None:
        end = _END
        try:
            for ds in self.base:
                if self._abort.is_set():
                    end = _CUT
                    break
                if self.use_workspace:
                    with ws:  # a copy in the ring, on this iterator's device
                        batch = dataset_of(_copy_to(ds.features, self.device), _copy_to(ds.labels, self.device))
                else:
                    batch = (ds.detach() if ds.features.is_attached else ds).to(self.device)
                if not self._put(batch):
                    end = _CUT
                    break
            if hasattr(self.base, "reset"):
                self.base.reset()
        except BaseException as exc:  # reaches the consumer, never a silent hang
            self._put(_Failure(exc))
        self._put(end, force=True)

    def _put(self, item: object, force: bool = False) -> bool:
        while True:
            if self._abort.is_set() and not force:
                return False
            try:
                self._out.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue

    # ---- the consumer --------------------------------------------------------------
    def __iter__(self) -> Iterator[DataSet]:
        if self._closed:
            raise IteratorShutDownError("AsyncPrefetchIterator was shut down; make a new one")
        self._start_thread()
        self._drained_before_epoch()
        self._abort.clear()
        self._requests.put(_EPOCH)
        finished, delivered = False, 0
        try:
            while True:
                if self._shut.is_set():
                    finished = True
                    raise self._shut_down_error(delivered)
                try:
                    item = self._out.get(timeout=0.05)
                except queue.Empty:
                    if not self._thread.is_alive():
                        finished = True
                        raise RuntimeError(
                            f"AsyncPrefetchIterator: the prefetch thread ended after {delivered} batch(es) of this "
                            "epoch without finishing it"
                        ) from None
                    continue
                if item is _END:
                    finished = True
                    return
                if item is _CUT or self._shut.is_set():  # a batch of a shut-down iterator: its ring is gone
                    finished = True
                    raise self._shut_down_error(delivered)
                if isinstance(item, _Failure):
                    self._drain()
                    finished = True
                    raise item.exc
                delivered += 1
                yield item
        finally:
            if not finished:  # the consumer stopped early: stop the producer's epoch cleanly
                self._abort.set()
                self._drain()

    def _drained_before_epoch(self) -> None:
        """An epoch left early while its producer was blocked in the base iterator is drained first
        (its stale batches never reach the new epoch); refused when the producer is still blocked."""
        if self._undrained and not self._drain():
            raise RuntimeError(
                f"AsyncPrefetchIterator: the previous epoch's producer is still waiting for the base iterator's next "
                f"batch ({DRAIN_TIMEOUT:g} s more gone by); its data source has stalled. Shut this one down and make "
                "a new one over a source that answers"
            )

    def _start_thread(self) -> None:
        """Start the prefetch thread on the first epoch (it holds the iterator only by a weak reference)."""
        if self._thread is None:
            args = (weakref.ref(self), self._requests, self.device, self.config)
            self._thread = threading.Thread(
                target=AsyncPrefetchIterator._run, args=args, name="kit-prefetch", daemon=True
            )
            self._thread.start()

    def _shut_down_error(self, delivered: int) -> IteratorShutDownError:
        return IteratorShutDownError(
            f"AsyncPrefetchIterator was shut down during an epoch, after {delivered} batch(es): the data did not "
            "end. Shut it down after the loop (or use it in a with-block), and make a new one to iterate again"
        )

    def _drain(self) -> bool:
        """Discard queued batches until the producer's end marker (or the producer is gone); at most
        DRAIN_TIMEOUT seconds: a producer blocked in its base iterator ends its epoch at its next
        batch, which the next epoch drains first (False: not drained yet, and a warning says why)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            try:
                item = self._out.get(timeout=0.05)
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    self._undrained = False
                    return True
                if time.monotonic() > deadline:
                    self._undrained = True
                    warnings.warn(
                        f"AsyncPrefetchIterator: the base iterator gave no batch within {DRAIN_TIMEOUT:g} s of the "
                        "epoch's early end; not waiting for it (its epoch ends at its next batch)",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    return False
                continue
            if item is _END or item is _CUT:
                self._undrained = False
                return True

    def reset(self) -> None:
        """Each iteration is a new epoch; nothing to do."""

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop the background thread and release its workspace; a consumer still in an epoch
        gets IteratorShutDownError at its next batch. Waits at most `timeout` seconds for the
        thread (a base iterator blocked in its own code cannot be interrupted); returns True when
        it ended, else warns and lets it end by itself at its next batch."""
        number = isinstance(timeout, int | float | np.integer | np.floating) and not isinstance(timeout, bool)
        if not number or not timeout >= 0:  # True is no second; inf waits as long as it takes
            raise ValueError(f"AsyncPrefetchIterator.shutdown(timeout={timeout!r}): seconds >= 0")
        timeout = float(timeout)
        self._shut.set()
        self._closed = True
        if self._thread is threading.current_thread():  # collected on its own thread: it ends by itself
            self._abort.set()
            self._requests.put(_STOP)
            return False
        if self._thread is None or not self._thread.is_alive():
            return True
        self._abort.set()
        self._requests.put(_STOP)
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:  # room, so a blocked producer can finish
            try:
                self._out.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)
        if self._thread.is_alive():
            warnings.warn(
                f"AsyncPrefetchIterator.shutdown: the prefetch thread is still inside the base iterator after "
                f"{timeout} s; it stops at its next batch and releases its workspace then",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        return True


def _copy_to(array: NDArray, device: AnyDevice) -> NDArray:
    """A copy of `array` on `device` in the current allocation context (the transfer path when
    the devices differ)."""
    return array.dup() if array.device is device else array.to(device)


class AsyncShieldIterator(DataSetIterator):
    """Plain delegation that tells kit's loops not to prefetch this iterator."""

    async_supported = False

    def __init__(self, base: Iterable[DataSet]) -> None:
        self.base = base
        self.batch_size = getattr(base, "batch_size", 0)

    def __iter__(self) -> Iterator[DataSet]:
        return iter(self.base)

    def reset(self) -> None:
        if hasattr(self.base, "reset"):
            self.base.reset()
