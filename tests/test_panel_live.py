"""kit.monitor.panel_live: a panel shown as widgets carries a badge that says its cell is running,
until a real IPython shell reports the cell's end; the badge goes at the head of the panel's
widget, whatever its shape; a closed panel is no longer watched."""

from __future__ import annotations

import ipywidgets as w
import pytest

import kit
from kit.monitor import panel_live
from kit.monitor.panel_live import BACKGROUND, ENDED, RUNNING, add_badge, badge_html
from kit.state import STATE


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


class Recorder:
    """A live panel as panel_live sees one (LivePanel): it records each state it is told."""

    def __init__(self) -> None:
        self.states: list[str] = []

    def set_live_state(self, state: str) -> None:
        self.states.append(state)


@pytest.mark.parametrize(
    ("state", "text", "hover"),
    [
        (RUNNING, "● running", "still running"),
        (ENDED, "■ its cell has ended", "these are its last numbers"),
        (BACKGROUND, "● updating after its cell ended", "the kernel is idle"),
    ],
)
def test_each_badge_says_its_state_and_why_on_hover(state, text, hover):
    badge = badge_html(state)
    assert badge.startswith('<span class="kit-live" title="') and badge.endswith(f">{text}</span>&nbsp;")
    assert hover in badge.split('title="')[1].split('"')[0]


@pytest.mark.parametrize(
    ("shape", "where"),
    [
        ("hbox", "first in the row"),
        ("vbox of a row", "first in the head row"),
        ("vbox of a title", "beside the title"),
        ("empty vbox", "alone"),
        ("box", "first"),
        ("gridbox", "first"),
        ("empty box", "alone"),
    ],
)
def test_the_badge_goes_at_the_head_of_every_shape_of_panel(shape, where):
    title, bar = w.HTML(value="title"), w.FloatProgress()
    widget = {
        "hbox": lambda: w.HBox([title, bar]),
        "vbox of a row": lambda: w.VBox([w.HBox([title, bar]), w.HTML(value="footer")]),
        "vbox of a title": lambda: w.VBox([title, w.HTML(value="footer")]),
        "empty vbox": lambda: w.VBox([]),
        "box": lambda: w.Box([title, bar]),
        "gridbox": lambda: w.GridBox([title, bar]),
        "empty box": lambda: w.Box([]),
    }[shape]()
    badge = add_badge(widget)
    assert badge.value == badge_html(RUNNING)
    head = widget.children[0]
    if shape in ("hbox", "box", "gridbox"):
        assert widget.children == (badge, title, bar)
    elif shape == "vbox of a row":
        assert head.children == (badge, title, bar) and len(widget.children) == 2
    elif shape == "vbox of a title":
        assert isinstance(head, w.HBox) and head.children == (badge, title) and len(widget.children) == 2
    else:
        assert widget.children == (badge,)


def test_a_tracked_panel_hears_its_cell_end_and_an_untracked_one_does_not():
    """A real IPython shell runs the cells; the panels are real implementations of LivePanel."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        kept, closed = Recorder(), Recorder()
        shell.user_ns.update(panel_live=panel_live, kept=kept, closed=closed)
        seen = shell.run_cell(
            "panel_live.track(kept); panel_live.track(closed); panel_live.untrack(closed)\n"
            "inside = panel_live.state_now()"
        )
        assert seen.success, seen.error_in_exec
        assert shell.user_ns["inside"] == RUNNING  # the badge a redraw shows while the cell runs
        assert kept.states == [ENDED] and closed.states == []
        assert panel_live.state_now() == BACKGROUND and not panel_live.cell_running()  # between cells
        shell.run_cell("again = panel_live.cell_running()")
        assert shell.user_ns["again"] is True and kept.states == [ENDED, ENDED]
        assert kept in STATE.live_panels and closed not in STATE.live_panels
    finally:
        InteractiveShell.clear_instance()


def test_outside_any_shell_a_panel_counts_as_running():
    assert panel_live._shell() is None
    assert panel_live.cell_running() and panel_live.state_now() == RUNNING
    panel = Recorder()
    panel_live.track(panel)  # no shell: nothing to register, and no error
    assert panel in STATE.live_panels and panel.states == []
    panel_live.untrack(panel)
    assert panel not in STATE.live_panels
