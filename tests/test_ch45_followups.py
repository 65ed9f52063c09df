"""Read 29: a follow-up sentence of chapters 4 and 5 must follow the verdict above it. Chapter 5's
"batching cannot explain a difference there" was emitted under a verdict of "the same within the
spread", and chapter 4 read a speedup from a row its table flagged. These tests run the chapters'
own cells on constructed timings, one per branch, and read what they display."""

from __future__ import annotations

from pathlib import Path

import pytest
from _chapter_cells import cell as _cell
from _chapter_cells import run as _run

from kit.measurement.measure import Timing
from kit.parallel import InferenceMode

CH5 = "05_parallel_inference.ipynb"
SEQ, BAT = InferenceMode.SEQUENTIAL, InferenceMode.BATCHED


def _sweep(seconds: dict[tuple, list[float]], batches: dict[int, float], load: float = 0.0):
    t = {cfg: Timing(str(cfg), s, 1, load) for cfg, s in seconds.items()}
    table = {(m, c): (100.0, t[m, c].spread, 1.0, 2.0, batches[c] if m is BAT else 1.0) for (m, c) in seconds}
    return t, table


@pytest.mark.parametrize(
    ("bat_1", "load", "said"),
    [
        ([0.020, 0.021, 0.019], 0.0, "the two modes were the same within the spread there, as expected"),
        ([0.010, 0.0101, 0.0099], 0.0, "so batching cannot explain the difference the verdict above found there"),
        ([0.020, 0.021, 0.019], 0.9, "the verdict above draws no conclusion there"),
    ],
    ids=["same", "apart", "flagged"],
)
def test_ch5_batches_of_one_follow_the_verdict(bat_1, load, said):
    seconds = {
        (SEQ, 1): [0.020, 0.0205, 0.0195],
        (BAT, 1): bat_1,
        (SEQ, 64): [1.2, 1.25, 1.22],
        (BAT, 64): [0.7, 0.69, 0.71],
    }
    t, table = _sweep(seconds, {1: 1.0, 64: 15.6}, load)
    shown = _run(
        _cell(CH5, "sweep_t = t"), t=t, table=table, clients_list=[1, 64], requests=100, InferenceMode=InferenceMode
    )
    follow = [s for s in shown if "each batch held one request" in s]
    assert len(follow) == 1, shown
    branches = ("same within the spread there", "cannot explain", "draws no conclusion there")
    assert [b for b in branches if b in follow[0]] == [b for b in branches if b in said]
    # the verdict the follow-up reads is the one displayed above it
    verdict = shown[0]
    if "same within the spread there" in said:
        assert "the same within the spread of the repeats" in verdict
    elif "cannot explain" in said:
        assert "x faster" in verdict
    else:
        assert verdict.startswith("No conclusion")


@pytest.mark.parametrize(
    ("async_seq", "async_bat", "said"),
    [
        ([1 / 5000] * 3, [1 / 9000] * 3, "and neither mode moved beyond them"),
        ([1 / 5000] * 3, [1 / 17000] * 3, "why BATCHED moved as it did is not measured here"),
        ([1 / 10000] * 3, [1 / 17000] * 3, "why BATCHED and SEQUENTIAL moved as they did is not measured here"),
    ],
    ids=["neither", "one", "both"],
)
def test_ch5_asyncio_gives_no_reason_for_a_move_it_did_not_find(async_seq, async_bat, said):
    modes = (SEQ, BAT)
    sweep_t = {(SEQ, 64): Timing("s", [1.0, 1.05, 0.97], 1), (BAT, 64): Timing("b", [1.0, 1.04, 0.98], 1)}
    timing = {SEQ: Timing("SEQUENTIAL", async_seq, 6400), BAT: Timing("BATCHED", async_bat, 6400)}
    table = {(SEQ, 64): (5000.0,), (BAT, 64): (9000.0,)}
    shown = _run(
        _cell(CH5, "# asyncio tasks against"),
        timing=timing,
        sweep_t=sweep_t,
        table=table,
        modes=modes,
        InferenceMode=InferenceMode,
    )
    assert said in shown[0], shown[0]
    if "neither" in said:
        assert "not measured here" not in shown[0]


CH4 = "04_multi_device_training.ipynb"


def _comparison(*seconds):
    """tests/test_compare.py's Comparison from given per-repeat seconds (loaded by path: tests/ is
    not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_test_compare", Path(__file__).with_name("test_compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._comparison(*seconds)


def test_ch4_reads_each_speedup_as_its_table_flags_it():
    """The every-core baseline flagged, the share baseline clean: no conclusion on the speedup (and
    no scaling-model sentence, which leans on that baseline), the speedup vs share read with the
    table's own per-repeat median, not the ratio of the medians."""
    from types import SimpleNamespace

    comparison = _comparison(
        [0.5, 0.36, 0.65, 0.5, 0.52], [0.62, 0.6, 0.65, 0.623, 0.7], [0.44, 0.38, 0.49, 0.47, 0.45]
    )
    for r in comparison.rows:
        r.update(copies_per_epoch=285.0, copied_MB_per_epoch=114.0)
    comparison.model["step_s_one_device"] = 0.003
    shown = _run(
        _cell(CH4, 'rows = {r["devices"]: r for r in comparison.rows}'),
        comparison=comparison,
        big=SimpleNamespace(num_examples=8192),
        job=SimpleNamespace(batch_size=64),
    )
    two = comparison.rows[1]
    assert shown[0].startswith("No conclusion") and "one device (every core): spread" in shown[0]
    assert not any("scaling model predicted" in s for s in shown)
    (share,) = [s for s in shown if "speedup vs share" in s]
    assert f"its median, {two['speedup_vs_share']:.2f}x, is the table's speedup vs share" in share
    ratio_of_medians = comparison.timings["share"].median / comparison.timings[2].median
    assert f"{ratio_of_medians:.2f}x" not in share and f"{ratio_of_medians:.3g}x" not in share
    assert shown[-1].startswith("Counted, not timed: one epoch of the two workers made 285 copies")


def test_ch4_reads_a_clean_speedup_with_the_model_beside_it():
    from types import SimpleNamespace

    even = [1.0, 1.02, 0.98, 1.01, 0.99]
    comparison = _comparison(even, [1.1, 1.11, 1.09, 1.1, 1.12], [0.6, 0.61, 0.59, 0.6, 0.62])
    for r in comparison.rows:
        r.update(copies_per_epoch=285.0, copied_MB_per_epoch=114.0)
    comparison.model["step_s_one_device"] = 1.0 / 128
    shown = _run(
        _cell(CH4, 'rows = {r["devices"]: r for r in comparison.rows}'),
        comparison=comparison,
        big=SimpleNamespace(num_examples=8192),
        job=SimpleNamespace(batch_size=64),
    )
    assert "its median, " in shown[0] and "is the table's speedup, efficiency" in shown[0]
    assert "The scaling model predicted 1.50x" in shown[1]
    assert "the same to within 1%, within kit.measure's 25% spread limit" in shown[1]  # the gap, measured
    assert "is the table's speedup vs share" in shown[2]


def test_ch4_says_how_far_the_models_epoch_lies_from_the_measured_one():
    from types import SimpleNamespace

    even = [1.0, 1.02, 0.98, 1.01, 0.99]
    shown = {}
    for step, words in ((0.81 / 128, "19% below it, within"), (0.6 / 128, "40% below it, more than")):
        comparison = _comparison(even, [1.1, 1.11, 1.09, 1.1, 1.12], [0.6, 0.61, 0.59, 0.6, 0.62])
        for r in comparison.rows:
            r.update(copies_per_epoch=285.0, copied_MB_per_epoch=114.0)
        comparison.model["step_s_one_device"] = step
        shown[words] = _run(
            _cell(CH4, 'rows = {r["devices"]: r for r in comparison.rows}'),
            comparison=comparison,
            big=SimpleNamespace(num_examples=8192),
            job=SimpleNamespace(batch_size=64),
        )[1]
    for words, said in shown.items():
        assert words in said and "close to" not in said, said
