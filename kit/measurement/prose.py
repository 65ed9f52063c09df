"""Sentences from measurements: what a chapter says about a run comes from the run.

A chapter that measures must not state a number or a direction its own output can contradict.
These helpers turn a measurement into a Markdown sentence (shown by Jupyter as Markdown, a plain
string elsewhere), and refuse to draw a conclusion where the measurement cannot carry one.

    >>> from kit.measurement.measure import Timing
    >>> plain = Timing("plain", [0.0120, 0.0125, 0.0122], 10)
    >>> arena = Timing("workspace", [0.0080, 0.0081, 0.0079], 10)
    >>> print(compare_timings(plain, arena))
    **workspace** took 8 ms per call and **plain** 12.2 ms: workspace was 1.53x faster
    (medians of 3 repeats; spread ±1% and ±2%).
    >>> busy = Timing("plain", [0.012, 0.013, 0.012], 10, load=0.6)
    >>> print(compare_timings(busy, arena))
    No conclusion can be drawn from this run: plain: machine busy: other processes used 60% of the
    CPU while this was measured.
    >>> print(accuracy_difference([True] * 330 + [False] * 29, [True] * 327 + [False] * 32, "A", "B"))
    **A** classified 330 of 359 test examples correctly (91.9%), **B** 327 (91.1%): 3 of 359
    examples apart, which is noise at this size (McNemar's exact test: p = 0.25, not below 0.05).

Rules the helpers follow:
- A timing flagged by `kit.measure` (busy machine, wide spread, impossible speedup) gives no
  direction: the sentence says no conclusion can be drawn and why.
- Two timings whose ranges of repeats overlap are "the same within the spread of the repeats".
- An accuracy difference is "noise" unless McNemar's exact test on the examples the two models
  classified differently says otherwise (p < alpha); the sentence gives the count either way.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from kit.measurement import tables
from kit.measurement.measure import Timing, format_seconds, format_spread, join_labels, label

__all__ = [
    "Sentence",
    "accuracy_difference",
    "compare_timings",
    "flags",
    "fraction",
    "gap",
    "mcnemar_p",
    "no_conclusion",
    "sentence",
    "show",
]


class Sentence(str):
    """A Markdown sentence: Jupyter renders it (`_repr_markdown_`), print() shows the text."""

    def _repr_markdown_(self) -> str:
        return str(self)


def sentence(text: str) -> Sentence:
    """Mark a sentence you built from measured values (an f-string) as Markdown for the page."""
    return Sentence(text)


def show(*items: object, file: TextIO | None = None) -> None:
    """Write each item to `file` (standard output) as a reader should see it: an exception as
    `TypeName: message`, anything else as its str(), wrapped at words to kit.tables.WIDTH columns
    (an error message is one long line, which a notebook would break in the middle of a word)."""
    out = file if file is not None else sys.stdout
    for item in items:
        text = f"{type(item).__name__}: {item}" if isinstance(item, BaseException) else str(item)
        out.write(tables.wrap(text) + "\n")


def no_conclusion(reasons: Sequence[str]) -> Sentence:
    """The sentence a flagged run gets instead of a direction."""
    return Sentence("No conclusion can be drawn from this run: " + "; ".join(reasons) + ".")


def flags(timings: Sequence[Timing]) -> list[str]:
    """Why these timings cannot be compared: each warning once, with the timings it applies to
    ("a and b: machine busy: ..."); empty when every timing is clean."""
    by_warning: dict[str, list[Any]] = {}
    for t in timings:
        for w in t.warnings:
            by_warning.setdefault(w, []).append(t.name)  # a name may be a key: F = 1, 2, or (mode, clients)
    return [f"{join_labels(names)}: {w}" for w, names in by_warning.items()]


def _range(t: Timing) -> tuple[float, float]:
    return min(t.seconds), max(t.seconds)


def compare_timings(a: Timing, b: Timing, unit: str = "per call") -> Sentence:
    """Which of two timings was faster and by how much, or why that cannot be said."""
    for t in (a, b):
        if not t.seconds:
            raise ValueError(f"compare_timings: {t.name!r} has no repeats; measure it first")
    flagged = flags([a, b])
    if flagged:
        return no_conclusion(flagged)
    fast, slow = (a, b) if a.median <= b.median else (b, a)
    fast_name, slow_name = label(fast.name), label(slow.name)
    (_, fast_hi), (slow_lo, _) = _range(fast), _range(slow)
    spreads = f"spread {format_spread(fast.spread)} and {format_spread(slow.spread)}"
    if slow_lo <= fast_hi:
        return Sentence(
            f"**{fast_name}** took {format_seconds(fast.median)} {unit} and **{slow_name}** "
            f"{format_seconds(slow.median)}: the same within the spread of the repeats (their ranges overlap; "
            f"{spreads})."
        )
    ratio = slow.median / fast.median
    return Sentence(
        f"**{fast_name}** took {format_seconds(fast.median)} {unit} and **{slow_name}** "
        f"{format_seconds(slow.median)}: {fast_name} was {ratio:.3g}x faster "
        f"(medians of {min(len(a.seconds), len(b.seconds))} repeats; {spreads})."
    )


def fraction(part: float, whole: float, digits: int = 2) -> str:
    """`part` as a percentage of `whole`, with enough digits to be honest about small shares:
    fraction(0.055, 11.0) -> '0.5%', fraction(1, 3) -> '33%'."""
    if whole == 0:
        raise ValueError("fraction: the whole is 0")
    share = 100 * part / whole
    if share == 0 or abs(share) >= 10:
        return f"{share:.0f}%"
    return f"{share:.{digits}g}%"


def gap(value: float, reference: float) -> str:
    """How far `value` lies from `reference`, in words with the percentage, instead of "close to":
    gap(232, 287) -> '19% below it', gap(330, 300) -> '10% above it', gap(300.4, 300) -> 'the
    same to within 1%'."""
    if reference == 0:
        raise ValueError("gap: the reference is 0")
    share = value / reference - 1
    if round(abs(share) * 100) == 0:
        return "the same to within 1%"
    return f"{abs(share):.0%} {'below' if share < 0 else 'above'} it"


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the chance of a split at least this uneven of the
    `only_a + only_b` examples exactly one model got right, if both models were equally good."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def accuracy_difference(
    correct_a: Any, correct_b: Any, name_a: str, name_b: str, alpha: float = 0.05, what: str = "test examples"
) -> Sentence:
    """Two models' accuracies on the same examples (`correct_*`: one bool per example), with the
    difference called noise unless McNemar's exact test says otherwise. Counts carry thousands
    separators, as every table prints them (kit.tables.number).

    >>> print(accuracy_difference([True] * 1442 + [False] * 558, [True] * 1442 + [False] * 558, "A", "B"))
    **A** classified 1,442 of 2,000 test examples correctly (72.1%), **B** 1,442 (72.1%): no difference.
    """
    ca, cb = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if ca.shape != cb.shape or ca.ndim != 1:
        raise ValueError(
            f"accuracy_difference: one bool per example for both models, got shapes {ca.shape} and {cb.shape}"
        )
    n = ca.size
    if n == 0:
        raise ValueError("accuracy_difference: no examples")
    ra, rb = int(ca.sum()), int(cb.sum())
    only_a, only_b = int((ca & ~cb).sum()), int((cb & ~ca).sum())
    p = mcnemar_p(only_a, only_b)
    head = (
        f"**{name_a}** classified {ra:,} of {n:,} {what} correctly ({ra / n:.1%}), **{name_b}** {rb:,} ({rb / n:.1%})"
    )
    gap = abs(ra - rb)
    if gap == 0 and only_a == only_b:
        return Sentence(f"{head}: no difference.")
    if p >= alpha:
        return Sentence(
            f"{head}: {gap:,} of {n:,} examples apart, which is noise at this size "
            f"(McNemar's exact test: p = {p:.2g}, not below {alpha:g})."
        )
    better = name_a if ra > rb else name_b
    return Sentence(
        f"{head}: {better} is better by {gap:,} of {n:,} examples, more than chance explains "
        f"(McNemar's exact test: p = {p:.2g} < {alpha:g})."
    )
