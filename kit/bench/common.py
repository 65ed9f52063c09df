"""Timing helpers every benchmark module shares: seconds per call, variants side by side
(interleaved, through kit.measure), and the label of the device a benchmark ran on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kit
from kit import measure

__all__ = ["_device_label", "_side_by_side", "_time"]


def _time(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call of `number` calls, device synchronised before the clock is read."""
    return measure.measure(fn, number=number, repeats=1, warmup=False, sync=kit.backend.sync).median


def _side_by_side(
    fns: dict[str, Callable[[], Any]], number: int | None, repeats: int, min_time: float = measure.MIN_TIME
) -> dict[str, list[float]]:
    """Seconds per call for each variant, one list entry per repeat, variants interleaved
    (kit.measure.compare; `number=None` lets autorange pick the calls per repeat)."""
    timings = measure.compare(fns, min_time=min_time, repeats=repeats, number=number, sync=kit.backend.sync)
    return {k: t.seconds for k, t in timings.items()}


def _device_label() -> str:
    dev = kit.current_device()
    return dev.describe()
