"""What chapter 6 prints of an early-stopping run fits a notebook column: the result (DL4J's fields,
one group a line, wrapped at words) and each termination condition on its own."""

import pytest

from kit.measurement.tables import WIDTH
from kit.training.earlystopping import (
    BestScoreEpochTerminationCondition,
    EarlyStoppingResult,
    InvalidScoreIterationTerminationCondition,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    MaxTimeIterationTerminationCondition,
    ScoreImprovementEpochTerminationCondition,
    TerminationReason,
)

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
