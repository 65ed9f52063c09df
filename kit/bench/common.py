"""Timing helpers every benchmark module shares: seconds per call, variants side by side
(interleaved, through kit.measure), the label of the device a benchmark ran on, and the
environment a result was measured in (`run_metadata`, stored with every `--json` file)."""

from __future__ import annotations

import datetime
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kit
from kit import measure, settings

__all__ = ["device_label", "git_commit", "run_metadata", "side_by_side", "time_calls"]


def time_calls(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call of `number` calls, device synchronised before the clock is read."""
    return measure.measure(fn, number=number, repeats=1, warmup=False, sync=kit.backend.sync).median


def side_by_side(
    fns: dict[str, Callable[[], Any]], number: int | None, repeats: int, min_time: float = measure.MIN_TIME
) -> dict[str, list[float]]:
    """Seconds per call for each variant, one list entry per repeat, variants interleaved
    (kit.measure.compare; `number=None` lets autorange pick the calls per repeat)."""
    timings = measure.compare(fns, min_time=min_time, repeats=repeats, number=number, sync=kit.backend.sync)
    return {k: t.seconds for k, t in timings.items()}


def device_label() -> str:
    dev = kit.current_device()
    return dev.describe()


def git_commit() -> str | None:
    """The commit of the checkout kit runs from (with "-dirty" when tracked files changed), else
    KIT_COMMIT, else None (a wheel install)."""
    root = Path(kit.__file__).resolve().parents[1]
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            changed = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            return f"{head}-dirty" if changed else head
        except (OSError, subprocess.SubprocessError):
            pass
    return settings.commit()


def run_metadata() -> dict[str, Any]:
    """What a stored benchmark result needs to be compared later: versions, backend, when (UTC)
    and which commit."""
    ok, _ = kit.backend.gpu_status()
    return {
        "kit": settings.distribution_version() or kit.__version__,
        "distribution": settings.DISTRIBUTION,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cupy": kit.backend.cupy().__version__ if ok else None,
        "backend": kit.backend.name(),
        "platform": f"{platform.system()} {platform.machine()}",
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    }
