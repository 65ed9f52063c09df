"""Live panels: memory (workspaces, heap, cache, RSS, GPU), timing, training and per-worker rows.

    >>> import kit
    >>> x = kit.randn((64, 32)); w = kit.randn((32, 10))
    >>> ws = kit.get_workspace_for_current_thread(name="PANEL")
    >>> panel = kit.widgets.MemoryPanel()          # shows itself in a notebook; plain-text lines elsewhere
    memory: ...PANEL 0 B/0 B (peak 0 B, spills 0, cycles 0)...heap allocs ...
    >>> timer = kit.widgets.TimingPanel(total=100, label="workspace loop")
    >>> for i in range(100):
    ...     with ws:
    ...         h = (x @ w).tanh()
    ...     redrawn = panel.update()               # throttled: True a few times per second at most
    ...     timer.tick()
    workspace loop: 1/100 in ...
    >>> panel.close(); timer.close()               # the final state, always
    memory: ...PANEL 0 B/... cycles 100)...
    workspace loop: 100/100 in ...
    >>> ws.destroy()

Training panels are listeners:

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.nn import mlp
    >>> from kit.parallel import ParallelWrapper
    >>> train, test = load_digits()
    >>> net, it = mlp(64, hidden=(32,), n_out=10), ArrayIterator(train, 64)
    >>> training = kit.widgets.TrainingPanel(total_iterations=2 * len(it))
    memory: ...
    >>> net.fit(it, epochs=2, listeners=[training])
    training: 1/46 in ...
    <kit.nn.network.Network object at 0x...>
    >>> training.close()
    training: 46/46 in ...
    memory: ...
    loss: last ..., mean of last 20 ..., epochs done 2
    >>> workers = kit.widgets.WorkerPanel(2, total_iterations=len(it))
    >>> with ParallelWrapper(net, workers=2, listeners=[workers]) as pw:
    ...     _ = pw.fit(it, epochs=1)
    1 of 23 iterations in ... s; worker 0: ...
    >>> workers.close()
    23 of 23 iterations in ... s; worker 0: ... iterations, ...; worker 1: ... iterations, ...

In a kernel they are core ipywidgets (FloatProgress, HTML, HBox, VBox) displayed once and then
updated through `.value` (ipywidgets 7.7 on Colab and 8 in JupyterLab 4). When a panel closes it
**replaces itself with a static HTML rendering of its final state** (the same output, updated
through its display id), so a saved notebook, GitHub, nbviewer and an HTML export show the
final numbers instead of a widget's raw `VBox(children=...)` text. Outside a kernel the panels
print throttled plain-text lines, and the final state.
"""

from __future__ import annotations

import html
import statistics
import sys
import time
from collections import deque
from typing import Any

try:
    from kit.readings import stats as _memory_stats
except ImportError:  # kit before readings moved out of kit.memory
    from kit.memory import stats as _memory_stats  # type: ignore[no-redef]

__all__ = [
    "MemoryPanel",
    "Progress",
    "StaticPanel",
    "TimingPanel",
    "TrainingPanel",
    "WorkerPanel",
    "format_bytes",
    "in_notebook",
]

PANEL_STYLE = (
    "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:12px;border:1px solid #ddd;"
    "border-radius:4px;padding:6px 10px;margin:4px 0;display:inline-block;max-width:100%"
)


def _emit(text: str) -> None:
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


def _bar_html(fraction: float, width: int = 160) -> str:
    f = min(1.0, max(0.0, fraction))
    return (
        f'<span style="display:inline-block;width:{width}px;height:9px;background:#eee;border-radius:2px;'
        f'vertical-align:middle"><span style="display:block;width:{f * 100:.1f}%;height:100%;'
        f'background:#36c;border-radius:2px"></span></span>'
    )


def _table_html(title: str, header: list[str], rows: list[list[str]], footer: str = "") -> str:
    th = "".join(f'<th style="text-align:left;padding:1px 10px 1px 0">{h}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="padding:1px 10px 1px 0;white-space:nowrap">{c}</td>' for c in r) + "</tr>"
        for r in rows
    )
    foot = f'<div style="margin-top:3px">{footer}</div>' if footer else ""
    return (
        f'<div class="kit-panel" style="{PANEL_STYLE}"><b>{title}</b>'
        f'<table style="border-collapse:collapse;margin-top:3px">{"<tr>" + th + "</tr>" if header else ""}'
        f"{body}</table>{foot}</div>"
    )


class _Throttle:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = float("-inf")
        self.updates = 0  # how many redraws were actually sent

    def ready(self, force: bool) -> bool:
        now = time.monotonic()
        if force or now - self.last >= self.interval:
            self.last = now
            self.updates += 1
            return True
        return False


class _Panel:
    """Shows `self.widget` once (with a display id), and at `close()` replaces it with
    `self.static()`; in plain-text mode prints `self.last_text` lines instead."""

    widget: Any = None
    last_text = ""

    def _show(self, display: bool) -> None:
        self._handle = None
        self._closed = False
        if display and self.use_widgets:
            from IPython.display import display as show

            self._handle = show(self.widget, display_id=True)

    def static(self) -> StaticPanel:
        raise NotImplementedError

    def _finish(self) -> None:
        """The final state stays on the page as ordinary HTML (once)."""
        if self._closed:
            return
        self._closed = True
        if self._handle is not None:
            self._handle.update(self.static())
            self.widget.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()  # type: ignore[attr-defined]


class MemoryPanel(_Panel):
    """One row per workspace (used/capacity bar, peak, spills), then heap allocations, cache
    hits, process RSS and GPU memory."""

    def __init__(
        self,
        interval: float = 0.25,
        text_interval: float = 2.0,
        display: bool = True,
        widgets: bool | None = None,
        title: str = "kit memory",
    ) -> None:
        self.use_widgets = in_notebook() if widgets is None else widgets
        self.title = title
        self._throttle = _Throttle(interval if self.use_widgets else text_interval)
        self._rows: dict[str, tuple[Any, Any, Any]] = {}
        self._last: dict[str, Any] = {}
        if self.use_widgets:
            import ipywidgets as w

            self._w = w
            self._rows_box = w.VBox([])
            self._footer = w.HTML(value="")
            self.widget = w.VBox([w.HTML(value=f"<b>{html.escape(title)}</b>"), self._rows_box, self._footer])
        self._show(display)
        self.update(force=True)

    def snapshot(self) -> dict[str, Any]:
        s = _memory_stats()
        s["cache_hits"] = s["cache"]["hits"]
        return s

    def update(self, force: bool = False) -> bool:
        """Redraw if the throttle allows (or force). Returns whether it redrew."""
        if not self._throttle.ready(force):
            return False
        s = self._last = self.snapshot()
        self.last_text = self._text(s)
        if self.use_widgets:
            self._draw(s)
        else:
            _emit(self.last_text)
        return True

    def _text(self, s: dict[str, Any]) -> str:
        parts = []
        for ws in s["workspaces"]:
            parts.append(
                f"{ws['name']} {format_bytes(ws['used'])}/{format_bytes(ws['capacity'])} "
                f"(peak {format_bytes(ws['peak_used'])}, spills {ws['spilled_count']}, cycles {ws['cycles']})"
            )
        parts.append(f"heap allocs {s['heap_allocations']}")
        parts.append(f"cache hits {s['cache_hits']}")
        parts.append(f"RSS {format_bytes(s['rss_bytes'])}")
        for g in s["gpus"]:
            parts.append(
                f"{g['device']} pool {format_bytes(g['pool_used_bytes'])}/{format_bytes(g['pool_total_bytes'])}"
            )
        return "memory: " + " | ".join(parts)

    @staticmethod
    def _info(ws: dict[str, Any]) -> str:
        return (
            f"peak {format_bytes(ws['peak_used'])} of {format_bytes(ws['capacity'])}, "
            f"spills {ws['spilled_count']} ({format_bytes(ws['spilled_bytes'])}), cycles {ws['cycles']}"
        )

    def _footer_text(self, s: dict[str, Any]) -> str:
        gpu = "".join(
            f", {g['device']} pool {format_bytes(g['pool_used_bytes'])}/{format_bytes(g['pool_total_bytes'])}"
            for g in s["gpus"]
        )
        return (
            f"heap allocations through kit: {s['heap_allocations']} ({format_bytes(s['heap_bytes'])}), "
            f"cache hits {s['cache_hits']}, RSS {format_bytes(s['rss_bytes'])}{gpu}"
        )

    def _draw(self, s: dict[str, Any]) -> None:
        w = self._w
        for ws in s["workspaces"]:
            key = f"{ws['thread']}/{ws['name']}"
            if key not in self._rows:
                # the whole name, never cut: the label sizes itself
                label = w.HTML(value=f"<code style='white-space:nowrap'>{html.escape(ws['name'])}</code>&nbsp;")
                bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="160px"))
                info = w.HTML(value="")
                self._rows[key] = (label, bar, info)
                self._rows_box.children = (*self._rows_box.children, w.HBox([label, bar, info]))
            _, bar, info = self._rows[key]
            bar.max = float(max(ws["capacity"], ws["peak_used"], 1))
            bar.value = float(ws["peak_used"] if not ws["open"] else ws["used"])
            info.value = "&nbsp;" + self._info(ws)
        self._footer.value = self._footer_text(s)

    def static(self) -> StaticPanel:
        s = self._last or self.snapshot()
        rows = [
            [
                f"<code>{html.escape(ws['name'])}</code>",
                _bar_html(ws["peak_used"] / max(ws["capacity"], ws["peak_used"], 1)),
                self._info(ws),
            ]
            for ws in s["workspaces"]
        ]
        title = f"{html.escape(self.title)} (final)"
        return StaticPanel(_table_html(title, [], rows, self._footer_text(s)), self.last_text)

    def close(self) -> None:
        """Always show the final state (and leave it on the page as static HTML)."""
        self.update(force=True)
        self._finish()


class TimingPanel(_Panel):
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
        self.total, self.label = total, label
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = _Throttle(interval if self.use_widgets else text_interval)
        self.count = 0
        self.times: deque[float] = deque(maxlen=window)
        self._start = self._last = time.perf_counter()
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total or 1), layout=w.Layout(width="160px"))
            self._info = w.HTML(value="")
            self.widget = w.HBox([w.HTML(value=f"<b>{html.escape(label)}</b>&nbsp;"), self._bar, self._info])
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
            self._info.value = "&nbsp;" + self._numbers()  # the label is already beside the bar
        else:
            _emit(self.last_text)

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
        row = [f"<b>{html.escape(self.label)}</b>", _bar_html(frac), html.escape(self._numbers())]
        return StaticPanel(_table_html("", [], [row]), self.last_text)

    def close(self) -> None:
        self._redraw(force=True)
        self._finish()


class Progress(_Panel):
    """How far a long cell has got: what is being measured, steps done of the total, time spent
    and about how long is left (a straight-line guess from the steps so far). Call it as
    `bar(done, total, note)` (what kit.measure.compare's `progress=` calls), `bar.tick()`, wrap an
    iterable with `bar.iter(items)`, or pass it to `fit(..., listeners=[bar])`; at `close()` (or
    the end of a `with` block) it leaves its final line as static HTML, so a stored chapter shows
    what ran and how long it took.

        >>> from kit.measure import compare
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
        if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
            raise ValueError(f"Progress(total={total!r}): a whole number of steps >= 0, or None while unknown")
        self.what, self.total, self.done, self.note = what, total, 0, ""
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = _Throttle(interval if self.use_widgets else text_interval)
        self._start = time.perf_counter()
        self._ended: float | None = None
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total or 1), layout=w.Layout(width="160px"))
            self._info = w.HTML(value="")
            self.widget = w.HBox([w.HTML(value=f"<b>{html.escape(what)}</b>&nbsp;"), self._bar, self._info])
        self._show(display)

    def __call__(self, done: int, total: int | None = None, note: str = "") -> None:
        """`done` steps of `total` (None: the total given before) finished; `note`: the step now."""
        if total is not None:
            self.total = total
        self.done, self.note = done, note
        self._redraw(force=False)

    def tick(self, n: int = 1, note: str = "") -> None:
        self(self.done + n, note=note)

    def iteration_done(self, model: Any, iteration: int, epoch: int, **info: Any) -> None:
        """A training listener: one step per iteration (with Spark or ParallelWrapper, one per
        worker and round), the epoch as the note."""
        self.tick(note=f"epoch {epoch + 1}")

    def iter(self, items: Any, total: int | None = None) -> Any:
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
            self._info.value = "&nbsp;" + html.escape(self._numbers())
        else:
            _emit(self.last_text)

    def static(self) -> StaticPanel:
        frac = self.done / self.total if self.total else 1.0
        row = [f"<b>{html.escape(self.what)}</b>", _bar_html(frac), html.escape(self._numbers())]
        return StaticPanel(_table_html("", [], [row]), self.last_text)

    def close(self) -> None:
        if self._ended is None:
            self._ended = time.perf_counter()
        self._redraw(force=True)
        self._finish()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


class TrainingPanel(_Panel):
    """A training listener: loss, progress and memory in one panel (DL4J's UI, in a cell).

    Accepts both listener forms: `on_epoch_start(model)` and `on_epoch_start(model, epoch)`."""

    def __init__(
        self,
        total_iterations: int | None = None,
        interval: float = 0.25,
        widgets: bool | None = None,
        display: bool = True,
        memory: bool = True,
    ) -> None:
        self.use_widgets = in_notebook() if widgets is None else widgets
        self.timing = TimingPanel(total_iterations, "training", interval, widgets=self.use_widgets, display=False)
        self.memory = MemoryPanel(max(interval, 0.5), widgets=self.use_widgets, display=False) if memory else None
        self._throttle = _Throttle(interval if self.use_widgets else 2.0)
        self.scores: list[float] = []
        self.epochs_done = 0
        if self.use_widgets:
            import ipywidgets as w

            self._loss = w.HTML(value="loss: waiting for the first iteration")
            parts = [self.timing.widget, self._loss] + ([self.memory.widget] if self.memory else [])
            self.widget = w.VBox(parts)
        self._show(display)

    def _loss_text(self) -> str:
        if not self.scores:
            return "loss: -"
        recent = self.scores[-20:]
        return (
            f"loss: last {self.scores[-1]:.3g}, mean of last {len(recent)} {sum(recent) / len(recent):.3g}, "
            f"epochs done {self.epochs_done}"
        )

    def on_fit_start(self, model: Any) -> None:
        pass

    def on_epoch_start(self, model: Any, epoch: int | None = None) -> None:
        pass

    def on_epoch_end(self, model: Any, epoch: int | None = None) -> None:
        self.epochs_done += 1

    def iteration_done(self, model: Any, iteration: int, epoch: int, **info: Any) -> None:
        self.scores.append(float(info.get("score", float("nan"))))
        self.timing.tick()
        if self.memory is not None:
            self.memory.update()
        if self._throttle.ready(force=False) and self.use_widgets:
            self._loss.value = html.escape(self._loss_text())

    @property
    def last_text(self) -> str:  # type: ignore[override]
        return self.timing.last_text + " | " + self._loss_text()

    def static(self) -> StaticPanel:
        parts = [self.timing.static().html, f"<div>{html.escape(self._loss_text())}</div>"]
        text = [self.timing.last_text, self._loss_text()]
        if self.memory is not None:
            parts.append(self.memory.static().html)
            text.append(self.memory.last_text)
        return StaticPanel(f"<div class='kit-panel-group'>{''.join(parts)}</div>", "\n".join(text))

    def close(self) -> None:
        self.timing._redraw(force=True)
        if self.memory is not None:
            self.memory.update(force=True)
        if self.use_widgets:
            self._loss.value = html.escape(self._loss_text())
        elif self.scores:
            _emit(self._loss_text())
        self._finish()


class WorkerPanel(_Panel):
    """A ParallelWrapper listener: one row per worker (the index it reports), its iterations,
    median step time and rate, under one progress bar for the whole run."""

    def __init__(
        self,
        workers: int,
        total_iterations: int | None = None,
        interval: float = 0.25,
        widgets: bool | None = None,
        display: bool = True,
    ) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"WorkerPanel(workers={workers!r}): a positive number of workers")
        self.workers, self.total = workers, total_iterations
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = _Throttle(interval if self.use_widgets else 2.0)
        self.counts = [0] * workers
        self.times: list[deque[float]] = [deque(maxlen=50) for _ in range(workers)]
        self._last = [time.perf_counter()] * workers
        self._start = time.perf_counter()
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total_iterations or 1))
            self._bar.layout.width = "160px"
            self._head = w.HTML(value="")
            self._rows = [w.HTML(value=f"worker {i}: waiting") for i in range(workers)]
            self.widget = w.VBox([w.HBox([w.HTML(value="<b>workers</b>&nbsp;"), self._bar, self._head]), *self._rows])
        self._show(display)

    def iteration_done(self, model: Any, iteration: int, epoch: int, **info: Any) -> None:
        i = info.get("worker")
        i = 0 if i is None else int(i)
        if not 0 <= i < self.workers:
            raise ValueError(f"WorkerPanel: worker {i} reported, but the panel has {self.workers} rows (0..)")
        now = time.perf_counter()
        self.times[i].append(now - self._last[i])
        self._last[i] = now
        self.counts[i] += 1
        self._redraw(force=False)

    def on_epoch_start(self, model: Any, epoch: int | None = None) -> None:
        now = time.perf_counter()
        self._last = [now] * self.workers  # time between epochs is not a step

    def on_epoch_end(self, model: Any, epoch: int | None = None) -> None:
        pass

    @property
    def total_count(self) -> int:
        return sum(self.counts)

    def _row_text(self, i: int) -> str:
        if not self.times[i]:
            return f"worker {i}: 0 iterations"
        med = statistics.median(self.times[i])
        return f"worker {i}: {self.counts[i]} iterations, median step {med * 1e3:.2f} ms ({1 / med:.0f}/s)"

    def _head_text(self) -> str:
        of = f" of {self.total}" if self.total else ""
        return f"{self.total_count}{of} iterations in {time.perf_counter() - self._start:.1f} s"

    def _redraw(self, force: bool) -> None:
        if not self._throttle.ready(force):
            return
        self.last_text = "; ".join([self._head_text()] + [self._row_text(i) for i in range(self.workers)])
        if self.use_widgets:
            self._bar.value = float(min(self.total_count, self.total) if self.total else 1)
            self._head.value = "&nbsp;" + self._head_text()
            for i, row in enumerate(self._rows):
                row.value = html.escape(self._row_text(i))
        else:
            _emit(self.last_text)

    def static(self) -> StaticPanel:
        frac = self.total_count / self.total if self.total else 1.0
        rows = [["<b>all</b>", _bar_html(frac), html.escape(self._head_text())]]
        for i in range(self.workers):
            share = self.counts[i] / max(1, self.total_count)
            numbers = self._row_text(i).split(": ", 1)[1]  # the label is the first column already
            rows.append([f"worker {i}", _bar_html(share), html.escape(numbers)])
        return StaticPanel(_table_html("workers (final)", [], rows), self.last_text)

    def close(self) -> None:
        self._redraw(force=True)
        self._finish()
