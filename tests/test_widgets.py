import math
import os

import nbformat
import pytest

import kit
from kit.monitor.widgets import MemoryPanel, TimingPanel, TrainingPanel, WorkerPanel, format_bytes, in_notebook


def test_plain_text_outside_a_kernel_is_throttled_and_ends_with_the_final_state(capsys):
    assert not in_notebook()
    ws = kit.get_workspace_for_current_thread(name="PANEL")
    panel = MemoryPanel(text_interval=3600)
    for _ in range(200):
        with ws:
            kit.ones((64,)) * 2
        panel.update()
    panel.close()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory:")]
    assert len(lines) == 2  # the first state and the final one: 200 updates throttled away
    assert "PANEL" in lines[-1] and "cycles 200" in lines[-1] and "RSS" in lines[-1]


def test_widgets_show_workspace_rows_and_final_values():
    ws = kit.get_workspace_for_current_thread(name="A_LONG_WORKSPACE_NAME_THAT_MUST_NOT_BE_CUT")
    panel = MemoryPanel(widgets=True, display=False, interval=3600)
    for _ in range(5):
        with ws:
            kit.ones((1000,))
        panel.update()
    assert panel._throttle.updates == 1  # only the first draw got through the throttle
    panel.close()
    label, bar, info = next(row for key, row in panel._rows.items() if key.endswith("/" + ws.name))
    assert ws.name in label.value  # the whole name, not "A_LONG_WORKSP..."
    assert bar.value > 0 and bar.value <= bar.max
    assert "cycles 5" in info.value
    assert "heap allocations through kit" in panel._footer.value
    static = panel.static()
    assert ws.name in static.html and "cycles 5" in static.html and "(final)" in static.html
    assert "cycles 5" in repr(static)  # plain viewers get the text, not a widget repr


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


def test_worker_panel_has_one_row_per_worker_and_never_counts_past_its_total():
    panel = WorkerPanel(2, total_iterations=10, widgets=True, display=False, interval=3600)
    for it in range(10):
        panel.iteration_done(None, it, 0, worker=it % 2)
    panel.close()
    assert panel.counts == [5, 5] and panel._bar.value == 10
    assert [r.value.split(":")[0] for r in panel._rows] == ["worker 0", "worker 1"]
    assert "10 of 10 iterations" in panel.static().html
    with pytest.raises(ValueError, match="worker 2 reported"):
        panel.iteration_done(None, 11, 0, worker=2)


def test_training_panel_accepts_both_listener_forms(capsys):
    panel = TrainingPanel(total_iterations=4, widgets=False, memory=False)
    panel.on_epoch_start(None)
    panel.on_epoch_start(None, 0)
    for i in range(4):
        panel.iteration_done(None, i, 0, score=1.0 / (i + 1))
    panel.on_epoch_end(None, 0)
    panel.close()
    assert "loss: last 0.25," in capsys.readouterr().out
    assert "epochs done 1" in panel.static().html


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(2048) == "2.0 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"


def test_a_closed_panel_leaves_static_html_in_the_saved_notebook(tmp_path, monkeypatch):
    """In a real kernel: the live widget is replaced, through its display id, by the final state
    as HTML, so the stored notebook holds no widget output and no raw widget repr."""
    from nbclient import NotebookClient

    code = (
        "import kit\n"
        "ws = kit.get_workspace_for_current_thread(name='SAVED')\n"
        "panel = kit.widgets.MemoryPanel()\n"
        "timer = kit.widgets.TimingPanel(total=20, label='loop')\n"
        "for _ in range(20):\n"
        "    with ws:\n"
        "        kit.ones((100,))\n"
        "    panel.update(); timer.tick()\n"
        "panel.close(); timer.close()"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    # the kernel imports the same kit as this test (a checkout, or a snapshot of one)
    here = os.path.dirname(os.path.dirname(kit.__file__))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    kinds = [k for o in outputs for k in o.get("data", {})]
    assert "application/vnd.jupyter.widget-view+json" not in kinds, outputs
    htmls = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("kit memory (final)" in h and "SAVED" in h and "cycles 20" in h for h in htmls), htmls
    assert any("20/20" in h for h in htmls)
    plain = " ".join(o["data"].get("text/plain", "") for o in outputs if "data" in o)
    assert "VBox(" not in plain and "HTML(value=" not in plain


# ---- Progress: what a long cell shows while it runs (issue 23 item 4) -----------------------


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
        ({"what": "x", "total": -1}, r"total=-1\): a whole number"),
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


def test_worker_panel_says_the_mean_over_the_run_beside_the_recent_median(monkeypatch):
    """Chapter 4 printed 'median step 8.16 ms' for a run of 1,350 steps in 82 s: the median was of
    the last 50 steps only. The row gives the run's mean step and names the median's window."""
    import kit.monitor.widgets as widgets

    now = [0.0]
    monkeypatch.setattr(widgets.time, "perf_counter", lambda: now[0])  # a clock the test drives
    panel = WorkerPanel(1, total_iterations=60, widgets=False, display=False)
    for step in range(60):  # ten slow steps, then fifty fast ones
        now[0] += 0.1 if step < 10 else 0.01
        panel.iteration_done(None, step, 0, worker=0)
    assert panel.mean_step(0) == pytest.approx((10 * 0.1 + 50 * 0.01) / 60)
    row = panel._row_text(0)
    assert "mean step 25.00 ms" in row and "median of the last 50 10.00 ms" in row, row
    assert math.isnan(WorkerPanel(2, widgets=False, display=False).mean_step(1))  # no steps yet


def test_a_worker_panel_names_its_run():
    panel = WorkerPanel(2, total_iterations=4, widgets=False, display=False, title="2 workers, F = 5")
    assert "2 workers, F = 5 (final)" in panel.static()._repr_html_()
    assert "workers (final)" in WorkerPanel(1, widgets=False, display=False).static()._repr_html_()
    with pytest.raises(ValueError, match="title=''"):
        WorkerPanel(1, widgets=False, display=False, title="")


def test_a_panel_says_its_times_are_one_unchecked_run_and_flags_a_busy_machine():
    """A live panel's times are one run (no spread): its final state says so, with the machine's
    load while it ran, flagged above kit.measure's limit. A real burner process makes the load."""
    import os
    import subprocess
    import sys
    import time

    from kit.measurement.measure import LOAD_LIMIT, LoadReading, unchecked_note

    quiet, busy = LoadReading(others=LOAD_LIMIT / 2), LoadReading(others=LOAD_LIMIT * 2)
    assert "flagged" not in unchecked_note(quiet) and "one run, not repeated" in unchecked_note(quiet)
    assert "machine busy: flagged" in unchecked_note(busy)
    # a burner per core: busy beyond the limit on any machine, whatever its core count
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        panel = TimingPanel(total=3, widgets=False, display=False)
        for _ in range(3):
            time.sleep(0.3)
            panel.tick()
        final = panel.static()
    finally:
        for b in burners:
            b.kill()
            b.wait(timeout=10)
    assert "machine busy: flagged" in final._repr_html_() and "one run, not repeated" in repr(final)
    worker = WorkerPanel(1, widgets=False, display=False).static()
    assert "one run, not repeated" in worker._repr_html_()


# a progress line whose work raises says it stopped (none is left at 0 %)


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
