"""kit.monitor.timeline_views: what a recorded memory timeline shows. The summary per workspace
agrees with the workspaces' own counters and with a run worked by hand; the cycle plot() draws is
the one asked for, or an error naming what was recorded; the Chrome trace has a span per cycle,
an instant per event and the arena's bytes in use as a counter, and is written atomically."""

import json
import os

import pytest
from _timeline_run import batches, trained_in_timeline

import kit
from kit import timeline_views
from kit.data import load_digits
from kit.monitor.timeline import MemoryTimeline, TimelineError
from kit.nn import Sgd, WorkspaceMode, mlp
from kit.workspaces.workspace import AllocationPolicy, LearningPolicy, WorkspaceConfig


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture
def trained(digits):
    return trained_in_timeline(digits[0])


def test_summary_counts_what_each_workspace_counts(trained):
    tl, workspaces = trained
    rows = {r["workspace"]: r for r in tl.summary()}
    for name, ws in workspaces.items():
        row = rows[name]
        assert (row["cycles"], row["allocations"], row["resets"]) == (ws.cycles, ws.allocations, ws.resets)
        assert (row["spills"], row["spilled_bytes"], row["peak_offset"]) == (
            ws.spilled_count,
            ws.spilled_bytes,
            ws.peak_used,
        )
    page = tl._repr_html_()
    assert page.startswith("<table") and all(name in page for name in workspaces)


def test_a_workspace_that_carved_nothing_reads_the_same_in_the_summary(digits):
    """SEPARATE with Sgd: the updater's scope opens every iteration and carves nothing (the update
    is written over the gradient); the summary still agrees with the workspace, peak 0 included."""
    train, _ = digits
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SEPARATE)
    with kit.memory_timeline() as tl:
        for ds in batches(train, 3):
            net.fit(ds)
    rows = {r["workspace"]: r for r in tl.summary()}
    updater = [ws for ws in kit.workspace.all_workspaces() if ws.name in rows and "UPDATER" in ws.name]
    assert len(updater) == 1 and updater[0].allocations == 0 and updater[0].cycles == 3
    row = rows[updater[0].name]
    assert (row["cycles"], row["allocations"], row["bytes"], row["peak_offset"]) == (3, 0, 0, updater[0].peak_used)
    assert rows[None]["peak_offset"] is None  # the heap has no offsets


def test_save_trace_writes_chrome_trace_json(trained, tmp_path):
    tl, _ = trained
    path = tmp_path / "fit.json"
    path.write_text("old")
    assert tl.save_trace(path) == path
    assert os.listdir(tmp_path) == ["fit.json"]  # no temporary file left
    trace = json.loads(path.read_text())["traceEvents"]
    last: dict[int, float] = {}
    for e in trace:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e) and "args" in e
        assert e["ts"] >= last.get(e["tid"], 0.0)
        last[e["tid"]] = e["ts"]
    phases = [e["ph"] for e in trace]
    assert phases.count("X") == len(tl.cycles) and phases.count("i") == len(tl.events) and "C" in phases
    counters = [e for e in trace if e["ph"] == "C" and e["name"].endswith("WS_ALL_LAYERS_ACT arena bytes in use")]
    acts = next(r for r in tl.summary() if (r["workspace"] or "").endswith("WS_ALL_LAYERS_ACT"))
    assert max(e["args"]["bytes"] for e in counters) == acts["peak_offset"]


def test_save_trace_is_atomic(trained, tmp_path, monkeypatch):
    tl, _ = trained
    path = tmp_path / "fit.json"
    path.write_text('{"traceEvents": []}')

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(timeline_views.json, "dump", broken)  # save_trace writes in kit.timeline_views
    with pytest.raises(OSError, match="disk full"):
        tl.save_trace(path)
    assert path.read_text() == '{"traceEvents": []}' and os.listdir(tmp_path) == ["fit.json"]


def test_plot_draws_one_bar_per_allocation_of_the_chosen_cycle(trained):
    from matplotlib.figure import Figure

    tl, _ = trained
    cycle, allocs = tl.cycle_events()
    assert cycle["workspace"].endswith("WS_ALL_LAYERS_ACT") and cycle["cycle"] == 5  # most bytes; last cycle
    fig = tl.plot()
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.patches) == len(allocs) > 0
    bars = sorted((p.get_x(), p.get_width()) for p in ax.patches)
    assert bars == sorted((e["offset"], e["nbytes"]) for e in allocs)
    assert ax.get_xlabel() and ax.get_ylabel() and fig.legends and not ax.get_legend()  # legend beside the axes
    first = tl.plot(cycle=1, workspace=cycle["workspace"])  # the learning cycle: everything spilled
    spills = [e for e in tl.events if e["workspace"] == cycle["workspace"] and e["cycle"] == 1]
    spills = [e for e in spills if e["kind"] == "spill"]
    assert len(first.axes[0].patches) == len(spills) > 0
    assert all(p.get_hatch() == "//" for p in first.axes[0].patches)
    with pytest.raises(TimelineError, match="no complete workspace cycle"):
        tl.plot(workspace="NOT_A_WORKSPACE")


def test_an_empty_timeline_says_there_is_nothing_to_plot():
    tl = MemoryTimeline()
    assert tl.summary() == [] and "0 events" in tl._repr_html_()
    with pytest.raises(TimelineError, match="recorded: none"):
        tl.plot()


# ---- a run worked by hand: a 512-byte arena, two 256-byte arrays a cycle, a third spills in cycle 4 ----


@pytest.fixture
def by_hand():
    cfg = WorkspaceConfig(
        initial_size=512, policy_allocation=AllocationPolicy.STRICT, policy_learning=LearningPolicy.NONE
    )
    ws = kit.get_workspace_for_current_thread(cfg, "HAND")
    with kit.memory_timeline() as tl:
        for n in (2, 2, 2, 3):
            with ws:
                keep = [kit.empty((64,), dtype="float32") for _ in range(n)]  # 256 B each
        del keep  # the spilled array's heap memory goes back
    return tl


def test_the_summary_of_a_run_worked_by_hand(by_hand):
    (row,) = by_hand.summary()
    assert row == {
        "workspace": "HAND",
        "thread": "MainThread",
        "device": "cpu:0",
        "cycles": 4,
        "allocations": 9,  # 2 + 2 + 2 + 3, the spill counted as Workspace.allocations counts it
        "bytes": 9 * 256,
        "peak_offset": 512,  # the arena full, never past it: the spill has no offset
        "spills": 1,
        "spilled_bytes": 256,
        "resets": 4,  # one per cycle's end
        "releases": 1,  # the spill's heap memory
        "replays": 0,
    }
    assert repr(by_hand) == "<MemoryTimeline stopped: 14 events, 4 cycles>"
    assert "<td>2,304</td>" in by_hand._repr_html_() and "14 events, 4 cycles" in by_hand._repr_html_()


def test_cycle_events_chooses_the_cycle_asked_for_or_names_what_was_recorded(by_hand):
    last, allocs = by_hand.cycle_events()
    assert (last["cycle"], last["bytes"], last["spilled_bytes"], last["capacity"]) == (4, 768, 256, 512)
    assert [(e["kind"], e["offset"], e["nbytes"]) for e in allocs] == [
        ("alloc", 0, 256),
        ("alloc", 256, 256),
        ("spill", None, 256),
    ]
    second, allocs = by_hand.cycle_events(cycle=2, workspace="HAND", thread="MainThread")
    assert second["cycle"] == 2 and [e["offset"] for e in allocs] == [0, 256]
    with pytest.raises(TimelineError) as info:
        by_hand.cycle_events(cycle=9)
    assert (
        str(info.value)
        == "workspace 'HAND' has no complete cycle 9 in this timeline; its complete cycles: [1, 2, 3, 4]"
    )
    with pytest.raises(TimelineError, match=r"workspace='NOPE' thread=None; recorded: \[\('HAND', 'MainThread'\)\]"):
        by_hand.plot(workspace="NOPE")
    with pytest.raises(TimelineError, match=r"thread='worker'"):
        by_hand.cycle_events(workspace="HAND", thread="worker")


def test_the_plot_of_a_cycle_with_a_spill_draws_it_hatched_past_the_arena(by_hand):
    fig = by_hand.plot()
    bars = [(p.get_x(), p.get_width(), p.get_hatch()) for p in fig.axes[0].patches]
    assert bars == [(0, 256, None), (256, 256, None), (512, 256, "//")]  # the spill starts at the capacity
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["untyped (a kit op)", "spill (heap)", "arena capacity (512 B)"]
    assert fig.axes[0].get_title() == "HAND, cycle 4 (MainThread, cpu:0): 3 allocations, 768 bytes"


def test_the_trace_has_a_span_per_cycle_an_instant_per_event_and_the_bytes_in_use(by_hand):
    trace = by_hand.trace_events()
    meta = [e for e in trace if e["ph"] == "M"]
    assert [(e["name"], e["tid"], e["args"]["name"]) for e in meta] == [
        ("process_name", 0, "kit memory timeline"),
        ("thread_name", 1, "MainThread"),
    ]
    spans = [e for e in trace if e["ph"] == "X"]
    assert [e["name"] for e in spans] == [f"HAND cycle {c}" for c in (1, 2, 3, 4)]
    assert [e["args"]["bytes"] for e in spans] == [512, 512, 512, 768]
    assert [e["name"] for e in trace if e["ph"] == "i"] == [e["kind"] for e in by_hand.events]
    counter = [e["args"]["bytes"] for e in trace if e["ph"] == "C"]
    assert counter == [256, 512, 0] * 3 + [256, 512, 0]  # offset + nbytes at each alloc, the offset at a reset
    assert all(e["name"] == "HAND arena bytes in use" for e in trace if e["ph"] == "C")
    timed = [e["ts"] for e in trace if e["ph"] != "M"]
    assert timed == sorted(timed) and all(e["pid"] == os.getpid() for e in trace)


def test_a_saved_trace_reads_back_as_the_trace_events(by_hand, tmp_path):
    path = by_hand.save_trace(str(tmp_path / "hand.json"))
    doc = json.loads(path.read_text())
    assert doc == {"traceEvents": by_hand.trace_events(), "displayTimeUnit": "ms"}


def test_an_unused_timeline_shows_an_empty_table():
    tl = MemoryTimeline()
    assert tl.trace_events()[1:] == [] and repr(tl) == "<MemoryTimeline stopped: 0 events, 0 cycles>"
