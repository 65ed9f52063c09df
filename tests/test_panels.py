"""kit.monitor.panels: what every panel shares, and the timing and progress panels.

Issue 45 item 8: a panel's text wrapped a unit onto a line of its own ("in 18" / "s"). Every text
a panel shows as HTML, live (each widget's value) or final (its static table), keeps each number
beside its unit with a no-break space: checked over every kind of panel kit has, each driven until
its lines hold times, byte counts and rates. Progress (issue 23 item 4) says what a long cell is
doing while it runs, and a line whose work raised says it stopped (none is left at 0 %)."""

from __future__ import annotations

import html
import re

import ipywidgets as w
import pytest

import kit
from kit import panels, widgets
from kit.monitor.panels import (
    UNITS,
    Panel,
    Progress,
    StaticPanel,
    Throttle,
    TimingPanel,
    bar_html,
    format_bytes,
    keep_units,
    note_html,
    panel_html,
    table_html,
)
from kit.monitor.widgets import MemoryPanel, TrainingPanel, WorkerPanel

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


def test_timing_panel_counts_and_reports_rate_without_repeating_its_label():
    timer = TimingPanel(total=30, label="workspace loop", widgets=True, display=False, interval=3600)
    for _ in range(30):
        timer.tick()
    timer.close()
    assert timer.count == 30 and timer._bar.value == 30
    assert "30/30" in timer._info.value and "/s" in timer._info.value
    assert "workspace loop" not in timer._info.value  # the label sits beside the bar once
    assert timer.median_seconds >= 0
    assert "workspace loop" in timer.static().html and "30/30" in timer.static().html


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(2048) == "2.0 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"


def test_progress_counts_every_step_of_compare_and_is_called_only_between_timed_runs():
    from kit.measurement.measure import compare
    from kit.monitor.widgets import Progress

    calls = {"a": 0, "b": 0}
    seen = []

    def variant(k):
        def fn():
            calls[k] += 1

        return fn

    def progress(done, total, note):
        seen.append((done, total, note, dict(calls)))

    compare({"a": variant("a"), "b": variant("b")}, number=3, repeats=4, progress=progress)
    total = 2 * (1 + 4)  # a warm-up and 4 repeats per variant; no calibration with number given
    assert [d for d, *_ in seen] == list(range(1, total + 1)) and {t for _, t, *_ in seen} == {total}
    assert [n for *_, n, _ in seen][:2] == ["warm-up: a", "warm-up: b"] and seen[-1][2].startswith("repeat 4 of 4")
    # each call comes after a whole run: the calls made so far are 1 (warm-up) + 3 per repeat done
    for _, _, note, made in seen[2:]:
        assert all((c - 1) % 3 == 0 for c in made.values()), (note, made)
    bar = Progress("timing a and b", widgets=False, display=False)
    compare({"a": variant("a")}, min_time=1e-4, repeats=2, progress=bar)
    assert (bar.done, bar.total) == (4, 4)  # warm-up, calibration, 2 repeats


def test_progress_text_mode_says_what_how_far_and_how_long_and_ends_once(capsys):
    from kit.monitor.widgets import Progress

    with Progress("training three nets", total=3, text_interval=3600) as bar:
        for _ in bar.iter(range(3)):
            pass
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("training three nets")]
    assert out[0].startswith("training three nets: 1/3, ") and "left" in out[0]
    assert out[-1].startswith("training three nets: 3/3 steps (100%) in ") and len(out) == 2


def test_progress_widget_leaves_a_static_final_line_and_refuses_bad_arguments():
    from kit.monitor.widgets import Progress

    bar = Progress("timing", widgets=True, display=False, interval=3600)
    bar(1, 4, "repeat 1")
    assert bar._bar.max == 4 and bar._bar.value == 1 and "about" in bar._info.value
    bar(4)
    bar.close()
    static = bar.static()
    assert "timing" in static.html and "4/4 steps (100%)" in static.html and "left" not in static.html
    assert repr(static).startswith("timing: 4/4 steps")
    unknown = Progress("counting", widgets=False, display=False)
    unknown.tick(2)
    assert unknown._numbers().startswith("2 steps, ")
    for kw, message in [
        ({"what": ""}, r"what=''\): say what is being measured"),
        ({"what": "x", "total": -1}, r"total=-1\): must be a whole number >= 0"),
        ({"what": "x", "total": 2.5}, r"total=2.5\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            Progress(**kw, display=False)


def test_a_final_panel_wraps_its_text_at_spaces_and_keeps_its_bar_whole():
    """Progress panels in chapter 4 were wider than the notebook column: their numbers never
    wrapped. Text cells wrap at spaces now; the bar's cell keeps its width."""
    import re

    from kit.monitor.widgets import Progress

    bar = Progress("a long description of what is being timed", widgets=True, display=False, interval=3600)
    bar(3, 3)
    bar.close()
    cells = re.findall(r'<td style="([^"]*)">(.*?)</td>', bar.static().html)
    assert len(cells) == 3
    for style, content in cells:
        expected = "nowrap" if content.startswith("<span") else "normal"
        assert f"white-space:{expected}" in style, (style, content[:40])
    assert sum(content.startswith("<span") for _, content in cells) == 1  # one bar


def test_a_progress_line_whose_work_raises_says_it_stopped():
    from kit.monitor.widgets import Progress

    with pytest.raises(RuntimeError), Progress("starting Spark", total=1, widgets=False, display=False) as bar:
        raise RuntimeError("no Java")
    assert bar.stopped == "RuntimeError"
    assert "stopped after 0/1 steps" in bar.last_text and "%" not in bar.last_text
    static = bar.static()
    assert "stopped" in static.html and "width:0.0%" not in static.html  # no empty bar drawn


def test_a_progress_line_whose_work_ends_still_says_how_far_it_got():
    from kit.monitor.widgets import Progress

    with Progress("two steps", total=2, widgets=False, display=False) as bar:
        bar.tick()
        bar.tick()
    assert bar.stopped == "" and "2/2 steps (100%)" in bar.last_text


# ---- the pieces every panel is drawn with -------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 2**20, "5.0 MiB"),
        (2**40, "1024.0 GiB"),  # GiB is the largest unit
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_bytes_picks_the_largest_unit_under_1024(n, text):
    assert format_bytes(n) == text


def test_a_throttle_lets_the_first_draw_and_every_forced_one_through():
    never_again = Throttle(float("inf"))
    assert [never_again.ready(False), never_again.ready(False), never_again.ready(True), never_again.ready(False)] == [
        True,
        False,
        True,
        False,
    ]
    assert never_again.updates == 2
    always = Throttle(0.0)
    assert all(always.ready(False) for _ in range(5)) and always.updates == 5


@pytest.mark.parametrize(
    ("fraction", "width"), [(-1.0, "0.0%"), (0.0, "0.0%"), (0.25, "25.0%"), (1.0, "100.0%"), (2.0, "100.0%")]
)
def test_a_bar_is_filled_to_its_fraction_kept_within_0_and_1(fraction, width):
    bar = bar_html(fraction, width=80)
    assert "width:80px" in bar and f"width:{width}" in bar


def test_panel_text_is_escaped_and_keeps_its_units_and_a_flagged_note_is_red():
    assert panel_html("<b> 5 ms & 3 s") == "&lt;b&gt; 5\u00a0ms &amp; 3\u00a0s"
    assert "color:#c00" in note_html("machine busy: flagged") and "color:#666" in note_html("one run, not repeated")
    assert "1\u00a0s" in note_html("took 1 s")


def test_a_table_has_a_header_row_and_a_footer_only_when_given_them():
    rows = [["a", "1"], ["b", "2"]]
    plain, full = table_html("T", [], rows), table_html("T", ["name", "n"], rows, footer="the end")
    assert plain.count("<tr>") == 2 and "<th" not in plain and "the end" not in plain
    assert full.count("<tr>") == 3 and full.count("<th") == 2 and '<div style="margin-top:3px">the end</div>' in full
    assert full.count("<td") == 4 and "<b>T</b>" in full


def test_a_static_panel_shows_its_html_to_notebooks_and_its_text_elsewhere():
    panel = StaticPanel("<b>done</b>", "done")
    assert panel._repr_html_() == "<b>done</b>" and repr(panel) == "done"


def test_progress_iter_counts_items_of_unknown_length_and_takes_the_length_where_there_is_one():
    unknown = Progress("reading", widgets=False, display=False, text_interval=3600)
    assert list(unknown.iter(i * i for i in range(4))) == [0, 1, 4, 9]
    assert (unknown.done, unknown.total) == (4, None)
    known = Progress("reading", widgets=False, display=False, text_interval=3600)
    assert list(known.iter("abc")) == ["a", "b", "c"] and (known.done, known.total) == (3, 3)
    with known:
        pass
    assert known.last_text.startswith("reading: 3/3 steps (100%) in ")
