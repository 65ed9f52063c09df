"""What an early-stopping run is configured with (DL4J's termination, scorecalc and saver
packages): when to stop (epoch and iteration termination conditions), how an epoch is scored
(score calculators, each knowing whether its score is minimized), where the best and latest
models go (savers), and `EarlyStoppingConfig`, which gathers them and refuses a configuration
that could never stop. The trainers that run it are in kit.earlystopping, which re-exports all
of these: `from kit.training.earlystopping import EarlyStoppingConfig` is the import to write.

    >>> from kit.training.earlystopping_config import ScoreImprovementEpochTerminationCondition
    >>> stop = ScoreImprovementEpochTerminationCondition(2)    # two epochs without a better score
    >>> stop.initialize()
    >>> [stop.terminate(epoch, score, minimize=True) for epoch, score in enumerate([1.0, 0.9, 0.95, 0.92])]
    [False, False, False, True]
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.core.arguments import real, whole
from kit.data.dataset import DataSet
from kit.measurement import tables
from kit.nn.evaluation import ROC, Evaluation
from kit.nn.network import Network

__all__ = [
    "BestScoreEpochTerminationCondition",
    "ClassificationScoreCalculator",
    "DataSetLossCalculator",
    "EarlyStoppingConfig",
    "EpochTerminationCondition",
    "InMemoryModelSaver",
    "InvalidScoreIterationTerminationCondition",
    "IterationTerminationCondition",
    "LocalFileModelSaver",
    "MaxEpochsTerminationCondition",
    "MaxScoreIterationTerminationCondition",
    "MaxTimeIterationTerminationCondition",
    "ROCScoreCalculator",
    "ScoreCalculator",
    "ScoreImprovementEpochTerminationCondition",
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
        self.max_epochs = whole("MaxEpochsTerminationCondition", "max_epochs", max_epochs, 1)

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        return epoch + 1 >= self.max_epochs

    def __str__(self) -> str:
        return f"MaxEpochsTerminationCondition({self.max_epochs})"


class ScoreImprovementEpochTerminationCondition(EpochTerminationCondition):
    """Stop after `max_epochs_with_no_improvement` epochs without an improvement larger than
    `min_improvement` over this condition's own best score."""

    def __init__(self, max_epochs_with_no_improvement: int, min_improvement: float = 0.0) -> None:
        where = "ScoreImprovementEpochTerminationCondition"
        self.max_epochs_with_no_improvement = whole(
            where, "max_epochs_with_no_improvement", max_epochs_with_no_improvement, 0
        )
        self.min_improvement = real(where, "min_improvement", min_improvement, low=0)
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

    def __str__(self) -> str:  # DL4J's words, wrapped at kit.tables.WIDTH columns should its values be long
        return tables.wrap(
            f"ScoreImprovementEpochTerminationCondition(maxEpochsWithNoImprovement="
            f"{self.max_epochs_with_no_improvement}, minImprovement={self.min_improvement})"
        )


class BestScoreEpochTerminationCondition(EpochTerminationCondition):
    """Stop once the score is better than `best_expected_score`."""

    def __init__(self, best_expected_score: float) -> None:
        self.best_expected_score = real(
            "BestScoreEpochTerminationCondition", "best_expected_score", best_expected_score
        )

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        return score < self.best_expected_score if minimize else score > self.best_expected_score

    def __str__(self) -> str:
        return f"BestScoreEpochTerminationCondition({self.best_expected_score})"


class MaxTimeIterationTerminationCondition(IterationTerminationCondition):
    """Stop once `seconds` have passed since training started (`clock` is injectable)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = real("MaxTimeIterationTerminationCondition", "seconds", seconds, low=0, low_open=True)
        self.clock = clock
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
        self.max_score = real("MaxScoreIterationTerminationCondition", "max_score", max_score)

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

    def _check_kinds(self) -> None:
        """Each condition in its own list, and a score calculator that is one: said at the call."""
        for name, other in (
            ("epoch_termination_conditions", IterationTerminationCondition),
            ("iteration_termination_conditions", EpochTerminationCondition),
        ):
            wrong = [c for c in getattr(self, name) if isinstance(c, other)]
            if wrong:
                raise TypeError(
                    f"EarlyStoppingConfig({name}=[... {wrong[0]!r} ...]): that is an {other.__name__}; an epoch "
                    "condition (MaxEpochs..., ScoreImprovement..., BestScore...) goes in epoch_termination_conditions, "
                    "an iteration one (MaxTime..., MaxScore..., InvalidScore...) in iteration_termination_conditions"
                )
        if self.score_calculator is not None and not hasattr(self.score_calculator, "minimize_score"):
            raise TypeError(
                f"EarlyStoppingConfig(score_calculator={self.score_calculator!r}): a ScoreCalculator, e.g. "
                "DataSetLossCalculator(valid_iterator)"
            )

    def __post_init__(self) -> None:
        self.epoch_termination_conditions = list(self.epoch_termination_conditions)
        self.iteration_termination_conditions = list(self.iteration_termination_conditions)
        bounded = (
            MaxEpochsTerminationCondition,
            ScoreImprovementEpochTerminationCondition,
            MaxTimeIterationTerminationCondition,
        )
        self._check_kinds()
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
        every = whole("EarlyStoppingConfig", "evaluate_every_n_epochs", self.evaluate_every_n_epochs)
        self.evaluate_every_n_epochs = every
        if self.model_saver is None:
            self.model_saver = InMemoryModelSaver()
