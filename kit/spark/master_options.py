"""The options a training master takes: one frozen dataclass a master, checked at construction.

    >>> from kit.spark import SharedTrainingMaster
    >>> SharedTrainingMaster(batch_size_per_worker=0)
    Traceback (most recent call last):
    ValueError: SharedTrainingMaster(batch_size_per_worker=0): must be an integer >= 1
    >>> tm = SharedTrainingMaster(32, 5)
    >>> tm.options.batch_size_per_worker, tm.options.mode, tm.options.threshold_settings.initial_threshold
    (32, <TrainingMode.SHARED_GRADIENTS: 'SHARED_GRADIENTS'>, 0.001)

`AveragingOptions` and `SharedOptions` ARE the masters' signatures (the first two fields
positional, the rest by keyword): arguments, defaults and checks live in one place, and a master
hands its rounds one frozen, picklable value. Each error names the master, the argument and the
rule. `Repartition` and `RDDTrainingApproach` are DL4J's enums; a master's `mode` is
ParallelWrapper's `TrainingMode`.
"""

from __future__ import annotations

import enum
import math
import os
import threading
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np

from kit.nn.workspace_mgr import WorkspaceMode
from kit.parallel.threshold import TAU_MAX
from kit.parallel.wrapper import TrainingMode  # ParallelWrapper's: the same two ways to combine workers
from kit.spark import scheduling
from kit.spark.aggregation import check_depth
from kit.spark.checkpoint import check_directory, check_every
from kit.spark.collectives import COLLECTIVES
from kit.spark.wire import ThresholdSettings

__all__ = [
    "EXCHANGES",
    "EXECUTIONS",
    "AveragingOptions",
    "MasterOptions",
    "RDDTrainingApproach",
    "Repartition",
    "SharedOptions",
    "ThresholdSettings",
]


EXECUTIONS = ("auto", "gang", "rounds")  # kit.spark.gang: one barrier stage a fit, or one job a round
EXCHANGES = ("parameters", "gradients")


class Repartition(enum.Enum):
    ALWAYS = "ALWAYS"
    NEVER = "NEVER"
    NUM_PARTITIONS_WORKERS_DIFFERS = "NUM_PARTITIONS_WORKERS_DIFFERS"


class RDDTrainingApproach(enum.Enum):
    EXPORT = "EXPORT"  # each round's mini-batches written to .npz files, executors load them
    DIRECT = "DIRECT"  # executors slice their cached partition


@dataclass(frozen=True)
class MasterOptions:
    """What both masters take (keyword only); a subclass adds its two positional arguments and
    its own. Frozen: a master's settings do not change after construction (make another master)."""

    master: ClassVar[str] = "TrainingMaster"  # the name errors give the call
    mode: ClassVar[TrainingMode] = TrainingMode.AVERAGING
    batch_size_per_worker: int = 16
    _: KW_ONLY
    num_workers: int | None = None
    rdd_data_set_num_examples: int = 1
    worker_prefetch_num_batches: int = 0
    repartition: Repartition | str = Repartition.ALWAYS
    rdd_training_approach: RDDTrainingApproach | str = RDDTrainingApproach.EXPORT
    export_directory: str | os.PathLike | None = None
    collect_training_stats: bool = False
    worker_workspace_mode: str | None = None
    worker_periodic_gc: bool = True
    worker_gc_window_ms: int = 5000
    round_timeout: float = 300.0
    aggregation_depth: int = 2
    checkpoint_every: int | None = None
    checkpoint_directory: str | os.PathLike | None = None
    barrier: bool = False
    gpus_per_task: float | None = None

    @property
    def steps_per_round(self) -> int:
        """Mini-batches each worker fits in a round (averaging_frequency or batches_per_round)."""
        raise NotImplementedError

    @property
    def threshold_settings(self) -> ThresholdSettings | None:
        """SharedTrainingMaster's threshold settings; None for parameter averaging."""
        return None

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen dataclass's field, in __post_init__ only

    def __post_init__(self) -> None:
        name = self.master
        self._set("aggregation_depth", check_depth(name, self.aggregation_depth))
        every = self.checkpoint_every
        self._set("checkpoint_every", check_every(name, every))
        self._set("checkpoint_directory", check_directory(name, self.checkpoint_directory))
        if self.checkpoint_every and self.checkpoint_directory is None:
            raise ValueError(
                f"{name}(checkpoint_every={every!r}): checkpoints need a checkpoint_directory (a path or "
                "URL the driver writes to, and a later driver reads from)"
            )
        self._set("barrier", check_bool(name, "barrier", self.barrier))
        self._set("gpus_per_task", scheduling.check_gpus(name, self.gpus_per_task))
        timeout = check_real(name, "round_timeout", self.round_timeout)
        if not 0 < timeout <= threading.TIMEOUT_MAX:  # a larger one overflows every wait (no watchdog at all)
            raise ValueError(
                f"{name}(round_timeout={self.round_timeout!r}): seconds > 0 and at most {threading.TIMEOUT_MAX:.3g} "
                "(default 300)"
            )
        self._set("round_timeout", timeout)
        self._set("batch_size_per_worker", check_int(name, "batch_size_per_worker", self.batch_size_per_worker, 1))
        self._check_own()
        if self.num_workers is not None:
            self._set("num_workers", check_int(name, "num_workers", self.num_workers, 1))
        self._set(
            "rdd_data_set_num_examples", check_int(name, "rdd_data_set_num_examples", self.rdd_data_set_num_examples, 1)
        )
        self._set(
            "worker_prefetch_num_batches",
            check_int(name, "worker_prefetch_num_batches", self.worker_prefetch_num_batches, 0),
        )
        self._set("repartition", check_enum(name, "repartition", self.repartition, Repartition))
        approach = check_enum(name, "rdd_training_approach", self.rdd_training_approach, RDDTrainingApproach)
        self._set("rdd_training_approach", approach)
        self._set("export_directory", check_export_directory(name, self.export_directory))
        self._set("collect_training_stats", check_bool(name, "collect_training_stats", self.collect_training_stats))
        if self.worker_workspace_mode is not None:
            mode = check_enum(name, "worker_workspace_mode", self.worker_workspace_mode, WorkspaceMode)
            self._set("worker_workspace_mode", mode.value)
        self._set("worker_periodic_gc", check_bool(name, "worker_periodic_gc", self.worker_periodic_gc))
        self._set("worker_gc_window_ms", check_int(name, "worker_gc_window_ms", self.worker_gc_window_ms, 0))

    def _check_own(self) -> None:
        """The subclass's own arguments."""

    def checkpoint_settings(self) -> dict[str, Any]:
        """The settings a checkpoint's rounds depend on (resuming with others is refused)."""
        return {
            "master": self.master,
            "batch_size_per_worker": self.batch_size_per_worker,
            "batches_per_round": self.steps_per_round,
            "repartition": self.repartition.value,
            "save_updater": None,
            "threshold": None,
        }


@dataclass(frozen=True)
class AveragingOptions(MasterOptions):
    """ParameterAveragingTrainingMaster's arguments (kit.spark.averaging_master)."""

    master: ClassVar[str] = "ParameterAveragingTrainingMaster"
    mode: ClassVar[TrainingMode] = TrainingMode.AVERAGING
    averaging_frequency: int = 5
    _: KW_ONLY
    save_updater: bool = True
    execution: str = "auto"  # kit.spark.gang: a gang where one can run, the rounds (warned, said why) otherwise
    exchange: str = "parameters"
    collective: str = "auto"

    @property
    def steps_per_round(self) -> int:
        return self.averaging_frequency

    def _check_own(self) -> None:
        self._set("averaging_frequency", check_int(self.master, "averaging_frequency", self.averaging_frequency, 1))
        self._set("save_updater", check_bool(self.master, "save_updater", self.save_updater))
        gang = check_gang_options(self.master, self.execution, self.exchange, self.collective, self.averaging_frequency)
        for key, value in zip(("execution", "exchange", "collective"), gang):
            self._set(key, value)

    def checkpoint_settings(self) -> dict[str, Any]:
        return {**super().checkpoint_settings(), "save_updater": self.save_updater}


@dataclass(frozen=True)
class SharedOptions(MasterOptions):
    """SharedTrainingMaster's arguments (kit.spark.shared_master)."""

    master: ClassVar[str] = "SharedTrainingMaster"
    mode: ClassVar[TrainingMode] = TrainingMode.SHARED_GRADIENTS
    batches_per_round: int = 5
    _: KW_ONLY
    worker_prefetch_num_batches: int = 2
    initial_threshold: float = 1e-3  # DL4J's AdaptiveThresholdAlgorithm default since 1.0.0-beta4
    min_target_sparsity: float = 1e-4
    max_target_sparsity: float = 1 / 16  # a dense (2-bit) message is within the band (DL4J's: 1e-2)
    decay_rate: float = 0.5 ** (1 / 20)
    keep_state_on_driver: bool = False  # True: each worker's state travels every round (kit.spark.worker_store)
    average_updates: bool = True  # each worker encodes its update / workers (the round moves by their mean)
    threshold_update_multiple: float | None = 1.0  # each step's threshold >= this x its largest update entry

    @property
    def steps_per_round(self) -> int:
        return self.batches_per_round

    @property
    def threshold_settings(self) -> ThresholdSettings:
        return ThresholdSettings(
            self.initial_threshold, self.min_target_sparsity, self.max_target_sparsity, self.decay_rate
        )

    def _check_own(self) -> None:
        self._set("batches_per_round", check_int(self.master, "batches_per_round", self.batches_per_round, 1))
        self._set("keep_state_on_driver", check_bool(self.master, "keep_state_on_driver", self.keep_state_on_driver))
        self._set("average_updates", check_bool(self.master, "average_updates", self.average_updates))
        multiple = check_update_multiple(self.master, self.threshold_update_multiple)
        self._set("threshold_update_multiple", multiple)

    def __post_init__(self) -> None:
        super().__post_init__()
        checked = check_threshold(
            self.master, self.initial_threshold, self.min_target_sparsity, self.max_target_sparsity, self.decay_rate
        )
        for key, value in checked.items():
            self._set(key, value)

    def checkpoint_settings(self) -> dict[str, Any]:
        threshold = {
            **self.threshold_settings.as_kwargs(),
            "average_updates": self.average_updates,
            "threshold_update_multiple": self.threshold_update_multiple,
        }
        return {**super().checkpoint_settings(), "threshold": threshold}


def check_gang_options(name: str, execution: Any, exchange: Any, collective: Any, frequency: int) -> tuple[str, ...]:
    """The gang's keyword options (kit.spark.gang), checked at construction; each error names the
    value and the choices."""
    for arg, value, choices in (
        ("execution", execution, EXECUTIONS),
        ("exchange", exchange, EXCHANGES),
        ("collective", collective, COLLECTIVES),
    ):
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{name}({arg}={value!r}): must be one of {', '.join(map(repr, choices))}")
    if exchange == "gradients" and frequency != 1:
        raise ValueError(
            f"{name}(averaging_frequency={frequency}, exchange='gradients'): gradients are all-reduced every step "
            "(DDP's semantics), so give averaging_frequency=1, or exchange='parameters' to average every "
            f"{frequency} steps"
        )
    if exchange == "gradients" and execution == "rounds":
        raise ValueError(
            f"{name}(execution='rounds', exchange='gradients'): the per-round path averages parameters; a "
            "gradient all-reduce every step needs the gang: execution='gang' or 'auto'"
        )
    return execution, exchange, collective


def local_path(directory: str) -> str:
    """A plain path or a file:// URL as a path (the directory every executor must see)."""
    return directory[len("file://") :] if directory.startswith("file://") else directory


def check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): must be an integer >= {minimum}")
    return int(value)  # NumPy's integers too, as a plain int (they travel to executors as JSON)


def check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{owner}({name}={value!r}): must be True or False")
    return bool(value)


def check_enum(owner: str, name: str, value: Any, kind: type[enum.Enum]) -> Any:
    try:
        return kind(value.value if isinstance(value, kind) else value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{owner}({name}={value!r}): must be one of {choices}") from None


def check_real(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{owner}({name}={value!r}): must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{owner}({name}={value!r}): must be finite")
    return value


def check_export_directory(name: str, export_directory: Any) -> str | None:
    """None, or a directory on the driver (a path or a file:// URL) that every executor is to see too;
    created on the driver when it does not exist yet."""
    if export_directory is None:
        return None
    if not isinstance(export_directory, (str, os.PathLike)):
        raise ValueError(f"{name}(export_directory={export_directory!r}): a path or a file:// URL")
    export_directory = os.fspath(export_directory)
    if "://" in export_directory and not export_directory.startswith("file://"):
        raise ValueError(
            f"{name}(export_directory={export_directory!r}): kit writes mini-batch files to plain paths and "
            "file:// URLs (a directory every executor mounts); for other storage leave export_directory=None "
            "and kit keeps the mini-batches in Spark's own storage"
        )
    where = local_path(export_directory)
    if os.path.exists(where) and not os.path.isdir(where):
        raise ValueError(
            f"{name}(export_directory={export_directory!r}): {where} is a file, not a directory; give a directory "
            "that every executor sees too (kit creates it if it does not exist yet), or None to keep the "
            "mini-batches in Spark's storage"
        )
    try:  # created on the driver; a cluster's executors must see the same path (a shared mount)
        os.makedirs(where, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"{name}(export_directory={export_directory!r}): cannot create {where} on the driver "
            f"({type(exc).__name__}: {exc}); give a directory the driver can write and every executor sees, "
            "or None to keep the mini-batches in Spark's storage"
        ) from exc
    return export_directory


def check_update_multiple(name: str, multiple: Any) -> float | None:
    """SharedTrainingMaster's threshold_update_multiple: None, or a finite number > 0."""
    if multiple is not None and not (check_real(name, "threshold_update_multiple", multiple) > 0):
        raise ValueError(
            f"{name}(threshold_update_multiple={multiple!r}): must be a number > 0 (kit's default 1.0: each step's "
            "threshold at least the step's largest update entry), or None for DL4J's adaptive threshold alone"
        )
    return None if multiple is None else float(multiple)


def check_threshold(
    name: str, initial_threshold: Any, min_target_sparsity: Any, max_target_sparsity: Any, decay_rate: Any
) -> dict[str, float]:
    """SharedTrainingMaster's threshold settings, checked: a threshold > 0, sparsities in order, a decay in [0.5, 1)."""
    t = {
        "initial_threshold": check_real(name, "initial_threshold", initial_threshold),
        "min_target_sparsity": check_real(name, "min_target_sparsity", min_target_sparsity),
        "max_target_sparsity": check_real(name, "max_target_sparsity", max_target_sparsity),
        "decay_rate": check_real(name, "decay_rate", decay_rate),
    }
    if not 0 < t["initial_threshold"] <= TAU_MAX:  # tau travels as float32: refused here, not on every executor
        raise ValueError(
            f"{name}(initial_threshold={initial_threshold!r}): must be > 0 and at most {TAU_MAX:.6g}, float32's "
            "largest (DL4J's default: 1e-3)"
        )
    if not 0 < t["min_target_sparsity"] < t["max_target_sparsity"] <= 1:
        raise ValueError(
            f"{name}(min_target_sparsity={min_target_sparsity!r}, max_target_sparsity={max_target_sparsity!r}): "
            "need 0 < min_target_sparsity < max_target_sparsity <= 1 (kit's defaults: 1e-4 and 1/16; DL4J's: 1e-4 "
            "and 1e-2)"
        )
    if not 0.5 <= t["decay_rate"] < 1:
        raise ValueError(
            f"{name}(decay_rate={decay_rate!r}): must be in [0.5, 1) (DL4J's default: 0.5 ** (1 / 20) = 0.966)"
        )
    return t
