"""Arguments: one rule for every count and every real number a public call takes, refused at the
call in words that name the call, the argument and the value.

    >>> from kit.core.arguments import real, whole
    >>> whole("ArrayIterator", "batch_size", 32)
    32
    >>> whole("ArrayIterator", "batch_size", 2.5)
    Traceback (most recent call last):
    ValueError: ArrayIterator(batch_size=2.5): must be a whole number >= 1
    >>> real("Dropout", "retain", float("nan"), 0, 1, low_open=True)
    Traceback (most recent call last):
    ValueError: Dropout(retain=nan): must be a finite number in (0, 1]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["real", "whole"]


def whole(where: str, name: str, value: object, low: int = 1, high: int | None = None, what: str = "") -> int:
    """`value` as a whole number in [low, high] (NumPy's integers too), else a ValueError that
    names the call, the argument and the value: a float (2.5, even 2.0), a string, a bool, NaN or
    infinity is no count, and is refused rather than truncated or read as 1."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{where}({name}={value!r}): must be a whole number {span}{what}")
    return int(value)


def real(
    where: str,
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    what: str = "",
) -> float:
    """`value` as a finite real number within the bounds given (open or closed), else a ValueError
    naming the call, the argument and the value (a string, a bool, NaN and infinity are refused)."""
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)
    v = float(value) if ok else math.nan
    inside = (
        math.isfinite(v)
        and (low is None or (v > low if low_open else v >= low))
        and (high is None or (v < high if high_open else v <= high))
    )
    if not inside:
        if low is not None and high is not None:
            span = f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        elif low is not None:
            span = f" {'>' if low_open else '>='} {low:g}"
        elif high is not None:
            span = f" {'<' if high_open else '<='} {high:g}"
        else:
            span = ""
        raise ValueError(f"{where}({name}={value!r}): must be a finite number{span}{what}")
    return v
