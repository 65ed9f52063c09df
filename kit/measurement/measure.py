"""Measurements you can trust: repeated, interleaved, median and spread, flagged when unreliable.

    >>> import kit
    >>> from kit import measure
    >>> a, b = kit.ones((100,)), kit.ones((100,))
    >>> ra, rb = a.numpy(), b.numpy()                   # the same numbers as plain NumPy arrays
    >>> t = measure.compare({"kit": lambda: a + b, "raw": lambda: ra + rb}, min_time=0.02)  # interleaved
    >>> for name, timing in t.items():
    ...     print(name, timing)                         # e.g. kit 12.3 us per call ±4% (5 repeats x 20000 calls)
    kit ... per call ±...% (5 repeats x ... calls)...
    raw ... per call ±...% (5 repeats x ... calls)...
    >>> noisy = measure.Timing("noisy", [1.0, 2.0, 1.0], number=10)   # one repeat twice as slow
    >>> noisy.reliable, noisy.warnings
    (False, ['spread ±50% is wider than ±25%'])
    >>> measure.goal("added time per small op", 1.3, "<=", 2.0, "µs")
    'added time per small op: 1.3 µs -> met (goal <= 2 µs)'

One module for every timing in kit (benchmarks, `compare_devices`, the chapters):

- **Long enough to measure** (`timeit.autorange`): each repeat lasts at least `min_time` seconds.
- **Interleaved**: A, B, C in turn, the order rotated each repeat, so drift hits every variant
  alike; `slices=n` runs each repeat's calls in n parts (calls of microseconds).
- **Median and spread** (half the range relative to the median, ``±x%``).
- **Flagged, not interpreted**: *unreliable* when other processes used more than `LOAD_LIMIT` of
  the CPU (kit.measurement.load), the spread is wider than `SPREAD_LIMIT`, or a "speedup" exceeds
  the device count (the baseline was slowed). A figure computed from a flagged measurement reads
  "(flagged)" wherever it is printed (`flagged_figure`), and its goal line gives no verdict.
- **Goals** (`goal`, `goal_verdict`: kit.goals, re-exported here) say met, NOT met, or not shown
  where the repeats lie on both sides of the target.
"""

from __future__ import annotations

import enum
import math
import operator
import statistics
import textwrap
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from kit.core.arguments import real, whole
from kit.measurement import tables
from kit.measurement.goals import FLAGGED, NO_VERDICT, flagged_figure, goal, goal_verdict, median_interval
from kit.measurement.load import LOAD_LIMIT, LoadMeter, LoadReading, format_load, machine_load, unchecked_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "FLAGGED",
    "FLAGGED_TITLE",
    "LOAD_LIMIT",
    "MIN_TIME",
    "NO_VERDICT",
    "SPREAD_LIMIT",
    "LoadMeter",
    "LoadReading",
    "Timing",
    "autorange",
    "compare",
    "flagged_figure",
    "format_load",
    "format_seconds",
    "format_spread",
    "goal",
    "goal_verdict",
    "histogram_bins",
    "join_labels",
    "label",
    "machine_load",
    "mark_flagged",
    "measure",
    "median_interval",
    "speedup_warnings",
    "unchecked_note",
]

MIN_TIME = 0.3  # seconds one timed repeat should last at least (full mode)
SPREAD_LIMIT = 0.25  # half-range / median above which a result is flagged
SPEEDUP_TOLERANCE = 0.05  # a speedup may exceed the device count by this much (timer noise) before it is flagged


def _count(n: int, noun: str) -> str:
    """`1 call`, `3 calls`."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def format_spread(spread: float) -> str:
    """A spread as every table and sentence prints it, `±12%`, on the right side of ±25 %: a
    flagged 25.04 % reads `±25.04%`, never `±25%` (kit.tables.percent).

    >>> [format_spread(s) for s in (0.12, 0.2499, 0.2504)]
    ['±12%', '±25%', '±25.04%']
    """
    return "±" + tables.percent(spread, SPREAD_LIMIT)


def label(name: object) -> str:
    """A timing's name in words. `compare` names each Timing by its key, which may be a tuple of an
    enum and a count: label((InferenceMode.BATCHED, 4)) -> 'BATCHED, 4'; label("plain") -> 'plain'."""
    if isinstance(name, tuple):
        return ", ".join(label(part) for part in name)
    if isinstance(name, enum.Enum):
        return str(name.value)
    return str(name)


def join_labels(names: Sequence[object]) -> str:
    """Timings' names in one phrase: 'a', 'a and b', 'a, b and c'; a comma inside a name (a tuple
    key's label) makes the separators semicolons: 'BATCHED, 4; SEQUENTIAL, 4 and BATCHED, 16'."""
    words = [label(n) for n in names]
    if len(words) < 2:
        return "".join(words)
    sep = "; " if any("," in w for w in words) else ", "
    return sep.join(words[:-1]) + " and " + words[-1]


def format_seconds(seconds: float) -> str:
    """`1.23 s`, `45.6 ms`, `7.89 µs`: the unit every table of kit heads its column with."""
    if seconds != seconds:  # NaN
        return "nan"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale or unit == "µs":
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


@dataclass
class Timing:
    """Seconds per call of one variant: one entry per timed repeat of `number` calls."""

    name: str
    seconds: list[float]
    number: int
    load: float = 0.0  # other processes' share of the machine while measured (0..1)
    extra_warnings: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def spread(self) -> float:
        """Half the range of the repeats relative to the median (0.04 = ±4%)."""
        if len(self.seconds) < 2 or not self.median:
            return 0.0
        return (max(self.seconds) - min(self.seconds)) / 2 / self.median

    @property
    def warnings(self) -> list[str]:
        out = []
        if not all(math.isfinite(s) and s >= 0 for s in self.seconds):  # no clock gives these: no figure either
            out.append(f"timings that are not finite or are negative: {[s for s in self.seconds if not s >= 0]}")
        if self.load > LOAD_LIMIT:
            used = format_load(self.load)
            out.append(f"machine busy: other processes used {used} of the CPU while this was measured")
        if self.spread > SPREAD_LIMIT:
            out.append(f"spread {format_spread(self.spread)} is wider than ±{SPREAD_LIMIT:.0%}")
        return out + self.extra_warnings

    @property
    def reliable(self) -> bool:
        return not self.warnings

    def __str__(self) -> str:
        text = (
            f"{format_seconds(self.median)} per call {format_spread(self.spread)} "
            f"({_count(len(self.seconds), 'repeat')} x {_count(self.number, 'call')})"
        )
        if self.reliable:
            return text
        # the flag on lines of its own, wrapped at spaces: a notebook wraps a long output line
        # anywhere, mid-word, and a terminal at its edge
        flag = textwrap.wrap(
            "UNRELIABLE: " + "; ".join(self.warnings), 96, initial_indent="  ", subsequent_indent="    "
        )
        return "\n".join([text, *flag])


def _run(fn: Callable[[], object], number: int, sync: Callable[[], object] | None) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    if sync is not None:
        sync()
    return time.perf_counter() - t0


def autorange(
    fn: Callable[[], object],
    min_time: float = MIN_TIME,
    sync: Callable[[], object] | None = None,
    max_number: int = 10**7,
) -> int:
    """Calls per repeat so one repeat lasts at least `min_time` (1, 2, 5, 10, 20, 50, ...),
    as `timeit.Timer.autorange` does."""
    min_time = real("autorange", "min_time", min_time, 0, low_open=True, what=" (seconds a repeat lasts at least)")
    max_number = whole("autorange", "max_number", max_number)
    i = 1
    while True:
        for m in (1, 2, 5):
            number = i * m
            if number >= max_number or _run(fn, number, sync) >= min_time:
                return min(number, max_number)
        i *= 10


def _compare_args(
    fns: dict[str, Callable[[], object]],
    min_time: float,
    repeats: int,
    number: int | dict[str, int] | None,
    warmup: bool | int,
) -> tuple[int, dict[str, int] | None, int]:
    """`compare`'s arguments checked at the call: (repeats, the calls per repeat given, warm-ups)."""
    if not fns:
        raise ValueError("compare(fns={}): give at least one variant, e.g. {'kit': f, 'raw': g}")
    for k, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"compare(fns): variant {k!r} is a {type(fn).__name__}, not a callable; pass f, not f()")
    repeats = _whole("repeats", repeats, 1, "a positive integer (5 or more for a spread)")
    if isinstance(min_time, bool) or not isinstance(min_time, int | float) or not 0 < min_time < math.inf:
        raise ValueError(f"compare(min_time={min_time!r}): seconds a timed region lasts at least, a number > 0")
    numbers_given = _numbers(number, fns)
    try:  # True: one call, False: none (a bool is an int), NumPy integers too
        warmups = operator.index(warmup)
    except TypeError:
        warmups = -1
    if warmups < 0:
        raise ValueError(f"compare(warmup={warmup!r}): True, False or a number of untimed calls >= 0")
    return repeats, numbers_given, warmups


def _interleaved(
    fns: dict[str, Callable[[], object]],
    numbers: dict[str, int],
    repeats: int,
    sync: Callable[[], object] | None,
    step: Callable[[str], None],
    slices: int = 1,
) -> dict[str, Timing]:
    """The timed repeats: each runs every variant once, in an order rotated per repeat; with
    `slices`, each variant's calls of a repeat in that many parts, the variants taking turns part
    by part (a part of k calls of `number`: the k-th share, so the parts add up to `number`)."""
    names = list(fns)
    out = {k: Timing(k, [], numbers[k]) for k in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        spent = dict.fromkeys(order, 0.0)
        for part in range(slices):
            for k in order:
                calls = numbers[k] * (part + 1) // slices - numbers[k] * part // slices
                if calls:
                    spent[k] += _run(fns[k], calls, sync)
        for k in order:
            out[k].seconds.append(spent[k] / numbers[k])
            step(f"repeat {r + 1} of {repeats}: {k}")
    return out


def _calls_per_repeat(
    fns: dict[str, Callable[[], object]],
    min_time: float,
    sync: Callable[[], object] | None,
    same_number: bool,
    step: Callable[[str], None],
) -> dict[str, int]:
    """Each variant's calls per repeat, found by `autorange` (the largest for all, `same_number`)."""
    numbers = {}
    for k, fn in fns.items():
        numbers[k] = autorange(fn, min_time, sync)
        step(f"calls per repeat: {k}")
    return dict.fromkeys(fns, max(numbers.values())) if same_number else numbers


def compare(
    fns: dict[str, Callable[[], object]],
    min_time: float = MIN_TIME,
    repeats: int = 5,
    number: int | dict[str, int] | None = None,
    same_number: bool = False,
    sync: Callable[[], object] | None = None,
    warmup: bool | int = True,
    children_are_ours: bool = False,
    progress: Callable[[int, int, str], object] | None = None,
    slices: int = 1,
) -> dict[str, Timing]:
    """Time every variant, interleaved: each repeat runs all variants once, in an order rotated
    per repeat. `number` fixes the calls per repeat (else `autorange` finds them per variant;
    `same_number=True` gives every variant the largest, e.g. so each trains equally long).
    `warmup`: untimed calls of each variant first (True: one; a workload whose workspaces learn
    their sizes over several cycles, as SEPARATE's do, needs as many).
    `children_are_ours`: as in `machine_load`, for variants that work in child processes.
    `progress(done, total, note)` (a `kit.widgets.Progress`) is called after each warm-up,
    calibration and timed run, between timed regions: it never runs inside one.
    `slices=n` cuts each variant's calls of a repeat into n parts run in turn, so calls of
    microseconds meet the same moments of the machine as the other variants'."""
    repeats, numbers_given, warmups = _compare_args(fns, min_time, repeats, number, warmup)
    slices = _whole("slices", slices, 1, "a whole number of parts per repeat >= 1")
    calibrate = number is None
    total = len(fns) * (warmups + int(calibrate) + repeats)
    steps = iter(range(1, total + 1))

    def step(note: str) -> None:
        if progress is not None:
            progress(next(steps), total, note)

    with machine_load(children_are_ours) as load:
        for _ in range(warmups):  # caches, lazy imports, first-touch page faults, a workspace's learning
            for k, fn in fns.items():
                _run(fn, 1, sync)
                step(f"warm-up: {k}")
        numbers = _calls_per_repeat(fns, min_time, sync, same_number, step) if calibrate else numbers_given
        out = _interleaved(fns, numbers, repeats, sync, step, slices)
    for t in out.values():
        t.load = load.others
    return out


def _whole(name: str, value: object, low: int, what: str) -> int:
    """`value` as a whole number >= `low` (NumPy's integers too), or a ValueError naming it: a float
    (2.7) is refused, never truncated; a bool is no count."""
    try:
        n = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        n = None
    if n is None or n < low:
        raise ValueError(f"compare({name}={value!r}): must be {what}")
    return n


def _numbers(number: object, fns: Mapping[str, object]) -> dict[str, int] | None:
    """Calls per repeat for each variant, from `number` (None: autorange finds them)."""
    what = "a whole number of calls per repeat >= 1, a dict of them per variant, or None (autorange)"
    if number is None:
        return None
    if isinstance(number, dict):
        missing, extra = [k for k in fns if k not in number], [k for k in number if k not in fns]
        if missing or extra:
            said = (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else "")
            raise ValueError(
                f"compare(number=...): the dict gives calls for {sorted(map(str, number))} but the variants are "
                f"{sorted(map(str, fns))}{said}"
            )
        return {k: _whole(f"number[{k!r}]", number[k], 1, what) for k in fns}
    return dict.fromkeys(fns, _whole("number", number, 1, what))


def measure(fn: Callable[[], object], name: str = "", **kw: Any) -> Timing:
    """One variant: `compare({name: fn}, **kw)[name]`."""
    return compare({name: fn}, **kw)[name]


# ---------------------------------------------------------------------------------------
# verdicts


def speedup_warnings(speedup: float, devices: int, shared: bool = False, cores: int | None = None) -> list[str]:
    """Why a measured speedup of `devices` workers cannot be taken at face value.

    N devices cannot be more than N times faster than one; on shared cores (logical devices of
    one CPU) the workers cannot beat the cores they share either. A larger figure means the
    baseline was slowed (contention, a busy machine), not that the workers were fast."""
    out = []
    limit = devices * (1 + SPEEDUP_TOLERANCE)
    if speedup > limit:
        out.append(
            f"speedup {speedup:.2f}x exceeds the {devices} device(s): the baseline was slowed, not a real effect"
        )
        if shared:
            out.append(f"efficiency {speedup / devices:.2f} > 1 on shared cores: impossible on one device's hardware")
    elif shared and cores is not None and speedup > max(1, min(devices, cores)) * (1 + SPEEDUP_TOLERANCE):
        out.append(f"speedup {speedup:.2f}x on {cores} shared core(s) exceeds what the cores allow")
    return out


MAX_BIN_SHARE = 0.25  # the most of the values one bin of `histogram_bins` may hold
MAX_BINS = 240


def histogram_bins(values: ArrayLike, max_share: float = MAX_BIN_SHARE, max_bins: int = MAX_BINS) -> np.ndarray:
    """Bin edges for a histogram of times (or any positive figures) that shows their distribution:
    log-spaced from the smallest value to the largest, so a few slow outliers neither drop out nor
    squeeze the body into one bin, and as many as it takes for no bin to hold more than `max_share`
    of the values (from the Freedman-Diaconis width of the logarithms, doubled until it holds; at most
    `max_bins`, where values that are equal may still share one). Plot with a log x axis.

        >>> rng = np.random.default_rng(0)
        >>> ms = np.concatenate([rng.normal(0.45, 0.02, 410), rng.uniform(1, 6, 40)])  # a body and spikes
        >>> counts, _ = np.histogram(ms, histogram_bins(ms))
        >>> bool(counts.max() <= 0.25 * len(ms)), int(counts.sum()) == len(ms)
        (True, True)
        >>> histogram_bins([2.0, 2.0])          # one value: one bin around it
        array([1.98, 2.02])
    """
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0 or not np.isfinite(x).all() or (x <= 0).any():
        raise ValueError(
            f"histogram_bins: give one or more finite values > 0 (times), got {x.size} values"
            + (f", the smallest {x.min():g}" if x.size and np.isfinite(x).all() else "")
            + (", some NaN or infinite" if x.size and not np.isfinite(x).all() else "")
        )
    max_share = real("histogram_bins", "max_share", max_share, 0, 1, low_open=True, what=" (a share of the values)")
    max_bins = whole("histogram_bins", "max_bins", max_bins)
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        return np.array([lo * 0.99, hi * 1.01])
    logs = np.log(x)
    span = math.log(hi) - math.log(lo)
    q75, q25 = np.percentile(logs, [75, 25])
    width = 2 * (q75 - q25) / x.size ** (1 / 3)  # Freedman-Diaconis, on the logarithms
    n = min(max_bins, max(10, math.ceil(span / width) if width > 0 else 10))
    while True:
        edges = np.geomspace(lo, hi, n + 1)
        edges[0], edges[-1] = lo, hi  # exactly the extremes: np.histogram counts both
        counts, _ = np.histogram(x, edges)
        if counts.max() <= max_share * x.size or n >= max_bins:
            return edges
        n = min(max_bins, 2 * n)


FLAGGED_TITLE = "flagged by kit.measure: no time can be read from this panel"


def mark_flagged(ax: Axes, timings: Iterable[Timing] | Mapping[object, Timing], title: str | None = None) -> bool:
    """Mark a panel of timings that kit.measure flagged, so a figure cannot be read as a result
    that its own verdict refuses: a red title saying so (under the panel's own title, kept as its
    first line). When every timing is flagged the title says no time can be read from the panel and
    its lines, bars and error bars fade; when only some are, it names those (the others stand, as
    the verdicts under the figure read them). `timings`: Timing objects, or a mapping of them.
    Returns whether any was flagged (nothing changes when none was).

        >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
        >>> _, ax = plt.subplots()
        >>> mark_flagged(ax, [Timing("plain", [1.0, 1.01], 1, load=0.6)], "time per step")
        True
        >>> ax.get_title()
        'time per step\\nflagged by kit.measure: no time can be read from this panel'
        >>> _, ax = plt.subplots()
        >>> mark_flagged(ax, [Timing("1 client", [1.0, 2.0], 1), Timing("16 clients", [1.0, 1.01], 1)], "throughput")
        True
        >>> ax.get_title()
        'throughput\\nflagged by kit.measure: 1 client; read no time from it'
    """
    found = list(timings.values()) if isinstance(timings, dict) else list(timings)
    bad = [t for t in found if not t.reliable]
    if not bad:
        return False
    if len(bad) == len(found):
        flag = FLAGGED_TITLE
        for artist in [*ax.lines, *ax.patches, *ax.collections]:
            artist.set_alpha(0.45)
    else:  # the clean timings stand: name the flagged ones, fade nothing
        names = join_labels([t.name for t in bad])  # a Timing's name may be its key: F = 1, 2, ...
        flag = tables.wrap(
            f"flagged by kit.measure: {names}; read no time from {'it' if len(bad) == 1 else 'them'}", 60
        )
    head = title if title is not None else ax.get_title()
    ax.set_title(f"{head}\n{flag}" if head else flag, fontsize=9, color="#c00")
    return True
