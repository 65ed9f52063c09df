"""A live panel says plainly whether the work it shows is still running: a badge at its head.

JupyterLab's status bar is no guide to that: it shows the state of the kernel's *last* status
message, whatever request it answered, and JupyterLab 4's widget manager asks an ipykernel 7
kernel for a subshell the first time it draws a widget, so the bar reads "Idle" while the cell that
displayed the widget still runs (JupyterLab's issue #10701). So every widget panel carries its own:

- **running** while the cell that shows it runs (`RUNNING`);
- **its cell has ended** once IPython reports the end of a cell (`post_run_cell`) and the panel was
  not closed: the numbers stop there unless work left running in the background updates them,
  and then the badge says that (`ENDED`, `BACKGROUND`).

A panel that closes replaces itself with its static final state, badge and all. Outside a
notebook kernel (plain-text lines) there is no badge.

    >>> badge_html(RUNNING)[:91]
    '<span class="kit-live" title="the cell that shows this panel is still running" style="font-'
    >>> badge_html(ENDED).endswith(">■ its cell has ended</span>&nbsp;")
    True
"""

from __future__ import annotations

import html
import threading
from typing import TYPE_CHECKING, Any, Protocol

from kit.state import STATE

if TYPE_CHECKING:
    import ipywidgets

__all__ = ["BACKGROUND", "ENDED", "RUNNING", "add_badge", "badge_html", "cell_running", "state_now", "track", "untrack"]

# state -> (the badge's text, its hover text, its colour)
RUNNING = "running"
ENDED = "ended"
BACKGROUND = "background"
_BADGES = {
    RUNNING: ("● running", "the cell that shows this panel is still running", "#b45f06"),
    ENDED: ("■ its cell has ended", "the cell ended before the panel was closed: these are its last numbers", "#666"),
    BACKGROUND: (
        "● updating after its cell ended",
        "work left running in the background still updates this panel; the kernel is idle",
        "#b45f06",
    ),
}

_lock = threading.Lock()
# STATE.live_panels: panels shown as widgets and not closed yet; STATE.cell_watch: what IPython's
# cell events last said, and of which shell (a panel is made inside a cell, so running is True
# until the shell watched says otherwise)


class LivePanel(Protocol):
    """What this module asks of a panel it watches (kit.panels.Panel has it)."""

    def set_live_state(self, state: str) -> None: ...


def badge_html(state: str) -> str:
    """The badge for `state` (RUNNING, ENDED or BACKGROUND), as the HTML of an ipywidgets.HTML."""
    text, hover, color = _BADGES[state]
    return (
        f'<span class="kit-live" title="{html.escape(hover)}" style="font-size:11px;color:{color};'
        f'white-space:nowrap">{html.escape(text)}</span>&nbsp;'
    )


def add_badge(widget: ipywidgets.Box) -> ipywidgets.HTML:
    """A RUNNING badge (an ipywidgets.HTML), put first in the head of a panel's `widget`: in the row
    its bar is on (an HBox, or a VBox whose first row is one), else beside its title (a VBox's
    first child), else first in any other Box. No child is dropped."""
    import ipywidgets as w

    badge = w.HTML(value=badge_html(RUNNING))
    head = widget.children[0] if isinstance(widget, w.VBox) and widget.children else None
    if isinstance(head, w.HBox):
        head.children = (badge, *head.children)
    elif head is not None:
        widget.children = (w.HBox([badge, head]), *widget.children[1:])
    else:
        widget.children = (badge, *widget.children)
    return badge


def cell_running() -> bool:
    """Whether a cell is running, as IPython's pre/post_run_cell events last said (True before the
    first event, and wherever the shell watched is gone: a panel is made inside the work it shows)."""
    return STATE.cell_watch["running"] or _shell() is not STATE.cell_watch["shell"]


def track(panel: LivePanel) -> None:
    """Watch `panel` (a kit.panels.Panel shown as widgets): `panel.set_live_state(ENDED)` when its
    cell ends before it is closed. Registers kit's two IPython cell events once per process."""
    with _lock:
        STATE.live_panels.add(panel)
    _watch_cells()


def untrack(panel: LivePanel) -> None:
    """`panel` closed: nothing more to say of it."""
    with _lock:
        STATE.live_panels.discard(panel)


def state_now() -> str:
    """The badge a live panel's redraw shows now: RUNNING inside a cell, BACKGROUND outside one."""
    return RUNNING if cell_running() else BACKGROUND


def _shell() -> Any:
    """The running IPython shell, or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _watch_cells() -> None:
    shell = _shell()
    if shell is None or shell is STATE.cell_watch["shell"]:
        return
    shell.events.register("pre_run_cell", _cell_started)
    shell.events.register("post_run_cell", _cell_ended)
    STATE.cell_watch.update(running=True, shell=shell)


def _cell_started(*_: object) -> None:
    STATE.cell_watch["running"] = True


def _cell_ended(*_: object) -> None:
    STATE.cell_watch["running"] = False
    with _lock:
        panels = list(STATE.live_panels)
    for panel in panels:
        panel.set_live_state(ENDED)
