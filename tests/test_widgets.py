import kit
from kit.widgets import MemoryPanel, TimingPanel, format_bytes, in_notebook


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
    ws = kit.get_workspace_for_current_thread(name="WIDGET")
    panel = MemoryPanel(widgets=True, display=False, interval=3600)
    for _ in range(5):
        with ws:
            kit.ones((1000,))
        panel.update()
    assert panel._throttle.updates == 1  # only the first draw got through the throttle
    panel.close()
    _label, bar, info = next(row for key, row in panel._rows.items() if key.endswith("/WIDGET"))
    assert bar.value > 0 and bar.value <= bar.max
    assert "cycles 5" in info.value
    assert "heap allocations through kit" in panel._footer.value


def test_timing_panel_counts_and_reports_rate():
    timer = TimingPanel(total=30, widgets=True, display=False, interval=3600)
    for _ in range(30):
        timer.tick()
    timer.close()
    assert timer.count == 30 and timer._bar.value == 30
    assert "30/30" in timer._info.value and "/s" in timer._info.value
    assert timer.median_seconds >= 0


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(2048) == "2.0 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
