"""The one training loop: batches, epoch and iteration counters, listeners, stop conditions.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.training.listeners import ScoreIterationListener
    >>> from kit.nn import mlp
    >>> from kit.nn.loop import TrainingLoop
    >>> train, test = load_digits()                       # 1,438 training examples: 23 batches of 64
    >>> net = mlp(64, hidden=(32,), n_out=10)
    >>> loop = TrainingLoop(net, net.train_step, listeners=[ScoreIterationListener(30)])
    >>> loop.run(ArrayIterator(train, 64), epochs=3)      # what Network.fit(it, epochs=3) does
    Score at iteration 30 is ...
    Score at iteration 60 is ...
    3
    >>> net.iteration, net.epoch                          # the counters live on the model
    (69, 3)

`Network.fit`, `ParallelWrapper.fit`, both early-stopping trainers and the Spark training
masters run this loop (Chainer's Trainer with extensions); they differ only in the *step*, which
trains on `batches_per_step` mini-batches and returns one `StepResult` per mini-batch. What can be
trained builds its own loop (`Trainable.make_loop`), so early stopping asks for one:

    >>> loop = net.make_loop(listeners=[], iteration_conditions=[])
    >>> loop.run(ArrayIterator(train, 64), epochs=1), net.epoch
    (1, 4)

The listener protocol and its numbering are DL4J's, the same on every path:

    on_fit_start(model)
    on_epoch_start(model, epoch)                 epoch: index of the epoch that starts (0, 1, ...)
    iteration_done(model, iteration, epoch, score=, batch_size=[, worker=], etl_ms=)
                                                 iteration: iterations done, this one included
    on_epoch_end(model, epoch)                   epoch: index of the epoch that just ended

The epoch counter moves on after `on_epoch_end` and the `epoch_end` hook, so a model saved there
carries its own epoch's index. An epoch cut short still ends with `on_epoch_end`.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kit.core.arguments import whole

__all__ = [
    "HOOKS",
    "EmptyDataError",
    "NonFiniteScoreError",
    "StepResult",
    "Trainable",
    "TrainingLoop",
    "call_listener",
    "loop_hooks",
]


class EmptyDataError(ValueError):
    """An epoch produced no mini-batches (an empty data set, or a generator already used up)."""


class NonFiniteScoreError(FloatingPointError):
    """A mini-batch's loss was NaN or infinite and no stop condition took care of it."""


@dataclass(frozen=True)
class StepResult:
    """What one mini-batch of a step gave: its score, its size, and who trained on it."""

    score: float
    batch_size: int
    model: Any = None  # the model listeners see for this result (a replica, in a wrapper)
    worker: int | None = None
    skipped: bool = False  # the loss scaler skipped this step (no update): a non-finite score is expected


Step = Callable[[Sequence[Any]], Sequence[StepResult]]


def call_listener(listener: Any, name: str, *args: Any, **kw: Any) -> None:
    """Call an optional listener method (listeners implement only what they need)."""
    fn = getattr(listener, name, None)
    if fn is not None:
        fn(*args, **kw)


@runtime_checkable
class Trainable(Protocol):
    """What can be trained by the one loop: it builds the loop with its own step, counters and
    stop hooks (Network: one mini-batch a step; ParallelWrapper: one per worker, counted on the
    wrapper, stopping every replica). Early stopping trains whatever implements it."""

    def make_loop(self, **hooks: Any) -> TrainingLoop:
        """The loop over this trainable's own step. `hooks`, each optional, are TrainingLoop's:
        listeners, iteration_conditions, epoch_end (see `loop_hooks`)."""
        ...


HOOKS = ("listeners", "iteration_conditions", "epoch_end")


def loop_hooks(trainable: Any, hooks: dict[str, Any]) -> dict[str, Any]:
    """What a `make_loop(**hooks)` passes on to its TrainingLoop: only the loop's hooks (the
    step, counters and batches per step are the trainable's own); anything else is refused,
    naming it, at the call."""
    unknown = sorted(set(hooks) - set(HOOKS))
    if unknown:
        raise TypeError(
            f"{type(trainable).__name__}.make_loop: unknown argument(s) {unknown}; it takes {', '.join(HOOKS)}"
        )
    return hooks


class TrainingLoop:
    """Runs `step` over the mini-batches of `data`, epoch after epoch, and tells listeners.

    model:            what listeners receive in epoch callbacks (and in iteration callbacks
                      unless a StepResult names another model)
    counters:         the object holding `iteration` and `epoch` (default: model)
    batches_per_step: mini-batches handed to one step (the number of workers of a wrapper;
                      the last group of an epoch may be shorter)
    iteration_conditions: objects with `terminate(score) -> bool` (or callables score -> bool),
                      checked on every result; True stops the loop after that step (early
                      stopping's iteration termination conditions); `stopped_by` names it
    epoch_end:        callable epoch -> bool, after `on_epoch_end` of a complete epoch; True stops
                      the loop (early stopping scores, saves and checks its epoch conditions here)
    """

    def __init__(
        self,
        model: Any,
        step: Step,
        *,
        listeners: Iterable[Any] = (),
        counters: Any = None,
        batches_per_step: int = 1,
        iteration_conditions: Iterable[Any] = (),
        epoch_end: Callable[[int], bool] | None = None,
    ) -> None:
        batches_per_step = whole("TrainingLoop", "batches_per_step", batches_per_step)
        self.model = model
        self.step = step
        self.listeners = list(listeners)
        self.counters = counters if counters is not None else model
        self.batches_per_step = batches_per_step
        self.iteration_conditions = list(iteration_conditions)
        self.epoch_end = epoch_end
        self.stopped_by: Any = None  # the iteration condition that fired, if one did
        self.interrupted = False  # the last epoch was cut short
        self.epochs_run = 0
        self._stop = False

    def stop(self) -> None:
        """Stop after the current step (from a listener, another thread, a condition)."""
        self._stop = True

    def attach(self, *models: Any) -> TrainingLoop:
        """Make `model.stop_fit()` stop this loop, for every model listeners may be handed. The
        models hold it weakly: a loop (and the wrapper whose step it runs) is not kept alive by
        the user's model after training."""
        for model in models:
            model._loop = weakref.ref(self)
        return self

    def run_step(self, batches: Sequence[Any]) -> None:
        """One step outside any epoch (DL4J's fit(DataSet)): listeners see the current epoch."""
        self._step(list(batches), self.counters.epoch, 0.0)

    # ---- the loop --------------------------------------------------------------------
    def run(self, data: Iterable[Any], epochs: int | None = 1) -> int:
        """Train for `epochs` epochs (None: until `stop()`, a condition or `epoch_end` ends it).
        Returns the number of epochs run (an interrupted one included)."""
        if epochs is not None:
            epochs = whole("fit", "epochs", epochs)
        if epochs is None and self.epoch_end is None and not self.iteration_conditions:
            raise ValueError("TrainingLoop.run(epochs=None) needs a stop condition or an epoch_end hook")
        self._stop, self.stopped_by, self.interrupted, self.epochs_run = False, None, False, 0
        for listener in self.listeners:
            call_listener(listener, "on_fit_start", self.model)
        while epochs is None or self.epochs_run < epochs:
            epoch = self.counters.epoch
            for listener in self.listeners:
                call_listener(listener, "on_epoch_start", self.model, epoch)
            batches = self._epoch(data, epoch)
            if hasattr(data, "reset"):
                data.reset()
            self.epochs_run += 1
            if batches == 0:  # nothing trained: the epoch counter stays
                raise EmptyDataError(_empty_message(data, epoch, first=self.epochs_run == 1))
            self.interrupted = self._stop
            for listener in self.listeners:
                call_listener(listener, "on_epoch_end", self.model, epoch)
            stop = self.epoch_end(epoch) if self.epoch_end is not None and not self._stop else False
            self.counters.epoch = epoch + 1
            if self._stop or stop:
                break
        return self.epochs_run

    def _epoch(self, data: Iterable[Any], epoch: int) -> int:
        group: list[Any] = []
        seen = 0
        t_etl = time.perf_counter()
        etl_ms = 0.0
        for ds in data:
            group.append(ds)
            seen += 1
            if len(group) < self.batches_per_step:
                continue
            etl_ms = (time.perf_counter() - t_etl) * 1e3
            self._step(group, epoch, etl_ms)
            group = []
            if self._stop:
                return seen
            t_etl = time.perf_counter()
        if group:
            self._step(group, epoch, (time.perf_counter() - t_etl) * 1e3)
        return seen

    def _step(self, group: list[Any], epoch: int, etl_ms: float) -> None:
        model = self.model
        if hasattr(model, "last_etl_ms"):
            model.last_etl_ms = etl_ms
        counters = self.counters
        before = counters.iteration
        results = self.step(group)
        if counters.iteration == before:  # a Network's step moves it itself, under its lock
            counters.iteration = before + 1
        iteration = counters.iteration
        # a step whose every result is a refused one (a non-finite loss, nothing updated) is no
        # iteration: listeners and conditions see its number, the count goes back after them
        refused = bool(results) and all(not math.isfinite(r.score) and not r.skipped for r in results)
        try:
            self._after_step(results, group, iteration, epoch, etl_ms)
        finally:
            if refused:
                counters.iteration = before

    def _after_step(self, results: list[Any], group: list[Any], iteration: int, epoch: int, etl_ms: float) -> None:
        """The listeners, the stop conditions, and the refusal of a non-finite loss nothing stopped."""
        model = self.model
        for r in results:
            info: dict[str, Any] = {"score": r.score, "batch_size": r.batch_size, "etl_ms": etl_ms}
            if r.worker is not None:
                info["worker"] = r.worker
            target = r.model if r.model is not None else model
            for listener in self.listeners:
                call_listener(listener, "iteration_done", target, iteration, epoch, **info)
        for r in results:
            for condition in self.iteration_conditions:
                if getattr(condition, "terminate", condition)(r.score):
                    self.stopped_by = condition
                    self._stop = True
                    return
        for i, r in enumerate(results):  # nothing stopped it: training on from here would train on garbage
            if not math.isfinite(r.score) and not r.skipped:  # a skipped step changed nothing: not an error
                who = f", worker {r.worker}" if r.worker is not None else ""
                target = r.model if r.model is not None else model
                explain = getattr(target, "non_finite_cause", None)
                cause = explain(group[i]) if explain is not None and i < len(group) else None
                cause = cause or "the parameters may no longer be finite. Lower the learning rate or scale the features"
                raise NonFiniteScoreError(
                    f"iteration {iteration} (epoch {epoch}{who}): the loss is {r.score}; {cause}; to stop cleanly "
                    "instead, train with early stopping and InvalidScoreIterationTerminationCondition"
                )


def _empty_message(data: Any, epoch: int, first: bool) -> str:
    if first:
        return (
            f"fit: the training data ({type(data).__name__}) produced no mini-batches; give a non-empty DataSet "
            "or iterator"
        )
    return (
        f"fit: the training data ({type(data).__name__}) produced no mini-batches in epoch {epoch} after "
        "producing some before: a generator can be iterated only once; pass a list of DataSets or an "
        "iterator with reset() (ArrayIterator) to train several epochs"
    )
