"""Issue 45 item 8: a panel's text wrapped a unit onto a line of its own ("in 18" / "s"). Every
text a panel shows as HTML, live (each widget's value) or final (its static table), keeps each
number beside its unit with a no-break space: checked over every kind of panel kit has, each
driven until its lines hold times, byte counts and rates. And a panel shown as widgets carries a
badge that says its cell is running, until a real IPython shell reports the cell's end."""

from __future__ import annotations

import html
import re

import ipywidgets as w
import pytest

import kit
from kit import panels, widgets
from kit.monitor.panels import UNITS, Panel, Progress, TimingPanel, keep_units
from kit.monitor.widgets import MemoryPanel, TrainingPanel, WorkerPanel
from kit.state import STATE

BREAKABLE = re.compile(r"\d[ \t]+(?:" + "|".join(UNITS) + r")(?![\w/])")
KEPT = re.compile(r"\d\u00a0(?:" + "|".join(UNITS) + r")(?![\w/])")


def _drive(kind: type) -> Panel:
    """A panel of `kind` shown as widgets (not displayed), fed until its lines carry numbers with units."""
    ws = kit.get_workspace_for_current_thread(name="TEXT")
    if kind is TimingPanel:
        panel = TimingPanel(total=5, label="loop of 5 s steps", widgets=True, display=False, interval=0)
        for _ in range(5):
            panel.tick()
    elif kind is Progress:
        panel = Progress("timing 2 variants", total=4, widgets=True, display=False, interval=0)
        for _ in range(3):
            panel.tick(note="repeat 1 of 2")
    elif kind is MemoryPanel:
        panel = MemoryPanel(widgets=True, display=False, interval=0)
        for _ in range(3):
            with ws:
                kit.ones((4096,))
            panel.update()
    elif kind is TrainingPanel:
        panel = TrainingPanel(total_iterations=4, widgets=True, display=False, interval=0)
        for i in range(4):
            panel.iteration_done(None, i, 0, score=1.0 / (i + 1))
    elif kind is WorkerPanel:
        panel = WorkerPanel(2, total_iterations=6, widgets=True, display=False, interval=0, title="2 workers")
        for i in range(6):
            panel.iteration_done(None, i, 0, worker=i % 2)
    else:
        raise AssertionError(f"no driver for {kind.__name__}: add one here, so its text is checked too")
    return panel


def _html_values(widget) -> list[str]:
    out = [widget.value] if isinstance(widget, w.HTML) else []
    for child in getattr(widget, "children", ()):
        out += _html_values(child)
    return out


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment)).replace("&nbsp;", "\u00a0")


def _kinds() -> list[type]:
    found, todo = set(), [Panel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__ in (panels.__name__, widgets.__name__):
                found.add(sub)
                todo.append(sub)
    return sorted(found, key=lambda k: k.__name__)


def test_every_panel_kind_is_driven_here():
    assert {k.__name__ for k in _kinds()} == {"MemoryPanel", "Progress", "TimingPanel", "TrainingPanel", "WorkerPanel"}


@pytest.mark.parametrize("kind", _kinds(), ids=lambda k: k.__name__)
def test_no_panel_text_can_break_between_a_number_and_its_unit(kind):
    panel = _drive(kind)
    live = [_text(v) for v in _html_values(panel.widget)]
    panel.close()
    final = _text(panel.static().html)
    for where, texts in (("live", live), ("final", [final])):
        joined = " | ".join(texts)
        assert KEPT.search(joined), f"{kind.__name__} {where}: no number with a unit to check in {joined!r}"
        bad = [t for t in texts if BREAKABLE.search(t)]
        assert not bad, f"{kind.__name__} {where}: a unit can wrap away from its number in {bad}"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("1350 of 1350 iterations in 18 s", "in 18\u00a0s"),
        ("mean step 1.57 ms, median 1.48 ms", "1.57\u00a0ms, median 1.48\u00a0ms"),
        ("per call 36.5 µs", "36.5\u00a0µs"),
        ("RSS 70.0 MiB, pool 2.0 GiB, 512 B", "70.0\u00a0MiB, pool 2.0\u00a0GiB, 512\u00a0B"),
        ("1 min 05 s", "1\u00a0min 05\u00a0s"),
        ("40/40 steps (100%) in 19 s", "40/40 steps (100%) in 19\u00a0s"),
        ("3 steps, 2 spills, 5 s/step, 10 Bytes", "3 steps, 2 spills, 5 s/step, 10 Bytes"),
    ],
)
def test_keep_units_joins_numbers_to_units_only(text, kept):
    out = keep_units(text)
    assert kept in out and out.replace("\u00a0", " ") == text  # only those spaces changed


def test_a_panel_says_it_is_running_until_a_real_shell_ends_its_cell():
    """A real IPython shell (no kernel, so the panel is forced to widgets) runs two cells: the badge
    says running while the first runs, its cell has ended after it, and a panel closed in its cell
    leaves no badge behind."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.user_ns["kit"] = kit
        seen = shell.run_cell(
            "open_panel = kit.widgets.WorkerPanel(2, total_iterations=2, widgets=True, interval=0)\n"
            "open_panel.iteration_done(None, 0, 0, worker=0)\n"
            "badge_then = open_panel.badge.value\n"
            "closed = kit.widgets.Progress('a step', total=1, widgets=True)\n"
            "closed.tick(); closed.close()"
        )
        assert seen.success, seen.error_in_exec
        ns = shell.user_ns
        assert "running" in ns["badge_then"]
        assert "its cell has ended" in ns["open_panel"].badge.value
        assert ns["closed"] not in STATE.live_panels  # closed: the static table replaced it, badge and all
        shell.run_cell("open_panel.iteration_done(None, 1, 0, worker=1); badge_again = open_panel.badge.value")
        assert "running" in ns["badge_again"]  # a later cell that updates it: running again, while it runs
        assert "its cell has ended" in ns["open_panel"].badge.value
        ns["open_panel"].close()
    finally:
        InteractiveShell.clear_instance()
