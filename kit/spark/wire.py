"""The typed Spark wire: what the driver sends a round's tasks and what they send back.

    >>> import numpy as np
    >>> from kit.spark.wire import RoundResult, WorkerStats
    >>> stats = WorkerStats(worker=1, round=0, pid=42)          # a worker with no examples this round
    >>> stats.as_row()
    {'worker': 1, 'round': 0, 'pid': 42, 'examples': 0, 'attempt': 0}
    >>> RoundResult(worker=1, round=0, stats=stats).state is None
    True

A round's task gets one `RoundSpec` (frozen, pickled by Spark with the task's closure) and a
broadcast of the flat state; it yields one `RoundResult`, which travels up the aggregation tree
inside the aggregation's `RoundPartial`s (kit.spark.aggregation) to the driver. `RoundSource` says where the
round's mini-batches are, so a task never guesses from what its first record looks like.
Everything here is plain values and NumPy arrays: no kit object crosses the wire, and the model
files (checkpoints) never hold any of these pickled (kit.spark.checkpoint writes .npz and JSON).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.parallel.wrapper import TrainingMode

__all__ = [
    "RoundResult",
    "RoundSource",
    "RoundSpec",
    "SharedWorkerState",
    "ThresholdSettings",
    "WorkerStats",
    "task_attempt",
]


@dataclass(frozen=True)
class ThresholdSettings:
    """SharedTrainingMaster's AdaptiveThresholdAlgorithm settings (kit.parallel.threshold)."""

    initial_threshold: float
    min_target_sparsity: float
    max_target_sparsity: float
    decay_rate: float

    def as_kwargs(self) -> dict[str, float]:
        """AdaptiveThresholdAlgorithm's keyword arguments."""
        return dataclasses.asdict(self)


class RoundSource(enum.Enum):
    """Where a round's mini-batches are, so that a task reads its record without guessing."""

    CACHED = "cached"  # DIRECT: (worker * stored_rounds + round, [(x, y), ...]) in Spark's cache
    STORED = "stored"  # EXPORT into Spark's storage: (worker * stored_rounds + round, .npz bytes)
    FILE = "file"  # EXPORT to export_directory: (worker, path of an .npz file)


@dataclass(frozen=True)
class RoundSpec:
    """Everything a round's task needs, as plain values (pickled by Spark with the closure)."""

    config_json: str
    keys: tuple[str, ...]  # state arrays in the flat buffer, in order ("params", "updater_m", ...)
    sizes: tuple[int, ...]
    round: int
    base_iteration: int  # updater steps done before this round (Adam's bias correction)
    num_classes: int
    send_updater: bool
    source: RoundSource = RoundSource.CACHED
    mode: TrainingMode = TrainingMode.AVERAGING
    workspace_mode: str | None = None
    periodic_gc: bool = True
    gc_window_ms: int = 5000
    threshold: ThresholdSettings | None = None  # TrainingMode.SHARED_GRADIENTS's
    scaler: tuple[float, ...] | None = None  # mixed precision: the driver's LossScaler.state()
    stored_rounds: int = 0  # CACHED and STORED: record key = worker * stored_rounds + round
    gpus_per_task: float | None = None  # the job's resource profile asked for GPUs: train on the one Spark gave
    # SharedTrainingMaster (kit.spark.worker_store): the fit's token for the workers' states kept on the
    # executors (None: the driver sends each its state), the rounds each worker has done, and whether
    # the workers send their whole state back this round (else their messages only)
    store: str | None = None
    expected: tuple[tuple[int, int], ...] = ()
    sync_state: bool = True
    update_scale: float = 1.0  # SharedTrainingMaster: each step's update times this goes into the residual
    threshold_update_multiple: float | None = None  # ... each step's threshold >= this x its largest update entry


@dataclass
class WorkerStats:
    """What one worker measured in one round (kit.spark.stats describes each field); a worker
    with no examples in the round sends the first five only."""

    worker: int
    round: int
    pid: int
    examples: int = 0
    attempt: int = 0  # Spark's attempt number of this task: 0 unless it was retried
    start: float | None = None
    end: float | None = None
    load_ms: float | None = None
    get_model_ms: float | None = None
    fit_ms: float | None = None
    export_ms: float | None = None
    batches: int | None = None
    heap_allocations: int | None = None
    peak_workspace_bytes: int | None = None
    gc_calls: int | None = None
    gc_ms: float | None = None
    received_bytes: int | None = None
    sent_bytes: int | None = None
    tau: float | None = None  # TrainingMode.SHARED_GRADIENTS: the threshold after the round
    encoded: int | None = None  # ... the entries its messages carried
    sparsity: float | None = None  # ... their mean share of the parameters
    state_from: str | None = None  # ... where the worker's own state came from

    def as_row(self) -> dict[str, Any]:
        """The stats row SparkTrainingStats keeps (JSON): the fields that were measured."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class SharedWorkerState:
    """A SharedTrainingMaster worker's own state, kept across rounds (on the driver as `as_tree()`)."""

    residual: np.ndarray
    tau: float | None = None
    last_dense: bool | None = None
    last_sparsity: float | None = None
    rounds: int = 0
    updater: dict[str, np.ndarray] = field(default_factory=dict)
    scaler: tuple[float, ...] | None = None

    def as_tree(self) -> dict[str, Any]:
        """The driver's (and a checkpoint's) form: a dict of arrays and numbers."""
        return dataclasses.asdict(self)

    @classmethod
    def from_tree(cls, tree: dict[str, Any]) -> SharedWorkerState:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in tree.items() if k in names})


@dataclass
class RoundResult:
    """One worker's round, sent back up the aggregation tree."""

    worker: int
    round: int
    stats: WorkerStats
    scores: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)  # per step: the loss scaler skipped it (no update)
    iterations: int = 0  # how far the steps moved the worker's iteration counter
    state: np.ndarray | None = None  # AVERAGING: the worker's flat state (summed up the tree, then None)
    finite: bool = True  # AVERAGING: that state is finite (the driver receives sums only)
    scaler: tuple[float, ...] | None = None
    messages: list[np.ndarray] | None = None  # SHARED: the threshold-encoded updates the worker applied
    worker_state: SharedWorkerState | None = None  # SHARED: the worker's own state after the round


def task_attempt() -> int:
    """Spark's attempt number of the running task (0: its first try; 0 outside Spark too)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - a task runs on Spark, whose executors have PySpark
        return 0
    ctx = TaskContext.get()
    return int(ctx.attemptNumber()) if ctx is not None else 0
