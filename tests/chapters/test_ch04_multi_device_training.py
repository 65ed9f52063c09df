"""Chapter 4, read against what runs: each speedup is read as its table flags it, the scaling model
beside a clean one with how far its epoch lies from the measured one; the page shows the model's
table, and its caption does not presume where the points sit."""

from __future__ import annotations

from pathlib import Path

from _chapter_cells import cell as _cell
from _chapter_cells import cells as _cells
from _chapter_cells import run as _run

CH4 = "04_multi_device_training.ipynb"


def _comparison(*seconds):
    """tests/test_comparison.py's Comparison from given per-repeat seconds (loaded by path: tests/ is
    not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_test_comparison", Path(__file__).resolve().parents[1] / "test_comparison.py"
    )
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


def test_ch4_shows_the_model_table_and_no_partial_inputs():
    source = _cell(CH4, "from kit.training.compare import Job, compare_devices")
    assert "comparison.model_table()" in source and "MODEL_WORDS" not in source


def test_ch4_caption_does_not_presume_where_the_points_sit():
    text = "".join("".join(c["source"]) for c in _cells(CH4) if c["cell_type"] == "markdown")
    assert "sit between the dotted ideal" not in text.replace("\n", " ")
    assert "sit against the dotted ideal" in text.replace("\n", " ")
