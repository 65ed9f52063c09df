"""Every numeric argument of kit's public calls, one table (issue 43's sweep): NaN, infinity, a huge
value, zero, a negative, a float where a count is meant, a string and a bool are each refused at
the call, in words that name the call, the argument and the value, or given their documented
meaning (listed in ACCEPTED). kit.core.arguments' whole and real are the two rules behind it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

import kit
from kit import measure
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.data.datasets import load_fashion_mnist
from kit.monitor.panels import Progress, TimingPanel
from kit.monitor.widgets import WorkerPanel
from kit.nn import Adam, BatchNorm, Conv2D, Dense, Dropout, MaxPool2D, Nesterovs, Residual, Sgd, mlp
from kit.nn.evaluation import Evaluation
from kit.parallel import ParallelInference, ParallelWrapper
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    FixedThresholdAlgorithm,
    ResidualClippingPostProcessor,
    TargetSparsityThresholdAlgorithm,
    threshold_encode,
)
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
from kit.spark.rdd_data import to_rdd
from kit.training.compare import Job
from kit.training.earlystopping_config import (
    BestScoreEpochTerminationCondition,
    DataSetLossCalculator,
    EarlyStoppingConfig,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    MaxTimeIterationTerminationCondition,
    ScoreImprovementEpochTerminationCondition,
)
from kit.training.listeners import PerformanceListener, ScoreIterationListener, StatsRecorder, TrainingDashboard
from kit.training.scaling import measure_bandwidth, predict_epoch_seconds
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


STATS = Path(tempfile.mkdtemp()) / "stats.jsonl"
LOSS = DataSetLossCalculator(ArrayIterator(DS, 4))


def _evaluation():
    ev = Evaluation(2)
    ev.eval(np.eye(2)[[0, 1]], np.eye(2)[[0, 1]])
    return ev


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
    # the 2026-11-29 pass: calls the first table did not list, each once refusing a bad number late or never
    "ResidualClippingPostProcessor clip": (lambda v: ResidualClippingPostProcessor(v, 1), "clip_value", ">=1"),
    "ResidualClippingPostProcessor frequency": (lambda v: ResidualClippingPostProcessor(5, v), "frequency", "count>=1"),
    "FixedThresholdAlgorithm": (lambda v: FixedThresholdAlgorithm(v), "threshold", "(0,float32]"),
    "AdaptiveThresholdAlgorithm": (lambda v: AdaptiveThresholdAlgorithm(v), "initial_threshold", "(0,float32]"),
    "TargetSparsityThresholdAlgorithm": (
        lambda v: TargetSparsityThresholdAlgorithm(v),
        "initial_threshold",
        "(0,float32]",
    ),
    "threshold_encode tau": (lambda v: threshold_encode(np.ones(4, np.float32), v), "tau", "(0,float32]"),
    "threshold_encode boundary": (
        lambda v: threshold_encode(np.ones(4, np.float32), 0.5, boundary=v),
        "boundary",
        "count>=1",
    ),
    "load_fashion_mnist limit": (lambda v: load_fashion_mnist(limit=v), "limit", "count>=1"),
    "DataSet num_classes": (
        lambda v: DataSet(np.zeros((4, 2)), np.arange(4) % 2, num_classes=v),
        "num_classes",
        "count>=1",
    ),
    "DataSet.split fraction": (lambda v: DS.split(v), "fraction", "(0,1)"),
    "DataSet.split seed": (lambda v: DS.split(0.5, seed=v), "seed", "count>=0"),
    "ArrayIterator seed": (lambda v: ArrayIterator(DS, 4, seed=v), "seed", "count>=0"),
    "mlp loss_scale": (lambda v: mlp(4, hidden=(3,), n_out=2, loss_scale=v), "loss_scale", "(0,float32]"),
    "goal value": (lambda v: measure.goal("x", v, "<=", 2), "value", "number"),
    "goal limit": (lambda v: measure.goal("x", 1.0, "<=", v), "limit", "finite"),
    "median_interval confidence": (lambda v: measure.median_interval([1, 2, 3], confidence=v), "confidence", "(0,1)"),
    "autorange min_time": (lambda v: measure.autorange(lambda: 0, min_time=v, max_number=2), "min_time", ">0"),
    "autorange max_number": (
        lambda v: measure.autorange(lambda: 0, min_time=1e-9, max_number=v),
        "max_number",
        "count>=1",
    ),
    "histogram_bins max_share": (lambda v: measure.histogram_bins([1.0, 2.0], max_share=v), "max_share", "(0,1]"),
    "histogram_bins max_bins": (lambda v: measure.histogram_bins([1.0, 2.0], max_bins=v), "max_bins", "count>=1"),
    "ScoreIterationListener": (lambda v: ScoreIterationListener(v), "frequency", "count, <=0 = 1"),
    "StatsRecorder frequency": (lambda v: StatsRecorder(STATS, frequency=v), "frequency", "count, <=0 = 1"),
    "StatsRecorder memory_every": (
        lambda v: StatsRecorder(STATS, memory_every=v),
        "memory_every",
        "count, <=0 = 1",
    ),
    "PerformanceListener": (lambda v: PerformanceListener(v), "frequency", "count>=1"),
    "Evaluation num_classes": (lambda v: Evaluation(v), "num_classes", "count>=1"),
    "Evaluation.precision cls": (lambda v: _evaluation().precision(v), "cls", "count>=0"),
    "kit.seed": (lambda v: kit.seed(v), "value", "count>=0"),
    "logical_devices": (lambda v: kit.logical_devices(v), "n", "count>=1"),
    "EarlyStoppingConfig": (
        lambda v: EarlyStoppingConfig([MaxEpochsTerminationCondition(1)], [], LOSS, evaluate_every_n_epochs=v),
        "evaluate_every_n_epochs",
        "count>=1",
    ),
    "Progress total": (lambda v: Progress("x", total=v, display=False), "total", "count>=0"),
    "Progress done": (lambda v: Progress("x", total=3, display=False)(v), "done", "count>=0"),
    "Progress interval": (
        lambda v: Progress("x", interval=v, widgets=True, display=False),
        "interval",
        "secs, inf: never",
    ),
    "TimingPanel total": (lambda v: TimingPanel(total=v, display=False), "total", "count>=0"),
    "WorkerPanel": (lambda v: WorkerPanel(v, display=False), "workers", "count>=1"),
    "predict_epoch_seconds n": (lambda v: predict_epoch_seconds(10, v, 0.1, 1, 100, 4, 2, 1e9, True), "n", "count>=1"),
    "predict_epoch_seconds bandwidth": (
        lambda v: predict_epoch_seconds(10, 2, 0.1, 1, 100, 4, 2, v, True),
        "bandwidth",
        ">0",
    ),
    "measure_bandwidth": (lambda v: measure_bandwidth(v, repeats=1), "nbytes", "count>=1"),
    "kit.arange": (lambda v: kit.arange(v), "stop", "finite"),
    "fit prefetch, a list of DataSets": (lambda v: _net().fit([DS], prefetch=v), "prefetch", "count>=0"),
    # the second pass of 2026-11-29: Spark's masters and data, jobs, panels, shutdowns
    "to_rdd examples_per_element": (lambda v: to_rdd(None, DS, examples_per_element=v), "examples", "count>=1"),
    "to_rdd num_slices": (lambda v: to_rdd(None, DS, num_slices=v), "num_slices", "count>=1"),
    "ParameterAveragingTrainingMaster": (
        lambda v: ParameterAveragingTrainingMaster(batch_size_per_worker=v),
        "batch_size_per_worker",
        "count>=1",
    ),
    "SharedTrainingMaster initial_threshold": (
        lambda v: SharedTrainingMaster(4, 1, initial_threshold=v),
        "initial_threshold",
        "(0,float32]",
    ),
    "a master's round_timeout": (
        lambda v: ParameterAveragingTrainingMaster(batch_size_per_worker=4, round_timeout=v),
        "round_timeout",
        "(0,float32]",
    ),
    "Job batch_size": (lambda v: Job(_net, DS, batch_size=v), "batch_size", "count>=1"),
    "Job min_time": (lambda v: Job(_net, DS, min_time=v), "min_time", ">0"),
    "WorkerPanel total_iterations": (
        lambda v: WorkerPanel(2, total_iterations=v, widgets=False, display=False),
        "total_iterations",
        "count>=0",
    ),
    "TrainingDashboard total_iterations": (
        lambda v: TrainingDashboard(v, widgets=False),
        "total_iterations",
        "count>=0",
    ),
    "TrainingDashboard interval": (
        lambda v: TrainingDashboard(10, interval=v, widgets=False),
        "interval",
        "secs, inf: never",
    ),
    "AsyncPrefetchIterator.shutdown": (
        lambda v: AsyncPrefetchIterator(ArrayIterator(DS, 4), prefetch=1).shutdown(timeout=v),
        "timeout",
        "secs, inf: never",
    ),
}


def refused(kind: str, bad: str) -> bool:
    """Whether `kind` of argument must refuse the `bad` value (the rest are its documented meaning)."""
    if bad in ("nan", "string", "bool"):
        return True
    if kind == "number":  # a figure: infinity reads as such
        return False
    if kind == "secs, inf: never":  # a panel's redraw interval
        return bad == "negative"
    if kind == "count, <=0 = 1":  # DL4J's listener frequencies
        return bad in ("inf", "huge", "float-for-a-count")
    if kind in ("(0,1)", "(0,float32]", ">=1"):
        return (
            bad in ("inf", "zero", "negative")
            or (bad == "huge" and kind != ">=1")
            or (bad == "float-for-a-count" and kind == "(0,1)")
        )
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
    make, argument, _kind = CALLS[call]
    value = BAD[bad]
    before = kit.devices.host_device_count()
    try:
        with pytest.raises((ValueError, TypeError)) as info:
            make(value)
    finally:
        kit.devices.set_host_device_count(before)
    message = str(info.value)
    assert repr(value) in message or str(value) in message, message
    assert argument in message, f"the message does not name {argument!r}: {message}"


# a count given as a NumPy integer (y.max() + 1, an array's length) is a count: accepted wherever a count is
NOT_RUN = {"load_fashion_mnist limit", "Network.fit epochs", "measure_bandwidth", "to_rdd examples_per_element"}
NOT_RUN |= {"to_rdd num_slices"}  # (they need a SparkContext past the check)  # work, not checks
GOOD = {"Evaluation num_classes": 2, "DataSet num_classes": 2}
COUNTS = [c for c, (_, _, kind) in CALLS.items() if kind.startswith("count") and c not in NOT_RUN]


@pytest.mark.parametrize("call", COUNTS)
def test_a_numpy_integer_is_a_count(call):
    make, _, kind = CALLS[call]
    before = kit.devices.host_device_count()
    try:
        make(np.int64(GOOD.get(call, 0 if kind == "count>=0" else 1)))
    finally:
        kit.devices.set_host_device_count(before)


def test_a_count_given_as_a_numpy_integer_trains_as_many_epochs():
    net = _net()
    net.fit(DS, epochs=np.int64(2))
    assert net.iteration == 2  # one batch an epoch


# every axis and size argument of the array calls: a float, a string, a bool, NaN or None (where it is
# not "every axis") is refused naming it, never truncated (2.5 -> 2), parsed ("1" -> 1) or read as 1 (True)
X = kit.zeros((3, 4))
AXES = {
    "reshape": lambda v: X.reshape(v, -1),
    "reshape alone": lambda v: X.reshape(v),
    "transpose": lambda v: X.transpose(v, 0),
    "expand_dims": lambda v: X.expand_dims(v),
    "squeeze": lambda v: kit.zeros((1, 4)).squeeze(v),
    "sum": lambda v: X.sum(axis=v),
    "max": lambda v: X.max(axis=v),
    "mean": lambda v: X.mean(axis=v),
    "argmax": lambda v: X.argmax(axis=v),
    "concatenate": lambda v: kit.concatenate([X, X], axis=v),
    "stack": lambda v: kit.stack([X, X], axis=v),
}
NONE_IS_EVERY_AXIS = {"squeeze", "sum", "max", "mean", "argmax"}
AXIS_BAD = {"float": 1.5, "whole float": 1.0, "string": "1", "bool": True, "nan": float("nan"), "none": None}
AXIS_CASES = [
    (call, bad)
    for call in AXES
    for bad in AXIS_BAD
    if not (bad == "none" and call in NONE_IS_EVERY_AXIS | {"transpose"})
]


@pytest.mark.parametrize(("call", "bad"), AXIS_CASES, ids=[f"{c}-{b}" for c, b in AXIS_CASES])
def test_an_axis_or_a_size_that_is_not_a_whole_number_is_refused_naming_it(call, bad):
    value = AXIS_BAD[bad]
    with pytest.raises((ValueError, TypeError)) as info:
        AXES[call](value)
    assert repr(value) in str(info.value), str(info.value)


@pytest.mark.parametrize("call", list(AXES))
def test_a_numpy_integer_is_an_axis(call):
    AXES[call](np.int64({"reshape": 2, "reshape alone": 12, "transpose": 1}.get(call, 0)))


@pytest.mark.parametrize("value", [np.float32("nan"), 3, 2.5, np.int64(1)])
def test_a_number_is_no_dtype(value):
    before = kit.backend.get_default_dtype()
    with pytest.raises(TypeError, match="is a number, not a dtype"):
        kit.backend.set_default_dtype(value)
    assert kit.backend.get_default_dtype() == before


# a flag is True or False: "False" and "no" are true strings, and None no answer
FLAGS = {
    "ParallelWrapper average_updaters": lambda v: ParallelWrapper(_net(), workers=1, average_updaters=v),
    "ParallelWrapper report_score_after_averaging": lambda v: ParallelWrapper(
        _net(), workers=1, report_score_after_averaging=v
    ),
    "PerformanceListener report_score": lambda v: PerformanceListener(1, report_score=v),
    "track_allocation_sites": lambda v: kit.workspaces.workspace.track_allocation_sites(v),
}


@pytest.mark.parametrize("value", ["False", "no", None])
@pytest.mark.parametrize("call", list(FLAGS))
def test_a_flag_is_true_or_false(call, value):
    with pytest.raises(TypeError, match="True or False"):
        FLAGS[call](value)
