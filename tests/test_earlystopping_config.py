"""kit.training.earlystopping_config: the termination conditions on scripted scores, the score
calculators against NumPy, the model savers, and the configuration's checks (whose remedies run).
The trainers that use them: tests/test_earlystopping.py."""

import math

import numpy as np
import pytest
from _datasets import random_dataset

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import mlp
from kit.training.earlystopping_config import (
    BestScoreEpochTerminationCondition,
    ClassificationScoreCalculator,
    DataSetLossCalculator,
    EarlyStoppingConfig,
    InMemoryModelSaver,
    InvalidScoreIterationTerminationCondition,
    LocalFileModelSaver,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    MaxTimeIterationTerminationCondition,
    ROCScoreCalculator,
    ScoreImprovementEpochTerminationCondition,
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


def first_stop(cond, scores, minimize=True):
    """The epoch at which an epoch condition fires on a scripted score sequence (or None)."""
    cond.initialize()
    for epoch, score in enumerate(scores):
        if cond.terminate(epoch, score, minimize):
            return epoch
    return None


def test_max_epochs():
    assert first_stop(MaxEpochsTerminationCondition(3), [5, 4, 3, 2, 1]) == 2
    with pytest.raises(ValueError, match=r"max_epochs=0\): must be a whole number >= 1"):
        MaxEpochsTerminationCondition(0)


def test_score_improvement_minimize_and_maximize():
    cond = ScoreImprovementEpochTerminationCondition(2)
    assert first_stop(cond, [5, 4, 4.5, 4.2, 3, 3.1]) == 3  # best 4 at epoch 1; 2 epochs without
    assert first_stop(cond, [5, 4, 3, 2, 1]) is None
    assert first_stop(cond, [0.5, 0.6, 0.55, 0.58, 0.9], minimize=False) == 3
    with_min = ScoreImprovementEpochTerminationCondition(1, min_improvement=0.1)
    assert first_stop(with_min, [1.0, 0.95, 0.5]) == 1  # 0.05 is not an improvement


def test_best_score_condition():
    assert first_stop(BestScoreEpochTerminationCondition(0.2), [1, 0.5, 0.1]) == 2
    assert first_stop(BestScoreEpochTerminationCondition(0.9), [0.5, 0.95], minimize=False) == 1


def test_iteration_conditions():
    assert InvalidScoreIterationTerminationCondition().terminate(math.nan)
    assert InvalidScoreIterationTerminationCondition().terminate(math.inf)
    assert not InvalidScoreIterationTerminationCondition().terminate(1e30)
    cond = MaxScoreIterationTerminationCondition(10)
    assert [cond.terminate(s) for s in (1, 10, 11, math.nan)] == [False, False, True, True]
    now = [100.0]
    timer = MaxTimeIterationTerminationCondition(5, clock=lambda: now[0])
    timer.initialize()
    now[0] = 104.9
    assert not timer.terminate(0.1)
    now[0] = 105.0
    assert timer.terminate(0.1)


def test_config_is_validated(digits):
    train, _ = digits
    calc = DataSetLossCalculator(ArrayIterator(train, 100))
    with pytest.raises(ValueError, match="no termination condition"):
        EarlyStoppingConfig(score_calculator=calc)
    with pytest.raises(ValueError, match="no score_calculator"):
        EarlyStoppingConfig(epoch_termination_conditions=[MaxEpochsTerminationCondition(2)])
    with pytest.raises(ValueError, match="use one of ACCURACY"):
        ClassificationScoreCalculator("AUC", ArrayIterator(train, 100))


def test_local_file_saver_round_trips_and_survives_an_interrupted_write(tmp_path, monkeypatch):
    saver = LocalFileModelSaver(tmp_path / "ckpt")
    first = mlp(8, hidden=(4,), n_out=2, seed=1)
    saver.save_best_model(first, 0.5)
    np.testing.assert_array_equal(saver.get_best_model().params().numpy(), first.params().numpy())

    def crash(f, **arrays):
        f.write(b"PK\x03\x04 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        saver.save_best_model(mlp(8, hidden=(4,), n_out=2, seed=2), 0.4)
    monkeypatch.undo()
    np.testing.assert_array_equal(saver.get_best_model().params().numpy(), first.params().numpy())
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["best_model.npz"]
    assert saver.get_latest_model() is None


def test_an_unbounded_early_stopping_configuration_is_an_error():
    with pytest.raises(ValueError, match=r"MaxScoreIterationTerminationCondition.*may never stop training"):
        EarlyStoppingConfig(
            iteration_termination_conditions=[MaxScoreIterationTerminationCondition(1e9)],
            score_calculator=Scripted([], minimize=False),
        )
    with pytest.raises(ValueError, match="may never stop"):
        EarlyStoppingConfig(
            epoch_termination_conditions=[BestScoreEpochTerminationCondition(0.99)],
            score_calculator=Scripted([], minimize=False),
        )


def _cross_entropy(net, ds):
    """The mean softmax cross-entropy of `net` on `ds`, in NumPy from its outputs."""
    p = net.output(ds.features).numpy().astype(np.float64)
    return float(-np.mean(np.sum(ds.labels.numpy() * np.log(p), axis=1)))


def test_the_loss_calculator_weighs_each_batch_by_its_examples():
    net = mlp(6, hidden=(4,), n_out=3, seed=2)
    parts = [random_dataset(n, seed=s) for n, s in ((5, 1), (20, 2), (1, 3))]  # uneven batches
    losses = [_cross_entropy(net, ds) for ds in parts]
    total = sum(loss * ds.num_examples for loss, ds in zip(losses, parts, strict=True))
    assert DataSetLossCalculator(parts).calculate_score(net) == pytest.approx(total / 26, rel=1e-5)
    assert DataSetLossCalculator(parts, average=False).calculate_score(net) == pytest.approx(total, rel=1e-5)
    assert DataSetLossCalculator(parts[1]).calculate_score(net) == pytest.approx(losses[1], rel=1e-5)
    assert DataSetLossCalculator.minimize_score and not ClassificationScoreCalculator.minimize_score
    with pytest.raises(ValueError, match="DataSetLossCalculator: the data set is empty"):
        DataSetLossCalculator([]).calculate_score(net)


@pytest.mark.parametrize("metric", ["accuracy", "ACCURACY"])
def test_the_accuracy_calculator_is_the_share_of_argmax_hits_whatever_the_case(metric):
    net = mlp(6, hidden=(4,), n_out=3, seed=5)
    ds = random_dataset(40, seed=4)
    hits = net.output(ds.features).numpy().argmax(axis=1) == ds.labels.numpy().argmax(axis=1)
    assert ClassificationScoreCalculator(metric, ds).calculate_score(net) == pytest.approx(hits.mean())


def test_a_calculator_with_an_unknown_kind_names_it_and_the_choices():
    with pytest.raises(ValueError, match=r"metric='AUC'\): use one of ACCURACY, F1, PRECISION, RECALL"):
        ClassificationScoreCalculator("auc", random_dataset())
    with pytest.raises(ValueError, match=r"ROCScoreCalculator\(roc_type='PR'\): ROC, BINARY or MULTICLASS"):
        ROCScoreCalculator(random_dataset(), roc_type="PR")


def test_a_score_improvement_condition_waits_for_a_finite_best_and_resets_on_initialize():
    cond = ScoreImprovementEpochTerminationCondition(1)
    assert first_stop(cond, [math.nan, math.nan, math.nan]) is None  # no best yet: nothing to improve on
    assert first_stop(cond, [1.0, math.nan]) == 1  # a NaN is no improvement
    assert first_stop(cond, [3.0, 2.0, 1.0]) is None  # initialize() forgot the best of 1.0 above
    assert first_stop(ScoreImprovementEpochTerminationCondition(0), [1.0, 0.5, 0.5]) == 2


def test_the_in_memory_saver_keeps_a_copy_that_later_training_does_not_touch():
    net = mlp(6, hidden=(4,), n_out=3, seed=1)
    saver = InMemoryModelSaver()
    assert saver.get_best_model() is None and saver.get_latest_model() is None
    saver.save_best_model(net, 0.5)
    saved = net.params().numpy().copy()
    net.fit(ArrayIterator(random_dataset(), 16), epochs=1)
    assert not np.array_equal(net.params().numpy(), saved)
    np.testing.assert_array_equal(saver.get_best_model().params().numpy(), saved)
    saver.save_latest_model(net, 0.4)
    np.testing.assert_array_equal(saver.get_latest_model().params().numpy(), net.params().numpy())


@pytest.mark.parametrize(
    "remedy",
    [
        MaxEpochsTerminationCondition(2),
        ScoreImprovementEpochTerminationCondition(3),
        MaxTimeIterationTerminationCondition(60),
    ],
    ids=["MaxEpochs", "ScoreImprovement", "MaxTime"],
)
def test_each_condition_the_unbounded_error_names_makes_the_configuration_valid(remedy):
    unbounded = [MaxScoreIterationTerminationCondition(1e9)]
    with pytest.raises(ValueError) as error:
        EarlyStoppingConfig(iteration_termination_conditions=unbounded, score_calculator=Scripted([], True))
    assert type(remedy).__name__ in str(error.value)
    epoch_conds = [remedy] if not isinstance(remedy, MaxTimeIterationTerminationCondition) else []
    iteration = [*unbounded, remedy] if not epoch_conds else unbounded
    cfg = EarlyStoppingConfig(epoch_conds, iteration, score_calculator=Scripted([], True))
    assert isinstance(cfg.model_saver, InMemoryModelSaver) and cfg.evaluate_every_n_epochs == 1


def test_the_missing_calculator_error_names_calculators_that_make_the_configuration_valid():
    data = random_dataset()
    with pytest.raises(ValueError, match=r"DataSetLossCalculator\(valid_iterator\) or ClassificationScoreCalculator"):
        EarlyStoppingConfig([MaxEpochsTerminationCondition(1)])
    for calc in (DataSetLossCalculator(data), ClassificationScoreCalculator("ACCURACY", data)):
        assert EarlyStoppingConfig([MaxEpochsTerminationCondition(1)], score_calculator=calc).score_calculator is calc


@pytest.mark.parametrize("every", [0, -1, 1.5])
def test_evaluating_every_n_epochs_needs_a_whole_number_from_1(every):
    with pytest.raises(
        ValueError, match=rf"EarlyStoppingConfig\(evaluate_every_n_epochs={every!r}\): must be a whole number >= 1"
    ):
        EarlyStoppingConfig(
            [MaxEpochsTerminationCondition(1)], score_calculator=Scripted([], True), evaluate_every_n_epochs=every
        )
