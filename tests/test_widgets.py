"""kit.monitor.widgets: the memory, training and worker panels, in plain text and as widgets."""

import math
import os

import nbformat
import pytest

import kit
from kit.monitor.widgets import MemoryPanel, TimingPanel, TrainingPanel, WorkerPanel, in_notebook


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
