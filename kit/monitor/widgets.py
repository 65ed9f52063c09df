"""Live panels: memory (workspaces, heap, cache, RSS, GPU), timing, training and per-worker rows.

The base every panel shares, `TimingPanel` and `Progress` live in kit.panels (re-exported here);
this module has the memory panel and the two training listeners built on them (`TrainingPanel`,
`WorkerPanel`: their docstrings show them in a fit).

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

In a kernel they are core ipywidgets, shown and closed as kit.panels says: a closed panel leaves
static HTML, so a saved notebook shows its final numbers.
"""

from __future__ import annotations

import html
import statistics
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from kit.core.arguments import whole
from kit.measurement.measure import unchecked_note
from kit.monitor.panels import (
    Panel,
    Progress,
    StaticPanel,
    TimingPanel,
    bar_html,
    emit,
    format_bytes,
    in_notebook,
    note_html,
    panel_html,
    table_html,
    throttle,
)
from kit.monitor.readings import stats as _memory_stats

if TYPE_CHECKING:
    from kit.nn.network import Network

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


def _pool(g: dict[str, Any]) -> str:
    """A GPU's memory pool, used of total."""
    return f"{g['device']} pool {format_bytes(g['pool_used_bytes'])}/{format_bytes(g['pool_total_bytes'])}"


class MemoryPanel(Panel):
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
        self._throttle = throttle(type(self).__name__, interval, self.use_widgets, text_interval)
        self._rows: dict[str, tuple[Any, Any, Any]] = {}
        self._last: dict[str, Any] = {}
        if self.use_widgets:
            import ipywidgets as w

            self._w = w
            self._rows_box = w.VBox([])
            self._footer = w.HTML(value="")
            self.widget = w.VBox([w.HTML(value=f"<b>{panel_html(title)}</b>"), self._rows_box, self._footer])
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
            emit(self.last_text)
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
        parts += [_pool(g) for g in s["gpus"]]
        return "memory: " + " | ".join(parts)

    @staticmethod
    def _info(ws: dict[str, Any]) -> str:
        return (
            f"peak {format_bytes(ws['peak_used'])} of {format_bytes(ws['capacity'])}, "
            f"spills {ws['spilled_count']} ({format_bytes(ws['spilled_bytes'])}), cycles {ws['cycles']}"
        )

    def _footer_text(self, s: dict[str, Any]) -> str:
        gpu = "".join(f", {_pool(g)}" for g in s["gpus"])
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
            info.value = "&nbsp;" + panel_html(self._info(ws))
        self._footer.value = panel_html(self._footer_text(s))
        self._live_badge()

    def static(self) -> StaticPanel:
        s = self._last or self.snapshot()
        rows = [
            [
                f"<code>{html.escape(ws['name'])}</code>",
                bar_html(ws["peak_used"] / max(ws["capacity"], ws["peak_used"], 1)),
                panel_html(self._info(ws)),
            ]
            for ws in s["workspaces"]
        ]
        title = f"{panel_html(self.title)} (final)"
        return StaticPanel(table_html(title, [], rows, panel_html(self._footer_text(s))), self.last_text)

    def close(self) -> None:
        """Always show the final state (and leave it on the page as static HTML)."""
        self.update(force=True)
        self._finish()


class TrainingPanel(Panel):
    """A training listener: loss, progress and memory in one panel (DL4J's UI, in a cell).

    Accepts both listener forms: `on_epoch_start(model)` and `on_epoch_start(model, epoch)`.

        >>> from kit.data import ArrayIterator, load_digits
        >>> from kit.nn import mlp
        >>> from kit.parallel import ParallelWrapper
        >>> train, test = load_digits()
        >>> net, it = mlp(64, hidden=(32,), n_out=10), ArrayIterator(train, 64)
        >>> training = TrainingPanel(total_iterations=2 * len(it))
        memory: ...
        >>> net.fit(it, epochs=2, listeners=[training])
        training: 1/46 in ...
        <kit.nn.network.Network object at 0x...>
        >>> training.close()
        training: 46/46 in ...
        memory: ...
        loss: last ..., mean of last 20 ..., epochs done 2, steps replayed 0 of 46
        >>> workers = WorkerPanel(2, total_iterations=len(it))
        >>> with ParallelWrapper(net, workers=2, listeners=[workers]) as pw:
        ...     _ = pw.fit(it, epochs=1)
        1 of 23 iterations in ... s; worker 0: ...
        >>> workers.close()
        23 of 23 iterations in ... s; worker 0: ... iterations, ...; worker 1: ... iterations, ...
    """

    def __init__(
        self,
        total_iterations: int | None = None,
        interval: float = 0.25,
        widgets: bool | None = None,
        display: bool = True,
        memory: bool = True,
    ) -> None:
        self.use_widgets = in_notebook() if widgets is None else widgets
        if total_iterations is not None:  # named as the caller gave it, not as the timing panel takes it
            total_iterations = whole(type(self).__name__, "total_iterations", total_iterations, 0)
        self.timing = TimingPanel(total_iterations, "training", interval, widgets=self.use_widgets, display=False)
        self.memory = MemoryPanel(max(interval, 0.5), widgets=self.use_widgets, display=False) if memory else None
        self._throttle = throttle(type(self).__name__, interval, self.use_widgets, 2.0)
        self.scores: list[float] = []
        self.epochs_done = 0
        # steps replayed at the kernel seam (kit.nn.replay) among those seen: None for a model that never replays
        self.replayed: int | None = None
        self._replays_seen = 0
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
        replayed = "" if self.replayed is None else f", steps replayed {self.replayed} of {len(self.scores)}"
        return (
            f"loss: last {self.scores[-1]:.3g}, mean of last {len(recent)} {sum(recent) / len(recent):.3g}, "
            f"epochs done {self.epochs_done}{replayed}"
        )

    def on_fit_start(self, model: Network) -> None:
        pass

    def on_epoch_start(self, model: Network, epoch: int | None = None) -> None:
        pass

    def on_epoch_end(self, model: Network, epoch: int | None = None) -> None:
        self.epochs_done += 1

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        self.scores.append(float(info.get("score", float("nan"))))
        plans = getattr(model, "train_plans", None)
        if plans is not None:  # did this step replay (kit.nn.replay), or run the layers?
            self.replayed = (self.replayed or 0) + (plans.used > self._replays_seen)
            self._replays_seen = plans.used
        self.timing.tick()
        if self.memory is not None:
            self.memory.update()
        if self._throttle.ready(force=False) and self.use_widgets:
            self._loss.value = panel_html(self._loss_text())
            self._live_badge()

    @property
    def last_text(self) -> str:  # type: ignore[override]
        return self.timing.last_text + " | " + self._loss_text()

    def static(self) -> StaticPanel:
        parts = [self.timing.static().html, f"<div>{panel_html(self._loss_text())}</div>"]
        text = [self.timing.last_text, self._loss_text()]
        if self.memory is not None:
            parts.append(self.memory.static().html)
            text.append(self.memory.last_text)
        return StaticPanel(f"<div class='kit-panel-group'>{''.join(parts)}</div>", "\n".join(text))

    def close(self) -> None:
        self.timing.close()  # draws its final line (it was never displayed on its own)
        if self.memory is not None:
            self.memory.update(force=True)
        if self.use_widgets:
            self._loss.value = panel_html(self._loss_text())
        elif self.scores:
            emit(self._loss_text())
        self._finish()


class WorkerPanel(Panel):
    """A ParallelWrapper listener: one row per worker (the index it reports), its iterations, its
    mean step time over the run and the median of its last 50 steps, under one progress bar for
    the whole run. `title` names the run (two panels side by side are told apart by it)."""

    def __init__(
        self,
        workers: int,
        total_iterations: int | None = None,
        interval: float = 0.25,
        widgets: bool | None = None,
        display: bool = True,
        title: str = "workers",
    ) -> None:
        workers = whole("WorkerPanel", "workers", workers)
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"WorkerPanel(title={title!r}): a non-empty string naming the run, e.g. '2 workers'")
        total = None if total_iterations is None else whole("WorkerPanel", "total_iterations", total_iterations, 0)
        self.workers, self.total, self.title = workers, total, title
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = throttle(type(self).__name__, interval, self.use_widgets, 2.0)
        self.counts = [0] * workers
        self.times: list[deque[float]] = [deque(maxlen=50) for _ in range(workers)]
        self.busy = [0.0] * workers  # each worker's step times added up over the whole run
        self._last = [time.perf_counter()] * workers
        self._start = time.perf_counter()
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total_iterations or 1))
            self._bar.layout.width = "160px"
            self._head = w.HTML(value="")
            self._rows = [w.HTML(value=f"worker {i}: waiting") for i in range(workers)]
            head = w.HTML(value=f"<b>{panel_html(title)}</b>&nbsp;")
            self.widget = w.VBox([w.HBox([head, self._bar, self._head]), *self._rows])
        self._show(display)

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        i = info.get("worker")
        i = 0 if i is None else int(i)
        if not 0 <= i < self.workers:
            raise ValueError(f"WorkerPanel: worker {i} reported, but the panel has {self.workers} rows (0..)")
        now = time.perf_counter()
        self.times[i].append(now - self._last[i])
        self.busy[i] += now - self._last[i]
        self._last[i] = now
        self.counts[i] += 1
        self._redraw(force=False)

    def on_epoch_start(self, model: Network, epoch: int | None = None) -> None:
        now = time.perf_counter()
        self._last = [now] * self.workers  # time between epochs is not a step

    def on_epoch_end(self, model: Network, epoch: int | None = None) -> None:
        pass

    @property
    def total_count(self) -> int:
        return sum(self.counts)

    def _row_text(self, i: int) -> str:
        if not self.times[i]:
            return f"worker {i}: 0 iterations"
        # the mean over the whole run and the median of the recent window: a run whose first
        # steps were slow has a mean far above its recent median, and each says which it is
        med, mean = statistics.median(self.times[i]), self.mean_step(i)
        return (
            f"worker {i}: {self.counts[i]} iterations, mean step {mean * 1e3:.2f} ms, "
            f"median of the last {len(self.times[i])} {med * 1e3:.2f} ms"
        )

    def mean_step(self, worker: int) -> float:
        """Seconds per step of `worker`, over the whole run (time between epochs left out)."""
        return self.busy[worker] / self.counts[worker] if self.counts[worker] else float("nan")

    def _head_text(self) -> str:
        of = f" of {self.total}" if self.total else ""
        return f"{self.total_count}{of} iterations in {time.perf_counter() - self._start:.1f} s"

    def _redraw(self, force: bool) -> None:
        if not self._throttle.ready(force):
            return
        self.last_text = "; ".join([self._head_text()] + [self._row_text(i) for i in range(self.workers)])
        if self.use_widgets:
            self._bar.value = float(min(self.total_count, self.total) if self.total else 1)
            self._head.value = "&nbsp;" + panel_html(self._head_text())
            for i, row in enumerate(self._rows):
                row.value = panel_html(self._row_text(i))
            self._live_badge()
        else:
            emit(self.last_text)

    def static(self) -> StaticPanel:
        frac = self.total_count / self.total if self.total else 1.0
        rows = [["<b>all</b>", bar_html(frac), panel_html(self._head_text())]]
        for i in range(self.workers):
            share = self.counts[i] / max(1, self.total_count)
            numbers = self._row_text(i).split(": ", 1)[1]  # the label is the first column already
            rows.append([f"worker {i}", bar_html(share), panel_html(numbers)])
        note = unchecked_note(self.load.read())
        html_text = table_html(f"{panel_html(self.title)} (final)", [], rows, note_html(note))
        return StaticPanel(html_text, f"{self.last_text}\n  {note}")

    def close(self) -> None:
        self._redraw(force=True)
        self._finish()
