"""Chapter 1, read against what runs: section 3 says the allocation mechanism that runs, section 5's
sentence names only the rows section 4 flagged, and its reference sentence quotes no figure the
reference run's own report flags."""

from __future__ import annotations

import json
from pathlib import Path

from _chapter_cells import holding as _cell
from _chapter_cells import words as _words
from _reports import flagged_report as _flagged_report

from kit import measure, prose, reference
from kit.measurement.measure import Timing

CH1 = "01_arrays_and_backends"


def test_chapter_1_section_3_says_the_mechanism_that_runs():
    text = _words(_cell(CH1, "## 3. Array basics", "markdown"))
    assert "Every result is allocated through one function" not in text  # the finding
    assert "counted by one function, `kit.memory.count`" in text
    assert "let NumPy allocate the result inside the op, as the raw NumPy call does" in text
    assert "`kit.memory.allocate`, for its result, and computes into it with `out=`" in text
    opening = _words(_cell(CH1, "Counted, not timed, so the same on every machine"))
    assert "went through kit's one allocation function" not in opening
    assert "one counted allocation function" not in _words(_cell(CH1, "kit's answer is one array type", "markdown"))


def _scope(source: str, **names) -> tuple[list[str], dict]:
    """Run a cell with `names` defined: what it displays, as text, and the names it leaves."""
    shown: list[str] = []
    scope = {"prose": prose, "measure": measure, "Timing": Timing, "display": lambda x: shown.append(str(x)), **names}
    exec(source, scope)
    return shown, scope


def _run(source: str, **names) -> list[str]:
    return _scope(source, **names)[0]


def _row(op: str, raw_us: float, reliable: bool = True, spread: float = 0.05) -> dict:
    warnings = [] if reliable else [f"spread ±{spread:.0%} is wider than ±25%"]
    row = {"op": op, "elements": 1_000_000, "raw_us": raw_us, "spread": spread}
    return row | {"reliable": "yes" if reliable else "NO", "warnings": warnings * 2}  # kit's and raw's warnings


def test_ch1_names_only_the_rows_section_4_flagged():
    cell = _cell(CH1, "flagged_rows")
    [said] = _run(cell, rows4=[_row("add", 500), _row("exp", 2000, reliable=False, spread=0.41)])
    assert said.startswith("No conclusion can be drawn from this run")
    assert "the exp row (spread ±41% is wider than ±25%)" in said and "was flagged" in said
    assert "add row" not in said and "raw add and raw exp" not in said
    assert said.count("spread ±41%") == 1  # kit's and raw's warnings, each said once
    [both] = _run(cell, rows4=[_row("add", 500, reliable=False), _row("exp", 2000, reliable=False)])
    assert "the add row" in both and "the exp row" in both and "were flagged" in both
    [clean] = _run(cell, rows4=[_row("add", 500), _row("exp", 2000)])
    assert "exp took 2,000 µs and add 500 µs, 4.00 times as long" in clean and "No conclusion" not in clean


def test_ch1_does_not_quote_a_reference_per_op_cost_its_own_report_flags(tmp_path):

    from kit import prose

    report = _flagged_report(tmp_path)
    report["parts"]["chapters"]["01.ipynb"] = {"figures": {"float16 speed / float32 speed": 0.99}, "mode": "quick"}
    (tmp_path / "g1.json").write_text(json.dumps(report))
    added = "kit added per small op (median, µs)"
    ref = reference.beside(
        {added: 1.1, "float16 speed / float32 speed": 0.13},
        {added: "benchmarks.arrays.result.summary.small_added_us_median"},
        directory=tmp_path,
        device="cpu:0",
    )
    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "01_arrays_and_backends.ipynb").read_text())
    (src,) = ["".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith("HALF, ADDED =")]
    shown = []
    env = {"ref": ref, "reference": reference, "prose": prose, "display": shown.append}
    exec(src, {**env, "HALF_QUICK": 1_000_000, "HALF_FULL": 8_000_000})
    text = str(shown[0])
    assert "2.5" not in text and "is one that run's own report flags, so it is not quoted here" in text
