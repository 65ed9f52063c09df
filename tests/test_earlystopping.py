"""Early stopping: condition semantics on scripted scores, real runs on one and two workers."""

import math

import numpy as np
import pytest
from _datasets import random_dataset

from kit.data import ArrayIterator, DataSet, load_digits
from kit.measurement.tables import WIDTH
from kit.nn import Adam, Network, Sgd, mlp
from kit.training.earlystopping import (
    BestScoreEpochTerminationCondition,
    ClassificationScoreCalculator,
    DataSetLossCalculator,
    EarlyStoppingConfig,
    EarlyStoppingListener,
    EarlyStoppingParallelTrainer,
    EarlyStoppingResult,
    EarlyStoppingTrainer,
    InMemoryModelSaver,
    InvalidScoreIterationTerminationCondition,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    MaxTimeIterationTerminationCondition,
    ROCScoreCalculator,
    ScoreImprovementEpochTerminationCondition,
    TerminationReason,
)


@pytest.fixture(scope="module")
def digits():
    train, test = load_digits()
    small = DataSet(train.features.numpy()[:400], train.labels.numpy()[:400])
    return small, test


class Scripted:
    """A score calculator that replays given scores (training still really happens)."""

    def __init__(self, scores, minimize):
        self.scores, self.minimize_score, self.calls = list(scores), minimize, 0

    def calculate_score(self, net):
        self.calls += 1
        return self.scores[self.calls - 1]


class Snapshots(EarlyStoppingListener):
    def __init__(self):
        self.params, self.started, self.completed = {}, 0, None

    def on_start(self, config, net):
        self.started += 1

    def on_epoch(self, epoch, score, config, net):
        self.params[epoch] = net.params().numpy().copy()

    def on_completion(self, result):
        self.completed = result


@pytest.mark.usefixtures("host_devices")
@pytest.mark.parametrize("parallel", [False, True])
def test_a_maximizing_calculator_keeps_the_best_model_not_the_worst(digits, parallel):
    train, _ = digits
    config = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(4)],
        score_calculator=Scripted([0.5, 0.9, 0.7, 0.6], minimize=False),
    )
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1))
    snaps = Snapshots()
    it = ArrayIterator(train, 50)
    trainer = (
        EarlyStoppingParallelTrainer(config, net, it, workers=2, prefetch_buffer=0, listener=snaps)
        if parallel
        else EarlyStoppingTrainer(config, net, it, listener=snaps)
    )
    result = trainer.fit()
    assert result.termination_reason is TerminationReason.EPOCH_TERMINATION_CONDITION
    assert result.score_vs_epoch == {0: 0.5, 1: 0.9, 2: 0.7, 3: 0.6}  # keys are the right epochs
    assert result.best_model_epoch == 1 and result.best_model_score == 0.9 and result.total_epochs == 4
    np.testing.assert_array_equal(result.best_model.params().numpy(), snaps.params[1])
    assert snaps.started == 1 and snaps.completed is result


def test_a_nan_mid_epoch_stops_with_the_invalid_score_reason(digits):
    train, test = digits

    class Poison:
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == 12:  # epoch 1 (8 batches per epoch), mid-way
                model.flat_params.numpy()[0] = np.nan

    config = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10)],
        iteration_termination_conditions=[InvalidScoreIterationTerminationCondition()],
        score_calculator=DataSetLossCalculator(ArrayIterator(test, 200)),
    )
    net = mlp(64, hidden=(16,), n_out=10)
    result = EarlyStoppingTrainer(config, net, ArrayIterator(train, 50), listeners=[Poison()]).fit()
    assert result.termination_reason is TerminationReason.ITERATION_TERMINATION_CONDITION
    assert result.termination_details == "InvalidScoreIterationTerminationCondition()"
    assert result.total_epochs == 1 and list(result.score_vs_epoch) == [0]
    assert np.isfinite(result.best_model.params().numpy()).all()  # the saved best is from before


def divergence_config(test):
    return EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        iteration_termination_conditions=[MaxScoreIterationTerminationCondition(50.0)],
        score_calculator=DataSetLossCalculator(ArrayIterator(test, 200)),
    )


def test_divergence_is_stopped_by_max_score(digits):
    train, test = digits
    config = divergence_config(test)
    net = mlp(64, hidden=(64,), n_out=10, updater=Sgd(50.0))  # far too large a step: diverges
    result = EarlyStoppingTrainer(config, net, ArrayIterator(train, 50)).fit()
    assert result.termination_reason is TerminationReason.ITERATION_TERMINATION_CONDITION
    assert "MaxScoreIterationTerminationCondition" in result.termination_details


def test_errors_end_training_with_the_error_reason(digits):
    _train, test = digits
    bad = DataSet(np.zeros((10, 65)), np.zeros(10, dtype=int), num_classes=10)
    config = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator(ArrayIterator(test, 200)),
    )
    result = EarlyStoppingTrainer(config, mlp(64, hidden=(8,), n_out=10), ArrayIterator(bad, 5)).fit()
    assert result.termination_reason is TerminationReason.ERROR
    assert "do not fit the first layer" in result.termination_details and result.total_epochs == 0


def test_real_accuracy_and_auc_calculators(digits):
    train, test = digits
    for calc in (
        ClassificationScoreCalculator("ACCURACY", ArrayIterator(test, 200)),
        ROCScoreCalculator(ArrayIterator(test, 200)),
    ):
        config = EarlyStoppingConfig(
            epoch_termination_conditions=[
                MaxEpochsTerminationCondition(6),
                ScoreImprovementEpochTerminationCondition(2),
            ],
            score_calculator=calc,
        )
        net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2))
        result = EarlyStoppingTrainer(config, net, ArrayIterator(train, 50, shuffle=True)).fit()
        assert result.best_model_score == max(result.score_vs_epoch.values())
        assert calc.calculate_score(result.best_model) == pytest.approx(result.best_model_score)


@pytest.mark.usefixtures("host_devices")
def test_single_and_parallel_trainers_reach_the_same_termination(digits):
    train, test = digits

    def config():
        return EarlyStoppingConfig(
            epoch_termination_conditions=[
                MaxEpochsTerminationCondition(8),
                ScoreImprovementEpochTerminationCondition(1),
            ],
            score_calculator=DataSetLossCalculator(ArrayIterator(test, 200)),
            model_saver=InMemoryModelSaver(),
        )

    base = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.5), seed=3)
    single = EarlyStoppingTrainer(config(), base.clone(), ArrayIterator(train, 100)).fit()
    parallel = EarlyStoppingParallelTrainer(
        config(), base.clone(), ArrayIterator(train, 50), workers=2, prefetch_buffer=0
    ).fit()
    assert single.termination_reason == parallel.termination_reason
    assert single.termination_details == parallel.termination_details
    assert single.best_model_epoch == parallel.best_model_epoch and single.total_epochs == parallel.total_epochs
    assert list(single.score_vs_epoch) == list(parallel.score_vs_epoch)
    np.testing.assert_allclose(list(single.score_vs_epoch.values()), list(parallel.score_vs_epoch.values()), rtol=1e-4)
    assert isinstance(single.best_model, Network)


@pytest.mark.usefixtures("host_devices")
def test_parallel_trainer_stops_mid_epoch_on_an_iteration_condition(digits):
    train, test = digits
    config = divergence_config(test)
    net = mlp(64, hidden=(64,), n_out=10, updater=Sgd(50.0))  # diverges within the first epoch
    trainer = EarlyStoppingParallelTrainer(config, net, ArrayIterator(train, 25), workers=2, prefetch_buffer=0)
    result = trainer.fit()
    assert result.termination_reason is TerminationReason.ITERATION_TERMINATION_CONDITION
    assert result.total_epochs == 0 and trainer.wrapper.iteration < 8  # stopped before the epoch's 8 rounds
    assert trainer.wrapper.threads_alive() == 0


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


def test_a_nan_score_never_becomes_best_and_does_not_stop_improvement():
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(4), ScoreImprovementEpochTerminationCondition(1)],
        score_calculator=Scripted([math.nan, 0.5, 0.9, 0.7], minimize=False),
    )
    result = EarlyStoppingTrainer(cfg, mlp(6, hidden=(4,), n_out=3), ArrayIterator(random_dataset(), 16)).fit()
    assert result.best_model_epoch == 2 and result.best_model_score == 0.9
    assert result.total_epochs == 4  # improvement at epoch 2; no stop before MaxEpochs


def test_best_model_falls_back_to_the_trained_model_when_nothing_was_scored():
    net = mlp(6, hidden=(4,), n_out=3)
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        iteration_termination_conditions=[MaxScoreIterationTerminationCondition(-1.0)],  # stops at once
        score_calculator=ClassificationScoreCalculator("ACCURACY", random_dataset(16, seed=3)),
    )
    result = EarlyStoppingTrainer(cfg, net, ArrayIterator(random_dataset(), 16)).fit()
    assert result.best_model_epoch == -1 and result.best_model is net


def test_a_second_parallel_early_stopping_fit_says_why_it_cannot_run():
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(1)],
        score_calculator=ClassificationScoreCalculator("ACCURACY", random_dataset(16, seed=3)),
    )
    trainer = EarlyStoppingParallelTrainer(
        cfg, mlp(6, hidden=(4,), n_out=3), ArrayIterator(random_dataset(), 16), workers=2
    )
    assert trainer.fit().total_epochs == 1
    with pytest.raises(RuntimeError, match=r"runs once: its ParallelWrapper was shut down .* make a new trainer"):
        trainer.fit()


def test_early_stopping_counts_its_own_epochs_on_a_trained_model():
    net = mlp(6, hidden=(4,), n_out=3)
    net.fit(ArrayIterator(random_dataset(), 16), epochs=5)
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=ClassificationScoreCalculator("ACCURACY", random_dataset(16, seed=3)),
    )
    result = EarlyStoppingTrainer(cfg, net, ArrayIterator(random_dataset(), 16)).fit()
    assert result.total_epochs == 3 and sorted(result.score_vs_epoch) == [0, 1, 2]  # DL4J's epochCount
    assert net.epoch == 8


# what chapter 6 prints of a run fits a notebook column: the result (DL4J's fields, one group a line,
# wrapped at words) and each termination condition on its own


CONDITIONS = [
    MaxEpochsTerminationCondition(1_000_000),
    ScoreImprovementEpochTerminationCondition(1_000_000, min_improvement=0.000123456789),
    BestScoreEpochTerminationCondition(0.123456789012345),
    MaxTimeIterationTerminationCondition(123456.789),
    MaxScoreIterationTerminationCondition(1e300),
    InvalidScoreIterationTerminationCondition(),
]


@pytest.mark.parametrize("condition", CONDITIONS, ids=lambda c: type(c).__name__)
def test_a_condition_fits_a_notebook_column(condition):
    lines = str(condition).splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    assert lines[0].startswith(type(condition).__name__ + "(") and lines[-1].endswith(")")


@pytest.mark.parametrize(
    "reason, details",
    [
        (TerminationReason.EPOCH_TERMINATION_CONDITION, str(CONDITIONS[1])),
        (TerminationReason.ITERATION_TERMINATION_CONDITION, str(CONDITIONS[4])),
        (TerminationReason.ERROR, "ValueError: " + ("a long message from the training loop " * 8).strip()),
    ],
)
def test_the_result_fits_a_notebook_column_and_keeps_every_field(reason, details):
    result = EarlyStoppingResult(reason, details, {0: 0.5}, 9, 0.21247303220960828, 18)
    text = str(result)
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    assert lines[0] == f"EarlyStoppingResult(terminationReason={reason.value},"
    flat = " ".join(line.strip() for line in lines)
    assert f"details={' '.join(line.strip() for line in details.splitlines())}," in flat
    assert flat.endswith("bestModelEpoch=9, bestModelScore=0.21247303220960828, totalEpochs=18)")
