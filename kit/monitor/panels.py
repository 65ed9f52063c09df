"""How a live panel shows itself, and the two panels that count steps.

A panel (`Panel`) is displayed once in a notebook kernel, with a display id, and redrawn through
its widgets' `.value` at most every `interval` seconds (`Throttle`); outside a kernel it writes
throttled plain-text lines (`emit`). When it closes it replaces itself with `static()`, a
`StaticPanel` of its final state, so a saved notebook shows numbers instead of a widget's text.
`TimingPanel` times iterations, `Progress` says how far a long cell has got; the memory and
training panels built on the same base are in kit.widgets, which re-exports these.

While it is live, a widget panel says at its head whether the cell that shows it still runs
(kit.panel_live: JupyterLab's status bar can read "Idle" meanwhile). Every panel's text keeps a
number and its unit on one line (`keep_units`: "18 s" with a no-break space), so a narrow output
never wraps a lone "s" onto a line of its own.

    >>> from kit.monitor.panels import TimingPanel
    >>> timer = TimingPanel(total=3, label="loop", interval=3600, text_interval=3600)
    >>> for _ in range(3):
    ...     timer.tick()
    loop: 1/3 in ...
    >>> timer.close()
    loop: 3/3 in ...
"""

from __future__ import annotations

import html
import re
import statistics
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from kit.core.arguments import whole
from kit.measurement.measure import LoadMeter, unchecked_note
from kit.monitor import panel_live

if TYPE_CHECKING:
    from kit.nn.network import Network

T = TypeVar("T")

__all__ = [
    "PANEL_STYLE",
    "Panel",
    "Progress",
    "StaticPanel",
    "Throttle",
    "TimingPanel",
    "bar_html",
    "emit",
    "format_bytes",
    "in_notebook",
    "keep_units",
    "note_html",
    "panel_html",
    "table_html",
]

PANEL_STYLE = (
    "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:12px;border:1px solid #ddd;"
    "border-radius:4px;padding:6px 10px;margin:4px 0;display:inline-block;max-width:100%"
)


def emit(text: str) -> None:
    """A panel's plain-text line outside a notebook kernel: on stdout, flushed at once."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, Binder), where widgets can render."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


# a number, the spaces after it, and a unit a panel prints: the spaces become one no-break space
UNITS = ("ns", "µs", "μs", "ms", "s", "min", "B", "KiB", "MiB", "GiB")
_NUMBER_UNIT = re.compile(r"(\d)[ \t]+(?=(?:" + "|".join(UNITS) + r")(?![\w/]))")


def keep_units(text: str) -> str:
    """`text` with a no-break space between every number and its unit, so a browser never breaks
    the line between them ("in 18" on one line, "s" on the next); words and counts wrap as before.

        >>> keep_units("1350 of 1350 iterations in 2.1 s; mean step 1.57 ms, RSS 70.0 MiB") == (
        ...     "1350 of 1350 iterations in 2.1\u00a0s; mean step 1.57\u00a0ms, RSS 70.0\u00a0MiB")
        True
        >>> keep_units("3 steps, 2 spills, 5 s/step")  # 's' of 'steps', 'spills' and a rate: no unit
        '3 steps, 2 spills, 5 s/step'
    """
    return _NUMBER_UNIT.sub("\\1\u00a0", text)


def panel_html(text: str) -> str:
    """A panel's line of plain text as the HTML a widget or a final table shows: escaped, each
    number kept beside its unit (`keep_units`)."""
    return keep_units(html.escape(text))


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class StaticPanel:
    """A panel's final state as an ordinary output: HTML for notebooks and pages, text elsewhere."""

    def __init__(self, html_text: str, text: str) -> None:
        self.html, self.text = html_text, text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def bar_html(fraction: float, width: int = 160) -> str:
    f = min(1.0, max(0.0, fraction))
    return (
        f'<span style="display:inline-block;width:{width}px;height:9px;background:#eee;border-radius:2px;'
        f'vertical-align:middle"><span style="display:block;width:{f * 100:.1f}%;height:100%;'
        f'background:#36c;border-radius:2px"></span></span>'
    )


def _cell(content: str) -> str:
    """A panel's table cell: a bar keeps its width, text wraps at spaces (a long line of numbers
    made progress panels wider than the notebook column), never inside a word."""
    wrap = "nowrap" if content.startswith("<span") else "normal"
    return f'<td style="padding:1px 10px 1px 0;vertical-align:top;white-space:{wrap}">{content}</td>'


def note_html(note: str) -> str:
    """A line under a panel's table: grey, red where it says the panel's times are flagged."""
    color = "#c00" if "flagged" in note else "#666"
    return f'<span style="font-size:11px;color:{color}">{panel_html(note)}</span>'


def table_html(title: str, header: list[str], rows: list[list[str]], footer: str = "") -> str:
    th = "".join(f'<th style="text-align:left;padding:1px 10px 1px 0">{h}</th>' for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    foot = f'<div style="margin-top:3px">{footer}</div>' if footer else ""
    return (
        f'<div class="kit-panel" style="{PANEL_STYLE}"><b>{title}</b>'
        f'<table style="border-collapse:collapse;margin-top:3px">{"<tr>" + th + "</tr>" if header else ""}'
        f"{body}</table>{foot}</div>"
    )


def throttle(where: str, interval: float, use_widgets: bool, text_interval: float) -> Throttle:
    """A panel's redraw throttle: `interval` in a notebook, `text_interval` in a terminal, both
    checked whichever is used (a script that runs in a terminal runs in a notebook too)."""
    shown, printed = Throttle(interval, where), Throttle(text_interval, where)
    return shown if use_widgets else printed


class Throttle:
    def __init__(self, interval: float, where: str = "panel") -> None:
        # seconds between redraws; infinity: only forced ones (a final line)
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval >= 0:
            raise ValueError(f"{where}(interval={interval!r}): seconds between redraws, a number >= 0 (inf: never)")
        self.interval = float(interval)
        self.last = float("-inf")
        self.updates = 0  # how many redraws were actually sent

    def ready(self, force: bool) -> bool:
        now = time.monotonic()
        if force or now - self.last >= self.interval:
            self.last = now
            self.updates += 1
            return True
        return False


class Panel:
    """Shows `self.widget` once (with a display id), and at `close()` replaces it with
    `self.static()`; in plain-text mode prints `self.last_text` lines instead."""

    widget: Any = None
    last_text = ""

    def _show(self, display: bool) -> None:
        self._handle = None
        self._closed = False
        self.badge: Any = None  # the head's "running" badge (kit.panel_live), where it is displayed
        self.load = LoadMeter()  # other processes' CPU use while the panel ran: said under its times
        if display and self.use_widgets:
            from IPython.display import display as show

            self._badge_state, self.badge = panel_live.RUNNING, panel_live.add_badge(self.widget)
            self._handle = show(self.widget, display_id=True)
            panel_live.track(self)

    def _live_badge(self) -> None:
        """At a redraw: the badge says whether a cell is running now (kit.panel_live.state_now)."""
        if self.badge is not None and not self._closed:
            self.set_live_state(panel_live.state_now())

    def set_live_state(self, state: str) -> None:
        """Show `state` (kit.panel_live: RUNNING, ENDED, BACKGROUND) in the badge, if it changed."""
        if self.badge is not None and state != self._badge_state:
            self._badge_state = state
            self.badge.value = panel_live.badge_html(state)

    def static(self) -> StaticPanel:
        raise NotImplementedError

    def _finish(self) -> None:
        """The final state stays on the page as ordinary HTML (once)."""
        if self._closed:
            return
        self._closed = True
        panel_live.untrack(self)
        if self._handle is not None:
            self._handle.update(self.static())
            self.widget.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]


class TimingPanel(Panel):
    """Iteration time (last, median of the recent window) and rate; a progress bar when the
    total is known."""

    def __init__(
        self,
        total: int | None = None,
        label: str = "iterations",
        interval: float = 0.25,
        text_interval: float = 2.0,
        window: int = 50,
        display: bool = True,
        widgets: bool | None = None,
    ) -> None:
        self.total = None if total is None else whole("TimingPanel", "total", total, 0)
        self.label = label
        self.use_widgets = in_notebook() if widgets is None else widgets
        window = whole("TimingPanel", "window", window)
        self._throttle = throttle(type(self).__name__, interval, self.use_widgets, text_interval)
        self.count = 0
        self.times: deque[float] = deque(maxlen=window)
        self._start = self._last = time.perf_counter()
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total or 1), layout=w.Layout(width="160px"))
            self._info = w.HTML(value="")
            self.widget = w.HBox([w.HTML(value=f"<b>{panel_html(label)}</b>&nbsp;"), self._bar, self._info])
        self._show(display)

    def tick(self, n: int = 1) -> None:
        now = time.perf_counter()
        self.times.append((now - self._last) / n)
        self._last = now
        self.count += n
        self._redraw(force=False)

    def _redraw(self, force: bool) -> None:
        if not self._throttle.ready(force):
            return
        self.last_text = f"{self.label}: {self._numbers()}"
        if self.use_widgets:
            self._bar.value = float(min(self.count, self.total) if self.total else 1)
            self._info.value = "&nbsp;" + panel_html(self._numbers())  # the label is already beside the bar
            self._live_badge()
        else:
            emit(self.last_text)

    def _numbers(self) -> str:
        if not self.times:
            return "0"
        med = statistics.median(self.times)
        elapsed = time.perf_counter() - self._start
        of = f"/{self.total}" if self.total else ""
        # the rate is the mean over the whole run; the median only the recent window's: under load
        # the two part (a slow tail raises the mean), so each says what it is
        mean = elapsed / max(self.count, 1)
        return (
            f"{self.count}{of} in {elapsed:.1f} s (mean {mean * 1e3:.2f} ms, {self.count / max(elapsed, 1e-9):.1f}/s); "
            f"last {self.times[-1] * 1e3:.2f} ms, median of the last {len(self.times)} {med * 1e3:.2f} ms"
        )

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    def static(self) -> StaticPanel:
        frac = self.count / self.total if self.total else 1.0
        row = [f"<b>{panel_html(self.label)}</b>", bar_html(frac), panel_html(self._numbers())]
        note = unchecked_note(self.load.read())
        return StaticPanel(table_html("", [], [row], note_html(note)), f"{self.last_text}\n  {note}")

    def close(self) -> None:
        self._redraw(force=True)
        self._finish()


class Progress(Panel):
    """How far a long cell has got: what is being measured, steps done of the total, time spent
    and about how long is left (a straight-line guess from the steps so far). Call it as
    `bar(done, total, note)` (what kit.measure.compare's `progress=` calls), `bar.tick()`, wrap an
    iterable with `bar.iter(items)`, or pass it to `fit(..., listeners=[bar])`; at `close()` (or
    the end of a `with` block) it leaves its final line as static HTML, so a stored chapter shows
    what ran and how long it took.

        >>> from kit.measurement.measure import compare
        >>> with Progress("timing two sums") as bar:
        ...     _ = compare({"a": lambda: sum(range(100)), "b": lambda: sum(range(200))},
        ...                 min_time=0.001, repeats=3, progress=bar)
        timing two sums: 1/10, ... left (warm-up: a)
        timing two sums: 10/10 steps (100%) in ... s
        >>> bar.done, bar.total     # 2 warm-ups, 2 calibrations, 3 repeats of 2 variants
        (10, 10)
    """

    def __init__(
        self,
        what: str,
        total: int | None = None,
        interval: float = 0.25,
        text_interval: float = 5.0,
        display: bool = True,
        widgets: bool | None = None,
    ) -> None:
        if not isinstance(what, str) or not what.strip():
            raise ValueError(f"Progress(what={what!r}): say what is being measured, e.g. 'timing the three modes'")
        if total is not None:
            total = whole("Progress", "total", total, 0, what=" (steps), or None while unknown")
        self.what, self.total, self.done, self.note = what, total, 0, ""
        self.stopped = ""  # what stopped the work (the exception's name) where a `with` block raised
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = throttle(type(self).__name__, interval, self.use_widgets, text_interval)
        self._start = time.perf_counter()
        self._ended: float | None = None
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total or 1), layout=w.Layout(width="160px"))
            self._info = w.HTML(value="")
            self.widget = w.HBox([w.HTML(value=f"<b>{panel_html(what)}</b>&nbsp;"), self._bar, self._info])
        self._show(display)

    def __call__(self, done: int, total: int | None = None, note: str = "") -> None:
        """`done` steps of `total` (None: the total given before) finished; `note`: the step now."""
        if total is not None:
            self.total = whole("Progress", "total", total, 0)
        self.done, self.note = whole("Progress", "done", done, 0), note
        self._redraw(force=False)

    def tick(self, n: int = 1, note: str = "") -> None:
        self(self.done + n, note=note)

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        """A training listener: one step per iteration (with Spark or ParallelWrapper, one per
        worker and round), the epoch as the note."""
        self.tick(note=f"epoch {epoch + 1}")

    def iter(self, items: Iterable[T], total: int | None = None) -> Iterator[T]:
        """Each item of `items`, counting a step after each (the total from len() when it has one)."""
        if total is None and hasattr(items, "__len__"):
            total = len(items)
        if total is not None:
            self.total = total
        for item in items:
            yield item
            self.tick()

    @property
    def elapsed(self) -> float:
        return (self._ended or time.perf_counter()) - self._start

    def _numbers(self) -> str:
        spent = self.elapsed
        if self._ended is not None and self.stopped:
            of = f"/{self.total}" if self.total is not None else ""
            return f"stopped after {self.done}{of} steps, {_duration(spent)}: {self.stopped}"
        if self._ended is not None:
            of = f"/{self.total}" if self.total is not None else ""
            pct = f" ({self.done / self.total:.0%})" if self.total else ""
            return f"{self.done}{of} steps{pct} in {_duration(spent)}"
        if self.total is None:
            text = f"{self.done} steps, {_duration(spent)}"
        else:
            text = f"{self.done}/{self.total}, {_duration(spent)}"
            if 0 < self.done < self.total:
                text += f", about {_duration(spent * (self.total - self.done) / self.done)} left"
        return text + (f" ({self.note})" if self.note else "")

    def _redraw(self, force: bool) -> None:
        if not self._throttle.ready(force):
            return
        self.last_text = f"{self.what}: {self._numbers()}"
        if self.use_widgets:
            self._bar.max = float(self.total or 1)
            self._bar.value = float(min(self.done, self.total) if self.total else 0)
            self._info.value = "&nbsp;" + panel_html(self._numbers())
            self._live_badge()
        else:
            emit(self.last_text)

    def static(self) -> StaticPanel:
        frac = self.done / self.total if self.total else 1.0
        bar = '<span style="color:#c00">stopped</span>' if self.stopped else bar_html(frac)
        row = [f"<b>{panel_html(self.what)}</b>", bar, panel_html(self._numbers())]
        return StaticPanel(table_html("", [], [row]), self.last_text)

    def close(self) -> None:
        if self._ended is None:
            self._ended = time.perf_counter()
        self._redraw(force=True)
        self._finish()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """The end of a `with` block closes the line; where the block raised, the line says that it
        stopped, after how many steps and what stopped it, instead of a bar left where the work
        broke off as if the rest were still to come.

            >>> with Progress("starting", total=1, widgets=False, text_interval=3600) as bar:
            ...     raise RuntimeError("no Java")
            Traceback (most recent call last):
            RuntimeError: no Java
            >>> bar.last_text.startswith("starting: stopped after 0/1 steps"), bar.stopped
            (True, 'RuntimeError')
        """
        if exc_type is not None and self._ended is None:
            self.stopped = exc_type.__name__
        self.close()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
