"""Early stopping (DL4J's earlystopping package): conditions, score calculators, savers, trainers.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.earlystopping import (ClassificationScoreCalculator, EarlyStoppingConfig, EarlyStoppingTrainer,
    ...     InvalidScoreIterationTerminationCondition, LocalFileModelSaver, MaxEpochsTerminationCondition,
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
    >>> print(result)                        # DL4J's line: why it stopped, the best epoch and its score
    EarlyStoppingResult(terminationReason=EpochTerminationCondition,details=...,bestModelEpoch=...,totalEpochs=...)
    >>> result.termination_reason, result.best_model_epoch < result.total_epochs <= 30
    (<TerminationReason.EPOCH_TERMINATION_CONDITION: 'EpochTerminationCondition'>, True)
    >>> result.best_model.evaluate(ArrayIterator(test, 256)).accuracy()   # read from checkpoints/best_model.npz
    0.9...

Semantics are DL4J's, with its parallel trainer's bugs fixed: both trainers honour a score
calculator that maximizes (dl4j#5760: the parallel one always minimized and kept the worst model
under accuracy), record each score against the epoch it belongs to (DL4J's parallel trainer is
off by one), and validate the configuration.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kit.data.dataset import DataSet
from kit.evaluation import ROC, Evaluation
from kit.nn.loop import TrainingLoop
from kit.nn.network import Network
from kit.parallel.wrapper import ParallelWrapper

__all__ = [
    "BestScoreEpochTerminationCondition",
    "ClassificationScoreCalculator",
    "DataSetLossCalculator",
    "EarlyStoppingConfig",
    "EarlyStoppingListener",
    "EarlyStoppingParallelTrainer",
    "EarlyStoppingResult",
    "EarlyStoppingTrainer",
    "InMemoryModelSaver",
    "InvalidScoreIterationTerminationCondition",
    "LocalFileModelSaver",
    "MaxEpochsTerminationCondition",
    "MaxScoreIterationTerminationCondition",
    "MaxTimeIterationTerminationCondition",
    "ROCScoreCalculator",
    "ScoreImprovementEpochTerminationCondition",
    "TerminationReason",
]


# ---------------------------------------------------------------------------------------
# termination conditions


class EpochTerminationCondition:
    def initialize(self) -> None:
        pass

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        raise NotImplementedError


class IterationTerminationCondition:
    def initialize(self) -> None:
        pass

    def terminate(self, last_score: float) -> bool:
        raise NotImplementedError


class MaxEpochsTerminationCondition(EpochTerminationCondition):
    """Stop once `max_epochs` epochs have run (epoch + 1 >= max_epochs)."""

    def __init__(self, max_epochs: int) -> None:
        if not isinstance(max_epochs, int) or max_epochs <= 0:
            raise ValueError(f"MaxEpochsTerminationCondition({max_epochs!r}): needs a positive number of epochs")
        self.max_epochs = max_epochs

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        return epoch + 1 >= self.max_epochs

    def __str__(self) -> str:
        return f"MaxEpochsTerminationCondition({self.max_epochs})"


class ScoreImprovementEpochTerminationCondition(EpochTerminationCondition):
    """Stop after `max_epochs_with_no_improvement` epochs without an improvement larger than
    `min_improvement` over this condition's own best score."""

    def __init__(self, max_epochs_with_no_improvement: int, min_improvement: float = 0.0) -> None:
        if not isinstance(max_epochs_with_no_improvement, int) or max_epochs_with_no_improvement < 0:
            raise ValueError(
                f"ScoreImprovementEpochTerminationCondition({max_epochs_with_no_improvement!r}): "
                "needs a whole number >= 0"
            )
        if min_improvement < 0:
            raise ValueError(
                f"ScoreImprovementEpochTerminationCondition: min_improvement={min_improvement} must be >= 0"
            )
        self.max_epochs_with_no_improvement = max_epochs_with_no_improvement
        self.min_improvement = float(min_improvement)
        self.initialize()

    def initialize(self) -> None:
        self.best_score: float | None = None
        self.best_epoch = -1

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        if not math.isfinite(score):  # a NaN score is never a best to improve on
            return self.best_score is not None and epoch >= self.best_epoch + self.max_epochs_with_no_improvement
        if self.best_score is None:
            self.best_score, self.best_epoch = score, epoch
            return False
        improvement = self.best_score - score if minimize else score - self.best_score
        if improvement > self.min_improvement:
            self.best_score, self.best_epoch = score, epoch
            return False
        return epoch >= self.best_epoch + self.max_epochs_with_no_improvement

    def __str__(self) -> str:
        return (
            f"ScoreImprovementEpochTerminationCondition(maxEpochsWithNoImprovement="
            f"{self.max_epochs_with_no_improvement}, minImprovement={self.min_improvement})"
        )


class BestScoreEpochTerminationCondition(EpochTerminationCondition):
    """Stop once the score is better than `best_expected_score`."""

    def __init__(self, best_expected_score: float) -> None:
        self.best_expected_score = float(best_expected_score)

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        return score < self.best_expected_score if minimize else score > self.best_expected_score

    def __str__(self) -> str:
        return f"BestScoreEpochTerminationCondition({self.best_expected_score})"


class MaxTimeIterationTerminationCondition(IterationTerminationCondition):
    """Stop once `seconds` have passed since training started (`clock` is injectable)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"MaxTimeIterationTerminationCondition({seconds!r}): needs a time > 0 seconds")
        self.seconds, self.clock = float(seconds), clock
        self.start: float | None = None

    def initialize(self) -> None:
        self.start = self.clock()

    def terminate(self, last_score: float) -> bool:
        if self.start is None:
            self.initialize()
        return self.clock() >= self.start + self.seconds  # type: ignore[operator]

    def __str__(self) -> str:
        return f"MaxTimeIterationTerminationCondition({self.seconds} s)"


class MaxScoreIterationTerminationCondition(IterationTerminationCondition):
    """Stop when a minibatch score exceeds `max_score` (or is NaN): divergence."""

    def __init__(self, max_score: float) -> None:
        self.max_score = float(max_score)

    def terminate(self, last_score: float) -> bool:
        return math.isnan(last_score) or last_score > self.max_score

    def __str__(self) -> str:
        return f"MaxScoreIterationTerminationCondition({self.max_score})"


class InvalidScoreIterationTerminationCondition(IterationTerminationCondition):
    """Stop when a minibatch score is NaN or infinite."""

    def terminate(self, last_score: float) -> bool:
        return not math.isfinite(last_score)

    def __str__(self) -> str:
        return "InvalidScoreIterationTerminationCondition()"


# ---------------------------------------------------------------------------------------
# score calculators: each knows its direction


class ScoreCalculator:
    minimize_score = True

    def calculate_score(self, net: Network) -> float:
        raise NotImplementedError


class DataSetLossCalculator(ScoreCalculator):
    """The loss over a data set (an average per example when `average`): minimize."""

    def __init__(self, data: Iterable[DataSet] | DataSet, average: bool = True) -> None:
        self.data, self.average = data, average

    def calculate_score(self, net: Network) -> float:
        batches = [self.data] if isinstance(self.data, DataSet) else self.data
        total, count = 0.0, 0
        for ds in batches:
            total += net.score(ds) * ds.num_examples
            count += ds.num_examples
        if count == 0:
            raise ValueError("DataSetLossCalculator: the data set is empty")
        return total / count if self.average else total


_METRICS = ("ACCURACY", "F1", "PRECISION", "RECALL")


class ClassificationScoreCalculator(ScoreCalculator):
    """Accuracy, F1, precision or recall on a data set: maximize."""

    minimize_score = False

    def __init__(self, metric: str, data: Iterable[DataSet] | DataSet) -> None:
        metric = str(getattr(metric, "value", metric)).upper()
        if metric not in _METRICS:
            raise ValueError(f"ClassificationScoreCalculator(metric={metric!r}): use one of {', '.join(_METRICS)}")
        self.metric, self.data = metric, data

    def calculate_score(self, net: Network) -> float:
        (ev,) = net.do_evaluation(self.data, Evaluation(net.output_shape[0]))
        return {"ACCURACY": ev.accuracy, "F1": ev.f1, "PRECISION": ev.precision, "RECALL": ev.recall}[self.metric]()


class ROCScoreCalculator(ScoreCalculator):
    """Exact AUC (binary: class 1; multi-class: the mean one-vs-all AUC): maximize."""

    minimize_score = False

    def __init__(self, data: Iterable[DataSet] | DataSet, roc_type: str = "ROC") -> None:
        if roc_type not in ("ROC", "BINARY", "MULTICLASS"):
            raise ValueError(f"ROCScoreCalculator(roc_type={roc_type!r}): ROC, BINARY or MULTICLASS")
        self.data, self.roc_type = data, roc_type

    def calculate_score(self, net: Network) -> float:
        (roc,) = net.do_evaluation(self.data, ROC())
        return roc.calculate_auc() if roc.num_classes == 2 else roc.calculate_average_auc()


# ---------------------------------------------------------------------------------------
# savers


class InMemoryModelSaver:
    def __init__(self) -> None:
        self.best: Network | None = None
        self.latest: Network | None = None

    def save_best_model(self, net: Network, score: float) -> None:
        self.best = net.clone()

    def save_latest_model(self, net: Network, score: float) -> None:
        self.latest = net.clone()

    def get_best_model(self) -> Network | None:
        return self.best

    def get_latest_model(self) -> Network | None:
        return self.latest


class LocalFileModelSaver:
    """best_model.npz and latest_model.npz in `directory`, written atomically (Network.save), so
    an interrupted write leaves the previous file whole."""

    BEST, LATEST = "best_model.npz", "latest_model.npz"

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)

    def save_best_model(self, net: Network, score: float) -> None:
        net.save(os.path.join(self.directory, self.BEST))

    def save_latest_model(self, net: Network, score: float) -> None:
        net.save(os.path.join(self.directory, self.LATEST))

    def _load(self, name: str) -> Network | None:
        path = os.path.join(self.directory, name)
        return Network.load(path) if os.path.exists(path) else None

    def get_best_model(self) -> Network | None:
        return self._load(self.BEST)

    def get_latest_model(self) -> Network | None:
        return self._load(self.LATEST)


# ---------------------------------------------------------------------------------------
# configuration and result


@dataclass
class EarlyStoppingConfig:
    epoch_termination_conditions: list[EpochTerminationCondition] = field(default_factory=list)
    iteration_termination_conditions: list[IterationTerminationCondition] = field(default_factory=list)
    score_calculator: ScoreCalculator | None = None
    evaluate_every_n_epochs: int = 1
    model_saver: Any = None
    save_last_model: bool = False

    def __post_init__(self) -> None:
        self.epoch_termination_conditions = list(self.epoch_termination_conditions)
        self.iteration_termination_conditions = list(self.iteration_termination_conditions)
        bounded = (
            MaxEpochsTerminationCondition,
            ScoreImprovementEpochTerminationCondition,
            MaxTimeIterationTerminationCondition,
        )
        given = [*self.epoch_termination_conditions, *self.iteration_termination_conditions]
        if not given:
            raise ValueError(
                "EarlyStoppingConfig: no termination condition; training would never stop. Add e.g. "
                "MaxEpochsTerminationCondition(n) or ScoreImprovementEpochTerminationCondition(k)"
            )
        if not any(isinstance(c, bounded) for c in given):
            names = ", ".join(str(c) for c in given) or "none"
            raise ValueError(
                f"EarlyStoppingConfig: the termination conditions ({names}) may never stop training. Add one that "
                "always ends it: MaxEpochsTerminationCondition(n), ScoreImprovementEpochTerminationCondition(k) "
                "or MaxTimeIterationTerminationCondition(seconds)"
            )
        if self.score_calculator is None:
            raise ValueError(
                "EarlyStoppingConfig: no score_calculator; give DataSetLossCalculator(valid_iterator) "
                "or ClassificationScoreCalculator('ACCURACY', valid_iterator)"
            )
        if not isinstance(self.evaluate_every_n_epochs, int) or self.evaluate_every_n_epochs < 1:
            raise ValueError(f"EarlyStoppingConfig(evaluate_every_n_epochs={self.evaluate_every_n_epochs!r}): >= 1")
        if self.model_saver is None:
            self.model_saver = InMemoryModelSaver()


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
        return (
            f"EarlyStoppingResult(terminationReason={self.termination_reason.value},details={self.termination_details},"
            f"bestModelEpoch={self.best_model_epoch},bestModelScore={self.best_model_score},"
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
