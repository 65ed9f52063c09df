"""Early stopping (DL4J's earlystopping package): conditions, score calculators, savers, trainers.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.training.earlystopping import (ClassificationScoreCalculator, EarlyStoppingConfig,
    ...     EarlyStoppingTrainer, InvalidScoreIterationTerminationCondition, LocalFileModelSaver,
    ...     MaxEpochsTerminationCondition,
    ...     ScoreImprovementEpochTerminationCondition)
    >>> from kit.nn import Adam, mlp
    >>> data, test = load_digits()
    >>> train, valid = data.split(0.8)
    >>> net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2))
    >>> config = EarlyStoppingConfig(
    ...     epoch_termination_conditions=[MaxEpochsTerminationCondition(30),
    ...                                   ScoreImprovementEpochTerminationCondition(5)],
    ...     iteration_termination_conditions=[InvalidScoreIterationTerminationCondition()],
    ...     score_calculator=ClassificationScoreCalculator("ACCURACY", ArrayIterator(valid, 256)),
    ...     model_saver=LocalFileModelSaver("checkpoints"))
    >>> result = EarlyStoppingTrainer(config, net, ArrayIterator(train, 64, shuffle=True)).fit()
    >>> print(result)                        # DL4J's fields: why it stopped, the best epoch and its score
    EarlyStoppingResult(terminationReason=EpochTerminationCondition,
      details=ScoreImprovementEpochTerminationCondition(maxEpochsWithNoImprovement=5,
        minImprovement=0.0),
      bestModelEpoch=..., bestModelScore=..., totalEpochs=...)
    >>> result.termination_reason, result.best_model_epoch < result.total_epochs <= 30
    (<TerminationReason.EPOCH_TERMINATION_CONDITION: 'EpochTerminationCondition'>, True)
    >>> result.best_model.evaluate(ArrayIterator(test, 256)).accuracy()   # read from checkpoints/best_model.npz
    0.9...

The pieces a configuration is made of (termination conditions, score calculators, savers and
`EarlyStoppingConfig` itself) live in kit.earlystopping_config and are re-exported here; this
module runs them: the result, the listener and the two trainers.

Semantics are DL4J's, with its parallel trainer's bugs fixed: both trainers honour a score
calculator that maximizes (dl4j#5760: the parallel one always minimized and kept the worst model
under accuracy), record each score against the epoch it belongs to (DL4J's parallel trainer is
off by one), and validate the configuration.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kit.data.dataset import DataSet
from kit.measurement import tables
from kit.nn.loop import TrainingLoop
from kit.nn.network import Network
from kit.parallel.wrapper import ParallelWrapper
from kit.training import earlystopping_config
from kit.training.earlystopping_config import *  # noqa: F403 (the configuration's pieces: re-exported, __all__ below)
from kit.training.earlystopping_config import EarlyStoppingConfig

__all__ = [  # the configuration's pieces, re-exported, and what runs them
    *earlystopping_config.__all__,
    "EarlyStoppingListener",
    "EarlyStoppingParallelTrainer",
    "EarlyStoppingResult",
    "EarlyStoppingTrainer",
    "TerminationReason",
]


class TerminationReason(enum.Enum):
    ERROR = "Error"
    ITERATION_TERMINATION_CONDITION = "IterationTerminationCondition"
    EPOCH_TERMINATION_CONDITION = "EpochTerminationCondition"


@dataclass
class EarlyStoppingResult:
    termination_reason: TerminationReason
    termination_details: str
    score_vs_epoch: dict[int, float]
    best_model_epoch: int
    best_model_score: float
    total_epochs: int
    saver: Any = None
    error: BaseException | None = None
    current_model: Network | None = None  # the trained model, DL4J's fallback when nothing was scored

    @property
    def best_model(self) -> Network | None:
        """The saved best model; the model as training left it when no epoch was scored (DL4J)."""
        best = self.saver.get_best_model() if self.saver is not None else None
        return best if best is not None else self.current_model

    def __str__(self) -> str:
        """DL4J's fields in DL4J's words, one group a line and wrapped at words to kit.tables.WIDTH
        columns (a notebook breaks a longer printed line in the middle of a word)."""
        return tables.wrap(
            f"EarlyStoppingResult(terminationReason={self.termination_reason.value},\n"
            f"  details={self.termination_details},\n"
            f"  bestModelEpoch={self.best_model_epoch}, bestModelScore={self.best_model_score}, "
            f"totalEpochs={self.total_epochs})"
        )


class EarlyStoppingListener:
    def on_start(self, config: EarlyStoppingConfig, net: Network) -> None:
        pass

    def on_epoch(self, epoch: int, score: float, config: EarlyStoppingConfig, net: Network) -> None:
        pass

    def on_completion(self, result: EarlyStoppingResult) -> None:
        pass


# ---------------------------------------------------------------------------------------
# trainers: early stopping is conditions and an epoch-end hook on the one training loop


class _BaseTrainer:
    def __init__(
        self,
        config: EarlyStoppingConfig,
        model: Network,
        train_iterator: Iterable[DataSet],
        listener: EarlyStoppingListener | None = None,
        listeners: Iterable[Any] = (),
    ) -> None:
        if not isinstance(config, EarlyStoppingConfig):
            raise TypeError(f"the first argument must be an EarlyStoppingConfig, got {type(config).__name__}")
        self.config, self.model, self.train = config, model, train_iterator
        self.listener = listener or EarlyStoppingListener()
        self.listeners = list(listeners)

    # what a subclass provides: the loop's step and its counters, and the run's conditions
    def _loop(self, epoch_end: Callable[[int], bool]) -> TrainingLoop:
        raise NotImplementedError

    @contextlib.contextmanager
    def _session(self) -> Iterator[Iterable[DataSet]]:
        yield self.train

    def _model_for_scoring(self) -> Network:
        return self.model

    def fit(self) -> EarlyStoppingResult:
        cfg = self.config
        minimize = cfg.score_calculator.minimize_score  # type: ignore[union-attr]
        for cond in (*cfg.epoch_termination_conditions, *cfg.iteration_termination_conditions):
            cond.initialize()
        self.listener.on_start(cfg, self.model)
        run = _Run(cfg, minimize, self.listener, self._model_for_scoring)
        loop = self._loop(run.epoch_end)
        reason, details, error = None, "", None
        try:
            with self._session() as data:
                loop.run(data, epochs=None)
        except Exception as exc:  # an error ends training; what was saved so far is kept
            reason, details, error = TerminationReason.ERROR, f"{type(exc).__name__}: {exc}", exc
        else:
            if loop.stopped_by is not None:
                reason, details = TerminationReason.ITERATION_TERMINATION_CONDITION, str(loop.stopped_by)
            elif run.stopped_by is not None:
                reason, details = TerminationReason.EPOCH_TERMINATION_CONDITION, str(run.stopped_by)
            else:  # stop_fit() from a listener or another thread
                reason, details = TerminationReason.ITERATION_TERMINATION_CONDITION, "stop_fit() was called"
        finally:
            self._finish()
        # DL4J: an epoch condition counts the epoch it stopped in; otherwise the completed ones
        result = EarlyStoppingResult(
            termination_reason=reason,
            termination_details=details,
            score_vs_epoch=run.scores,
            best_model_epoch=run.best_epoch,
            best_model_score=run.best_score,
            total_epochs=loop.epochs_run - (1 if loop.interrupted else 0),
            saver=cfg.model_saver,
            error=error,
            current_model=self.model,
        )
        self.listener.on_completion(result)
        return result

    def _finish(self) -> None:
        pass


class _Run:
    """One early-stopping run's epoch-end hook: score, keep the best, check the epoch conditions.
    Epochs are numbered by the model's epoch counter, so the best model saved here carries the
    same number as `best_model_epoch`."""

    def __init__(self, cfg: EarlyStoppingConfig, minimize: bool, listener: Any, model: Callable[[], Network]) -> None:
        self.cfg, self.minimize, self.listener, self.model = cfg, minimize, listener, model
        self.scores: dict[int, float] = {}
        self.best_score = math.inf if minimize else -math.inf
        self.best_epoch = -1
        self.stopped_by: Any = None
        self._seen = 0

    def epoch_end(self, model_epoch: int) -> bool:
        # DL4J's epochCount is the run's own: 0 for the first epoch of this run, whatever the
        # model trained before (scores, conditions and best_model_epoch all use it)
        n, self._seen = self.cfg.evaluate_every_n_epochs, self._seen + 1
        epoch = self._seen - 1
        if epoch % n:
            return False
        net = self.model()
        score = float(self.cfg.score_calculator.calculate_score(net))  # type: ignore[union-attr]
        self.scores[epoch] = score
        better = score < self.best_score if self.minimize else score > self.best_score
        if math.isfinite(score) and (self.best_epoch == -1 or better):  # NaN or inf never becomes best
            self.best_score, self.best_epoch = score, epoch
            self.cfg.model_saver.save_best_model(net, score)
        if self.cfg.save_last_model:
            self.cfg.model_saver.save_latest_model(net, score)
        self.listener.on_epoch(epoch, score, self.cfg, net)
        stop_now = [c for c in self.cfg.epoch_termination_conditions if c.terminate(epoch, score, self.minimize)]
        if stop_now:
            self.stopped_by = stop_now[0]
        return bool(stop_now)


class EarlyStoppingTrainer(_BaseTrainer):
    """One device: the network's own step; iteration conditions after every mini-batch."""

    def _loop(self, epoch_end: Callable[[int], bool]) -> TrainingLoop:
        return self.model.make_loop(
            listeners=self.listeners,
            iteration_conditions=self.config.iteration_termination_conditions,
            epoch_end=epoch_end,
        )


class EarlyStoppingParallelTrainer(_BaseTrainer):
    """Several devices through one ParallelWrapper (AVERAGING), kept for the whole run: the same
    loop with the wrapper's step; the iteration conditions see every worker's mini-batch score
    and stop mid-epoch; each epoch ends on the average, which is what gets scored and saved."""

    def __init__(
        self,
        config: EarlyStoppingConfig,
        model: Network,
        train_iterator: Iterable[DataSet],
        workers: int = 2,
        prefetch_buffer: int = 16,
        averaging_frequency: int = 1,
        report_score_after_averaging: bool = False,
        listener: EarlyStoppingListener | None = None,
        devices: list[Any] | None = None,
        listeners: Iterable[Any] = (),
    ) -> None:
        super().__init__(config, model, train_iterator, listener, listeners)
        self.wrapper = ParallelWrapper(
            model,
            workers=workers,
            devices=devices,
            prefetch_buffer=prefetch_buffer,
            averaging_frequency=averaging_frequency,
            report_score_after_averaging=report_score_after_averaging,
            listeners=self.listeners,
        )

    def _loop(self, epoch_end: Callable[[int], bool]) -> TrainingLoop:
        if self.wrapper.closed:
            raise RuntimeError(
                "EarlyStoppingParallelTrainer.fit() runs once: its ParallelWrapper was shut down when the first "
                "run ended (as in DL4J); make a new trainer to train again"
            )
        return self.wrapper.make_loop(
            listeners=self.listeners,
            iteration_conditions=self.config.iteration_termination_conditions,
            epoch_end=epoch_end,
        )

    def _session(self) -> contextlib.AbstractContextManager[Iterable[DataSet]]:
        return self.wrapper.session(self.train)

    def _model_for_scoring(self) -> Network:
        self.wrapper.sync()  # the average, in the user's model
        return self.model

    def _finish(self) -> None:
        if not self.wrapper.closed:
            self.wrapper.sync()
        self.wrapper.shutdown()
