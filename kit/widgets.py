"""Live panels: memory (workspaces, heap, cache, RSS, GPU) and timing, for notebooks and scripts.

    >>> panel = kit.widgets.MemoryPanel()          # shows itself in a notebook
    >>> timer = kit.widgets.TimingPanel(total=100)
    >>> for i in range(100):
    ...     with ws: step()
    ...     panel.update(); timer.tick()           # throttled: a few redraws per second
    >>> panel.close(); timer.close()               # the final state, always

In a kernel they are core ipywidgets (FloatProgress, HTML, HBox, VBox) displayed once and then
updated through `.value`, which works with ipywidgets 7.7 (Colab) and 8 (JupyterLab 4) and
keeps nbval's stored output stable. Outside a kernel they print throttled plain-text lines.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import deque
from typing import Any

from kit import readings

__all__ = ["MemoryPanel", "TimingPanel", "format_bytes", "in_notebook"]


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


class MemoryPanel:
    """One row per workspace (used/capacity bar, peak, spills), then heap allocations, cache
    hits, process RSS and GPU memory."""

    def __init__(
        self, interval: float = 0.3, text_interval: float = 2.0, display: bool = True, widgets: bool | None = None
    ) -> None:
        self.use_widgets = in_notebook() if widgets is None else widgets
        self._throttle = _Throttle(interval if self.use_widgets else text_interval)
        self._rows: dict[str, tuple[Any, Any, Any]] = {}
        self.last_text = ""
        if self.use_widgets:
            import ipywidgets as w

            self._w = w
            self._rows_box = w.VBox([])
            self._footer = w.HTML(value="")
            self.widget = w.VBox([w.HTML(value="<b>kit memory</b>"), self._rows_box, self._footer])
            if display:
                from IPython.display import display as show

                show(self.widget)
        self.update(force=True)

    def snapshot(self) -> dict[str, Any]:
        s = readings.stats()
        s["cache_hits"] = s["cache"]["hits"]
        return s

    def update(self, force: bool = False) -> bool:
        """Redraw if the throttle allows (or force). Returns whether it redrew."""
        if not self._throttle.ready(force):
            return False
        s = self.snapshot()
        self.last_text = self._text(s)
        if self.use_widgets:
            self._draw(s)
        else:
            print(self.last_text, flush=True)
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

    def _draw(self, s: dict[str, Any]) -> None:
        w = self._w
        for ws in s["workspaces"]:
            key = f"{ws['thread']}/{ws['name']}"
            if key not in self._rows:
                label = w.HTML(value=f"<code>{ws['name']}</code>", layout=w.Layout(width="140px"))
                bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="240px"))
                info = w.HTML(value="")
                self._rows[key] = (label, bar, info)
                self._rows_box.children = (*self._rows_box.children, w.HBox([label, bar, info]))
            _, bar, info = self._rows[key]
            cap = ws["capacity"]
            bar.max = float(max(cap, ws["peak_used"], 1))
            bar.value = float(ws["peak_used"] if not ws["open"] else ws["used"])
            info.value = (
                f"capacity {format_bytes(cap)}, peak {format_bytes(ws['peak_used'])}, "
                f"spills {ws['spilled_count']} ({format_bytes(ws['spilled_bytes'])}), cycles {ws['cycles']}"
            )
        gpu = "".join(
            f", {g['device']} pool {format_bytes(g['pool_used_bytes'])}/{format_bytes(g['pool_total_bytes'])}"
            for g in s["gpus"]
        )
        self._footer.value = (
            f"heap allocations through kit: {s['heap_allocations']} ({format_bytes(s['heap_bytes'])}), "
            f"cache hits {s['cache_hits']}, RSS {format_bytes(s['rss_bytes'])}{gpu}"
        )

    def close(self) -> None:
        """Always show the final state."""
        self.update(force=True)

    def __enter__(self) -> MemoryPanel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TimingPanel:
    """Iteration time (last, median of the recent window) and rate; a progress bar when the
    total is known."""

    def __init__(
        self,
        total: int | None = None,
        label: str = "iterations",
        interval: float = 0.3,
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
        self.last_text = ""
        if self.use_widgets:
            import ipywidgets as w

            self._bar = w.FloatProgress(value=0.0, min=0.0, max=float(total or 1), layout=w.Layout(width="240px"))
            self._info = w.HTML(value="")
            self.widget = w.HBox([w.HTML(value=f"<b>{label}</b>&nbsp;"), self._bar, self._info])
            if display:
                from IPython.display import display as show

                show(self.widget)

    def tick(self, n: int = 1) -> None:
        now = time.perf_counter()
        self.times.append((now - self._last) / n)
        self._last = now
        self.count += n
        self._redraw(force=False)

    def _redraw(self, force: bool) -> None:
        if not self._throttle.ready(force):
            return
        self.last_text = self._text()
        if self.use_widgets:
            self._bar.value = float(self.count if self.total else 1)
            self._info.value = self.last_text
        else:
            print(self.last_text, flush=True)

    def _text(self) -> str:
        if not self.times:
            return f"{self.label}: 0"
        med = statistics.median(self.times)
        elapsed = time.perf_counter() - self._start
        of = f"/{self.total}" if self.total else ""
        return (
            f"{self.label}: {self.count}{of}, last {self.times[-1] * 1e3:.2f} ms, median {med * 1e3:.2f} ms, "
            f"{self.count / max(elapsed, 1e-9):.1f}/s"
        )

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    def close(self) -> None:
        self._redraw(force=True)

    def __enter__(self) -> TimingPanel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
