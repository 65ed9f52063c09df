"""Goals: a figure against its target, saying met, NOT met, or, where the repeats it comes from lie
on both sides of the target, that the run shows neither (`goal`, `goal_verdict`), with the interval
that holds a median of repeats (`median_interval`). Re-exported by kit.measure, where every
benchmark and chapter reaches them.

    >>> goal("added time per small op", 1.3, "<=", 2.0, "µs")
    'added time per small op: 1.3 µs -> met (goal <= 2 µs)'

One rule for a figure computed from a measurement kit.measure flagged (a busy machine, a spread too
wide): it carries the flag wherever it is printed (`flagged_figure`: "2.5 µs (flagged)"), and no
goal gives it a verdict (`goal(reliable=False)`, `goal_verdict(reliable=False)`: "no verdict"):

    >>> print(goal("added time per small op", 2.5, "<=", 1.5, "µs", reliable=False))
    added time per small op: 2.5 µs (flagged) -> no verdict: kit.measure flagged the measurement (goal <= 1.5 µs)
    [unreliable measurement: see the warnings]
    >>> flagged_figure("2.5 µs", True), flagged_figure("1.1 µs", False)
    ('2.5 µs (flagged)', '1.1 µs')
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from kit.core.arguments import real

__all__ = ["FLAGGED", "NO_VERDICT", "UNRELIABLE_NOTE", "flagged_figure", "goal", "goal_verdict", "median_interval"]

FLAGGED = " (flagged)"  # the mark a figure from a flagged measurement carries (kit.reference's cells too)
NO_VERDICT = "no verdict: kit.measure flagged the measurement"  # what a flagged goal says instead of met/NOT met
UNRELIABLE_NOTE = " [unreliable measurement: see the warnings]"  # a flagged goal line's end (kit.reference reads it)


def flagged_figure(text: str, flagged: bool | Sequence[str]) -> str:
    """A printed figure (`text`, number and unit) as it must read when the measurement it was
    computed from is flagged: with the mark `FLAGGED` when `flagged` is true (a bool, or the list of
    warnings, non-empty when flagged), as it is otherwise. The one rule every printed figure from a
    timing follows, wherever it is printed: a table's cell, a summary line, a goal line."""
    return f"{text}{FLAGGED}" if flagged else text


def _distinct(value: float, limit: float) -> tuple[str, str]:
    """`value` and `limit` to 3 significant figures, with more digits where 3 would print two
    different numbers alike (1.504 beside a goal of 1.5 reads "1.504", not "1.5 -> NOT met (<= 1.5)")."""
    bound = f"{limit:g}"
    for digits in range(3, 10):
        shown = f"{value:.{digits}g}"
        if shown != bound or value == limit:
            break
    return shown, bound


def median_interval(values: Iterable[float], confidence: float = 0.9) -> tuple[float, float, float]:
    """(low, high, coverage): the narrowest pair of order statistics (the k-th lowest and the k-th
    highest value) that holds the median of what was measured with at least `confidence`, and the
    probability it does. Distribution-free: each repeat falls on either side of the true median
    with probability 1/2, so the count below it is binomial. With too few values to reach
    `confidence`, the lowest and the highest, with the coverage they give.

        >>> median_interval([1.02, 0.98, 1.01, 1.05, 0.99])       # 5 repeats: their whole range
        (0.98, 1.05, 0.9375)
        >>> lo, hi, p = median_interval([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0])
        >>> (lo, hi, round(p, 3))                                 # 11 repeats: the 3rd lowest to the 3rd highest
        (1.2, 1.8, 0.935)
    """
    confidence = real("median_interval", "confidence", confidence, 0, 1, low_open=True, high_open=True)
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_interval: no values")
    k, coverage = 1, 1 - 2 * 0.5**n
    below = 1  # ways to put fewer than k values below the median, for the next k
    for j in range(1, n // 2):  # try k = j + 1
        below += math.comb(n, j)
        wider = 1 - 2 * below * 0.5**n
        if wider < confidence:
            break
        k, coverage = j + 1, wider
    return xs[k - 1], xs[n - k], coverage


_GOAL_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


def _figures(where: str, value: float, limit: float) -> None:
    """A figure may be infinite (a target never reached reads against its limit), never NaN; a
    limit is a finite number: else a ValueError naming them, never a verdict."""
    real(where, "limit", limit)
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool) or value != value:
        raise ValueError(f"{where}(value={value!r}): the figure must be a number (infinity reads as such), not NaN")


def _goal_op(op: str) -> Callable[[float, float], bool]:
    if op not in _GOAL_OPS:
        raise ValueError(f"goal(op={op!r}): one of {sorted(_GOAL_OPS)}")
    return _GOAL_OPS[op]


def goal_verdict(
    value: float, op: str, limit: float, interval: tuple[float, float] | None = None, reliable: bool = True
) -> str:
    """ "met" or "NOT met" for `value` against `limit` (`op`: "<=", "<", ">=", ">"), or, where
    `interval` (where the figure lies, from its repeats) is on both sides of the limit, "within the
    spread: not shown either way". An interval that does not hold `value` is widened to it: a figure
    on one side and all its repeats on the other show nothing either way. `reliable=False` (the
    figure comes from a measurement kit.measure flagged): `NO_VERDICT`, whatever the figure. The one
    rule every goal line and goal column of kit uses.

        >>> goal_verdict(1.02, "<=", 1.03), goal_verdict(1.02, "<=", 1.03, (1.0, 1.06))
        ('met', 'within the spread: not shown either way')
        >>> goal_verdict(3.0, "<=", 2, (1.0, 1.0))       # the figure NOT met, every repeat met
        'within the spread: not shown either way'
        >>> goal_verdict(3.0, "<=", 2, reliable=False)   # from a flagged measurement
        'no verdict: kit.measure flagged the measurement'
    """
    holds = _goal_op(op)
    _figures("goal_verdict", value, limit)
    if not reliable:
        return NO_VERDICT
    if interval is not None:
        lo, hi = min(interval[0], value), max(interval[1], value)
        if holds(lo, limit) != holds(hi, limit):
            return "within the spread: not shown either way"
    return "met" if holds(value, limit) else "NOT met"


def _spread(
    per_repeat: tuple[float, float] | None, repeats: Iterable[float] | None, u: str
) -> tuple[str, tuple[float, float] | None]:
    """A goal line's words for the figure's spread, and the interval its verdict must clear."""
    if per_repeat is not None:
        interval = (min(per_repeat), max(per_repeat))
        return f" (per repeat {interval[0]:.3g}-{interval[1]:.3g}{u})", interval
    if repeats is not None:
        lo, hi, coverage = median_interval(repeats)
        return f" (its median within {lo:.3g}-{hi:.3g}{u}, {coverage:.0%})", (lo, hi)
    return "", None


def goal(
    what: str,
    value: float,
    op: str,
    limit: float,
    unit: str = "",
    reliable: bool = True,
    per_repeat: tuple[float, float] | None = None,
    repeats: Iterable[float] | None = None,
) -> str:
    """A printed goal that says met, NOT met or not shown either way (`goal_verdict`), with the
    figure: `goal("added per op", 1.3, "<=", 2, "µs")`. `reliable=False` (the figure comes from a
    measurement kit.measure flagged): the figure carries the flag (`flagged_figure`), the line gives
    no verdict (`NO_VERDICT`) and ends with `UNRELIABLE_NOTE`.

    `per_repeat`: the range (lowest, highest) of the figure over the repeats it is the median of (a
    ratio taken within each repeat). The line then prints that range, and where the range lies on
    both sides of the limit it says "within the spread: not shown either way" instead of a verdict
    the median alone would give. `repeats`: the figure of each repeat, `value` being their median;
    the line prints the median's interval (`median_interval`: at least 90 % where there are enough
    repeats) and gives no verdict where that interval lies on both sides of the limit.

        >>> goal("ws / plain time", 1.06, "<=", 1, per_repeat=(0.94, 1.12))
        'ws / plain time: 1.06 (per repeat 0.94-1.12) -> within the spread: not shown either way (goal <= 1)'
        >>> goal("workspace time / plain time", 1.06, "<=", 1, per_repeat=(1.02, 1.12))
        'workspace time / plain time: 1.06 (per repeat 1.02-1.12) -> NOT met (goal <= 1)'
        >>> goal("kit / NumPy", 1.02, "<=", 1.03, repeats=[1.0, 1.01, 1.02, 1.02, 1.03, 1.04, 1.06])
        'kit / NumPy: 1.02 (its median within 1-1.06, 98%) -> within the spread: not shown either way (goal <= 1.03)'
    """
    _goal_op(op)  # a bad op is refused before anything is computed
    _figures("goal", value, limit)
    u = f" {unit}" if unit else ""
    shown, bound = _distinct(value, limit)
    spread, interval = _spread(per_repeat, repeats, u)
    verdict = goal_verdict(value, op, limit, interval, reliable)
    text = f"{what}: {flagged_figure(f'{shown}{u}', not reliable)}{spread} -> {verdict} (goal {op} {bound}{u})"
    return text if reliable else text + UNRELIABLE_NOTE
