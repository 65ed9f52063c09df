"""Every numeric argument of kit's public calls, one table (issue 43's sweep): NaN, infinity, a huge
value, zero, a negative, a float where a count is meant, a string and a bool are each refused at
the call, in words that name the call, the argument and the value, or given their documented
meaning (listed in ACCEPTED). kit.checks.whole and kit.checks.real are the two rules behind it."""

from __future__ import annotations

import numpy as np
import pytest

import kit
from kit import measure
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.nn import Adam, BatchNorm, Conv2D, Dense, Dropout, MaxPool2D, Nesterovs, Residual, Sgd, mlp
from kit.parallel import ParallelInference, ParallelWrapper
from kit.training.earlystopping_config import (
    BestScoreEpochTerminationCondition,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    MaxTimeIterationTerminationCondition,
    ScoreImprovementEpochTerminationCondition,
)
from kit.workspaces.workspace import WorkspaceConfig

BAD = {
    "nan": float("nan"),
    "inf": float("inf"),
    "huge": 1e300,
    "zero": 0,
    "negative": -1,
    "float-for-a-count": 2.5,
    "string": "3",
    "bool": True,
}
DS = DataSet(np.random.default_rng(0).random((8, 4)), np.arange(8) % 2, num_classes=2)


def _net():
    return mlp(4, hidden=(3,), n_out=2)


def _closed(make):
    def call(value):
        made = make(value)
        made.shutdown()

    return call


# (call, argument, kind): "count>=1", "count>=0", ">0", ">=0", "[0,1)", "(0,1]", "finite"
CALLS = {
    "kit.zeros": (lambda v: kit.zeros((v, 2)), "shape", "count>=0"),
    "Dense": (lambda v: Dense(v), "n_out", "count>=1"),
    "Conv2D out_channels": (lambda v: Conv2D(v, 3), "out_channels", "count>=1"),
    "Conv2D kernel": (lambda v: Conv2D(2, v), "kernel", "count>=1"),
    "Conv2D stride": (lambda v: Conv2D(2, 3, stride=v), "stride", "count>=1"),
    "Conv2D padding": (lambda v: Conv2D(2, 3, padding=v), "padding", "count>=0"),
    "MaxPool2D": (lambda v: MaxPool2D(v), "kernel", "count>=1"),
    "Residual": (lambda v: Residual(v), "out_channels", "count>=1"),
    "Dropout": (lambda v: Dropout(v), "retain", "(0,1]"),
    "BatchNorm decay": (lambda v: BatchNorm(decay=v), "decay", "[0,1)"),
    "BatchNorm eps": (lambda v: BatchNorm(eps=v), "eps", ">0"),
    "Sgd": (lambda v: Sgd(v), "lr", ">0"),
    "Adam lr": (lambda v: Adam(v), "lr", ">0"),
    "Adam beta1": (lambda v: Adam(beta1=v), "beta1", "[0,1)"),
    "Adam beta2": (lambda v: Adam(beta2=v), "beta2", "[0,1)"),
    "Adam epsilon": (lambda v: Adam(epsilon=v), "epsilon", ">0"),
    "Nesterovs": (lambda v: Nesterovs(momentum=v), "momentum", "[0,1)"),
    "Network l2": (lambda v: mlp(4, hidden=(3,), n_out=2, l2=v), "l2", ">=0"),
    "mlp hidden": (lambda v: mlp(4, hidden=(v,), n_out=2), "n_out", "count>=1"),
    "Network.fit epochs": (lambda v: _net().fit(ArrayIterator(DS, 4), epochs=v), "epochs", "count>=1"),
    "ArrayIterator": (lambda v: ArrayIterator(DS, v), "batch_size", "count>=1"),
    "AsyncPrefetchIterator": (
        _closed(lambda v: AsyncPrefetchIterator(ArrayIterator(DS, 4), prefetch=v)),
        "prefetch",
        "count>=1",
    ),
    "WorkspaceConfig initial_size": (lambda v: WorkspaceConfig(initial_size=v), "initial_size", "count>=0"),
    "WorkspaceConfig max_size": (lambda v: WorkspaceConfig(max_size=v), "max_size", "count>=0"),
    "WorkspaceConfig overallocation_limit": (
        lambda v: WorkspaceConfig(overallocation_limit=v),
        "overallocation_limit",
        ">=0",
    ),
    "ParallelWrapper workers": (_closed(lambda v: ParallelWrapper(_net(), workers=v)), "workers", "count>=1"),
    "ParallelWrapper averaging_frequency": (
        _closed(lambda v: ParallelWrapper(_net(), workers=1, averaging_frequency=v)),
        "averaging_frequency",
        "count>=1",
    ),
    "ParallelWrapper prefetch_buffer": (
        _closed(lambda v: ParallelWrapper(_net(), workers=1, prefetch_buffer=v)),
        "prefetch_buffer",
        "count>=0",
    ),
    "ParallelInference workers": (_closed(lambda v: ParallelInference(_net(), workers=v)), "workers", "count>=1"),
    "ParallelInference batch_limit": (
        _closed(lambda v: ParallelInference(_net(), workers=1, batch_limit=v)),
        "batch_limit",
        "count>=1",
    ),
    "MaxEpochsTerminationCondition": (lambda v: MaxEpochsTerminationCondition(v), "max_epochs", "count>=1"),
    "ScoreImprovementEpochTerminationCondition": (
        lambda v: ScoreImprovementEpochTerminationCondition(v),
        "max_epochs_with_no_improvement",
        "count>=0",
    ),
    "MaxTimeIterationTerminationCondition": (lambda v: MaxTimeIterationTerminationCondition(v), "seconds", ">0"),
    "MaxScoreIterationTerminationCondition": (
        lambda v: MaxScoreIterationTerminationCondition(v),
        "max_score",
        "finite",
    ),
    "BestScoreEpochTerminationCondition": (
        lambda v: BestScoreEpochTerminationCondition(v),
        "best_expected_score",
        "finite",
    ),
    "measure.compare repeats": (
        lambda v: measure.compare({"a": lambda: 0}, repeats=v, number=1),
        "repeats",
        "count>=1",
    ),
    "measure.compare number": (lambda v: measure.compare({"a": lambda: 0}, repeats=1, number=v), "number", "count>=1"),
    "measure.compare min_time": (lambda v: measure.compare({"a": lambda: 0}, repeats=1, min_time=v), "min_time", ">0"),
    "set_host_device_count": (lambda v: kit.devices.set_host_device_count(v), "n", "count>=1"),
}


def refused(kind: str, bad: str) -> bool:
    """Whether `kind` of argument must refuse the `bad` value (the rest are its documented meaning)."""
    if bad in ("nan", "string", "bool"):
        return True
    if kind.startswith("count"):
        return bad in ("inf", "huge", "negative", "float-for-a-count") or (bad == "zero" and kind == "count>=1")
    if kind == "finite":
        return bad == "inf"
    if kind in (">0", ">=0"):
        return bad in ("inf", "negative") or (bad == "zero" and kind == ">0")
    return bad in ("inf", "huge", "negative", "float-for-a-count") or (bad == "zero" and kind == "(0,1]")


CASES = [(call, bad) for call, (_, _, kind) in CALLS.items() for bad in BAD if refused(kind, bad)]


@pytest.mark.parametrize(("call", "bad"), CASES, ids=[f"{c}-{b}" for c, b in CASES])
def test_a_bad_number_is_refused_at_the_call_naming_the_value(call, bad):
    make, _argument, _kind = CALLS[call]
    value = BAD[bad]
    before = kit.devices.host_device_count()
    try:
        with pytest.raises((ValueError, TypeError)) as info:
            make(value)
    finally:
        kit.devices.set_host_device_count(before)
    message = str(info.value)
    assert repr(value) in message or str(value) in message, message
