"""The options a training master takes, and the checks that refuse a bad one at construction.

    >>> from kit.spark import SharedTrainingMaster
    >>> SharedTrainingMaster(batch_size_per_worker=0)
    Traceback (most recent call last):
    ValueError: SharedTrainingMaster(batch_size_per_worker=0): must be an integer >= 1

`Repartition` and `RDDTrainingApproach` are DL4J's enums (re-exported by `kit.spark.masters` and
`kit.spark`); the `_check_*` helpers each name the master, the argument and the rule, so the
error reads as the call the user wrote. Used by kit.spark.training_master and the two masters.
"""

from __future__ import annotations

import enum
import math
import os
from typing import Any

import numpy as np

__all__ = ["RDDTrainingApproach", "Repartition"]


class Repartition(enum.Enum):
    ALWAYS = "ALWAYS"
    NEVER = "NEVER"
    NUM_PARTITIONS_WORKERS_DIFFERS = "NUM_PARTITIONS_WORKERS_DIFFERS"


class RDDTrainingApproach(enum.Enum):
    EXPORT = "EXPORT"  # each round's mini-batches written to .npz files, executors load them
    DIRECT = "DIRECT"  # executors slice their cached partition


def local_path(directory: str) -> str:
    """A plain path or a file:// URL as a path (the directory every executor must see)."""
    return directory[len("file://") :] if directory.startswith("file://") else directory


def check_int(owner: str, name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): must be an integer >= {minimum}")
    return value


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
    if not t["initial_threshold"] > 0:
        raise ValueError(f"{name}(initial_threshold={initial_threshold!r}): must be > 0 (DL4J's default: 1e-4)")
    if not 0 < t["min_target_sparsity"] < t["max_target_sparsity"] <= 1:
        raise ValueError(
            f"{name}(min_target_sparsity={min_target_sparsity!r}, max_target_sparsity={max_target_sparsity!r}): "
            "need 0 < min_target_sparsity < max_target_sparsity <= 1 (DL4J's defaults: 1e-4 and 1e-2)"
        )
    if not 0.5 <= t["decay_rate"] < 1:
        raise ValueError(
            f"{name}(decay_rate={decay_rate!r}): must be in [0.5, 1) (DL4J's default: 0.5 ** (1 / 20) = 0.966)"
        )
    return t
