"""Chapter 3, read against what runs: it says what a spill is where the panel first shows one, and its
sentence about where they came from holds for a recorded training; its histogram's bins show the
distribution; the prefetch figures stand on one baseline and the summary repeats them."""

from __future__ import annotations

import io
import json

from _chapter_cells import cells as _cells
from _chapter_cells import holding as _cell
from _chapter_cells import run_in as _run
from _chapter_cells import scope as _scope
from _chapter_cells import source as _source
from _chapter_cells import words as _words

import kit
from kit import measure, prose
from kit.measurement.measure import Timing

CH3 = "03_training_with_workspaces"


def _first_cell_saying(chapter: str, word: str) -> int:
    """The index of the first cell whose source or stored output holds `word`."""
    for i, c in enumerate(_cells(chapter)):
        outputs = json.dumps(c.get("outputs", []))
        if word in _source(c).lower() or word in outputs.lower():
            return i
    raise AssertionError(f"{chapter}: no cell says {word!r}")


def test_chapter_3_says_what_a_spill_is_where_the_panel_first_shows_one():
    first = _first_cell_saying(CH3, "spill")
    assert "a spill is an array that did not fit in its workspace's arena" in _words(_source(_cells(CH3)[first]))
    cells = _cells(CH3)
    shown = next(i for i, c in enumerate(cells) if "spills" in json.dumps(c.get("outputs", [])))
    assert first < shown


def test_chapter_3s_spill_sentence_holds_for_a_recorded_training():
    """The sentence says: a workspace that made its arena once spilled only in the cycles it learned
    from, one that made it again spilled in a later cycle that outgrew it. A memory timeline of the
    same training shows where every spill came: in a cycle with no arena yet (its capacity, as the
    timeline recorded the cycle, 0), or in one whose arena it outgrew."""
    from kit.data import ArrayIterator, load_digits
    from kit.nn import Adam, mlp
    from kit.training.listeners import PerformanceListener

    train, _ = load_digits()
    net = mlp(64, hidden=(128,), n_out=10, updater=Adam(1e-2), seed=1)
    it = ArrayIterator(train, batch_size=16, shuffle=True, seed=1)
    panel = kit.widgets.TrainingPanel(total_iterations=2 * len(it))
    perf = PerformanceListener(frequency=len(it), report_score=True, stream=io.StringIO())
    with kit.memory_timeline() as tl:
        net.fit(it, epochs=2, listeners=[panel, perf])
    panel.close()
    stats = net.workspace_stats()["training"]
    for name, s in stats.items():
        spills = [e["cycle"] for e in tl.events if e["kind"] == "spill" and e["workspace"] == s["name"]]
        capacity = {c["cycle"]: c["capacity"] for c in tl.cycles if c["workspace"] == s["name"]}
        assert len(spills) == s["spilled_count"] > 0, name
        outgrown = sorted({c for c in spills if capacity[c] > 0})  # spilled though the arena existed
        assert len(outgrown) == s["arena_allocations"] - 1, (name, outgrown)
    # the chapter's cell, on this training: each workspace placed as its counters say
    scope = _scope(net=net, train=train, it=it, panel=panel, perf=perf)
    said = _words(_run(_cell(CH3, "scores = panel.scores"), scope))
    assert "spill policy REALLOCATE, no maximum size" in said
    once = [n for n, s in stats.items() if s["arena_allocations"] == 1]
    assert f"{', '.join(once)} made" in said
    for n, s in stats.items():
        if s["arena_allocations"] > 1:
            assert f"{n} made its arena {s['arena_allocations']} times" in said


def test_chapter_3s_histogram_cell_on_a_real_recording():
    """Section 7's cells run on a real StatsRecorder file (quick mode: 3 epochs): every iteration is
    in the histogram, no bin holds more than a quarter, and the sentence gives the fullest bin."""
    import matplotlib.pyplot as plt

    from kit.data import ArrayIterator, load_digits
    from kit.nn import Adam, mlp

    train, _ = load_digits()
    scope = _scope(train=train, ArrayIterator=ArrayIterator, mlp=mlp, Adam=Adam, plt=plt)
    _run(_cell(CH3, 'path = os.path.join(tempfile.mkdtemp(), "run.jsonl")'), scope)
    ms, counts = scope["ms"], scope["counts"]
    assert counts.sum() == len(ms) == len(scope["records"]) and counts.max() <= 0.25 * len(ms)
    said = _words(_run(_cell(CH3, "One JSON line per iteration"), scope))
    assert f"the fullest holding {int(counts.max())} of the {len(ms)} iterations" in said
    plt.close("all")


# the prefetch figures on one baseline, section 5 and the summary


def _shown_and_names(source: str, **names) -> tuple[list[str], dict]:
    """Run a cell with `names` defined: what it displays, as text, and the names it leaves."""
    shown: list[str] = []
    scope = {"prose": prose, "measure": measure, "Timing": Timing, "display": lambda x: shown.append(str(x)), **names}
    exec(source, scope)
    return shown, scope


def _shown(source: str, **names) -> list[str]:
    return _shown_and_names(source, **names)[0]


def _timing(name: str, median: float, spread: float = 0.02, load: float = 0.0) -> Timing:
    return Timing(name, [median * (1 - spread), median, median * (1 + spread)], 1, load=load)


def _prefetch(source: float, train: float, without: float, with_: float, with_load: float = 0.0) -> tuple[list, str]:
    """Section 5's cell on these medians (seconds per call), then the summary cell after it."""
    shown, scope = _shown_and_names(
        _cell(CH3, "prefetch_verdict = "),
        EPOCHS=5,
        sleep_s=train,
        train_alone=_timing("training alone", train),
        prefetch_t={
            "source alone": _timing("source alone", source),
            "without prefetch": _timing("without prefetch", without),
            "with prefetch": _timing("with prefetch", with_, load=with_load),
        },
    )

    class Step:
        median, reliable = 0.2909, True

    summary = _shown(_cell(CH3, "# the summary, its prefetch line"), prefetch_verdict=scope["prefetch_verdict"],
                   rstep=Step, mode_times={}, rnet=type("Net", (), {"num_params": 1}), xb=[0] * 4)  # fmt: skip
    return shown, summary[0]


def test_ch3_prefetch_figures_share_one_baseline_and_the_summary_repeats_them():
    shown, summary = _prefetch(source=0.101, train=0.0885, without=0.227, with_=0.130)
    parts, verdict, baseline = shown
    assert "in turn the two add up to" in parts and "its floor" in parts and "%" not in parts
    assert "with prefetch was 1.75x faster" in verdict
    # saved and hideable are both differences of the measured run without prefetch: 227 - 130 of 227 - 101
    assert "prefetch saved 97 ms of the at most 126 ms it could hide, 77% of it" in baseline
    assert "with prefetch the run took 130 ms, 29% above its floor of 101 ms, beyond the spread" in baseline
    assert "(this run: prefetch saved 97 ms of the at most 126 ms it could hide, 77% of it; with prefetch" in summary
    assert "47%" not in summary and "43%" not in summary
    at_floor = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.102)[0][-1]
    assert "at its floor of 101 ms within the spread of the repeats" in at_floor
    below = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.080)[0][-1]
    assert "more than the at most 89 ms above its floor" in below and "do not explain" in below


def test_ch3_prefetch_withholds_every_figure_from_a_flagged_or_unclear_run():
    shown, summary = _prefetch(source=0.101, train=0.0885, without=0.227, with_=0.130, with_load=0.9)
    assert shown[1].startswith("No conclusion can be drawn from this run") and len(shown) == 2
    assert "(this run: no conclusion, the timings were flagged)" in summary
    same = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.189)
    assert len(same[0]) == 2 and "(this run: no difference beyond the spread of the repeats)" in same[1]
    slower = _prefetch(source=0.101, train=0.0885, without=0.190, with_=0.230)
    assert "(this run: no gain: the run with prefetch took longer)" in slower[1]
    assert "291 ms a step" in same[1]  # the step time as the measurement line prints it
