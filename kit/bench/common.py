"""Timing helpers every benchmark module shares: seconds per call, variants side by side
(interleaved, through kit.measure), the label of the device a benchmark ran on, and the
environment a result was measured in (`run_metadata`, stored with every `--json` file); what the
training benchmarks' rows share: a range of timings, a row's goal verdict, a baseline's dtype check."""

from __future__ import annotations

import datetime
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kit
from kit import settings
from kit.measurement import measure

__all__ = [
    "STEP_WARMUP",
    "device_label",
    "git_commit",
    "min_max_ms",
    "row_verdict",
    "run_metadata",
    "same_dtype",
    "side_by_side",
    "time_calls",
]

# untimed training steps before a benchmark times one: a plan is recorded on a batch size's second
# step (kit.nn.train_plan) and SEPARATE's workspaces learn their sizes over two cycles; with one,
# ResNet-18's first timed step took twice a steady one (1.25-1.3 s against 0.6) and flagged the run
STEP_WARMUP = 3


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


def min_max_ms(ts: list[float]) -> str:
    """Timings in seconds as their range in milliseconds, as a table's min_max_ms column shows it."""
    return f"{min(ts) * 1e3:.3g}-{max(ts) * 1e3:.3g}"


def same_dtype(label: str, dtype: Any, *arrays: Any) -> None:
    """Refuse a baseline that does not compute in kit's `dtype`: every array (a NumPy array or a
    PyTorch tensor: inputs, weights, an answer) must hold it, or TypeError. Handed a float64 row,
    NumPy converts float32 weights on every call and computes in float64, so a ratio to it would
    compare dtypes as well as implementations; check before timing, not inside the timed call."""
    want = np.dtype(dtype).name
    got = sorted({str(a.dtype).removeprefix("torch.") for a in arrays} - {want})
    if got:
        raise TypeError(
            f"{label}: the baseline holds {', '.join(got)} beside kit's {want}: a ratio to it would not "
            "be like for like (cast its inputs and weights to kit's dtype)"
        )


def row_verdict(ratio: float, limit: float, paired: list[float]) -> str:
    """A row's goal column: the goal line's verdict for the median of its paired ratios."""
    lo, hi, _ = measure.median_interval(paired)
    return measure.goal_verdict(ratio, "<=", limit, (lo, hi))
