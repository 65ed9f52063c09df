"""Chapter 7's side-by-side with TorchDistributor and its updater comparison.

- the words come from the rows: a table test over runs made here (TorchDistributor ran or not,
  the run flagged or not, either save_updater the default) checks each sentence against its table;
- the stored chapter's sentences match its stored tables (the chapter's own run, read back);
- the chapter's cells, run for real in a subprocess with torch blocked (`sys.modules["torch"] = None`)
  and with torch importable, say whether TorchDistributor ran and why not.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _chapter_cells import cell, cells

from kit.bench import spark_chapter
from kit.bench.spark_peers import TARGET, goals
from kit.measurement.goals import FLAGGED
from kit.measurement.load import LoadReading
from kit.measurement.tables import WIDTH

CH7 = "07_training_on_spark.ipynb"
ROOT = Path(__file__).resolve().parents[2]
RUN_CELL, TORCH_CELL, SHOW_CELL, UPDATER_CELL = (
    "# the side-by-side: kit's bench code",
    "# the side-by-side: PyTorch in one process",
    "# the side-by-side's table",
    "# the updater kept against restarted",
)
# the bench's row names, and the chapter's short labels for them
DEFAULTS, FIT, DDP, PEER, TORCH = (
    spark_chapter.DEFAULTS,
    spark_chapter.FIT,
    spark_chapter.DDP,
    spark_chapter.PEER,
    spark_chapter.TORCH,
)
L_DEFAULTS, L_FIT, L_DDP, L_PEER, L_TORCH = (spark_chapter.label(n) for n in (DEFAULTS, FIT, DDP, PEER, TORCH))


# --- a run made here: every branch of the sentences ------------------------------------------------------------


def _row(system, per_step, overhead, to_target, right, semantics="-"):
    return {
        "system": system,
        "semantics": semantics,
        "call_s": 10 * per_step,
        "per_step_ms": per_step,
        "overhead_ms": overhead,
        "to_target_s": to_target,
        "final_accuracy": float(right.mean()),
    }


def _peers(torch_ran: bool, default_kept: bool, load_average=(0.1, 0.1), others: float = 0.01) -> dict:
    rng = np.random.default_rng(1)
    right = {name: rng.random(400) < p for name, p in ((FIT, 0.8), (DEFAULTS, 0.78), (DDP, 0.8), (TORCH, 0.81))}
    other = f"kit averaging, save_updater={not default_kept}"
    right[other] = rng.random(400) < 0.7
    rows = [
        _row(FIT, 2.0, float("nan"), 3.0, right[FIT]),
        _row(DEFAULTS, 20.0, 18.0, float("nan"), right[DEFAULTS], f"rounds, updater {'kept' if default_kept else 'x'}"),
        _row(other, 21.0, 19.0, float("nan"), right[other], "rounds, the other setting"),
        _row(DDP, 4.0, 2.0, 5.0, right[DDP], "gang, gradients every 1 step(s), updater kept"),
    ]
    if torch_ran:
        right[PEER] = rng.random(400) < 0.81
        rows += [_row(TORCH, 1.5, float("nan"), 2.0, right[TORCH]), _row(PEER, 4.5, 3.0, 6.0, right[PEER])]
    else:
        right.pop(TORCH)
    return {
        "data": "synthetic (512 train, 400 test)",
        "epochs": 1,
        "steps_per_epoch": 16,
        "test_examples": 400,
        "rows": rows,
        "right": right,
        "torch_distributor": "ran" if torch_ran else "torch is not importable (ModuleNotFoundError: x)",
        "goals": goals(rows, LoadReading(others=others)),
        "machine_load_by_others": others,
        "load_average": list(load_average),
        "skipped": {},
    }


CASES = [
    (torch_ran, default_kept, busy)
    for torch_ran in (True, False)
    for default_kept in (True, False)
    for busy in ("calm", "others-busy", "own-busy", "run-others-busy")
]


@pytest.mark.parametrize(("torch_ran", "default_kept", "busy"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_sentences_say_what_the_rows_hold(torch_ran, default_kept, busy):
    cores = os.cpu_count() or 1
    # own-busy: the run's own workers alone at the cores' load average, others idle; run-others-busy:
    # the run's own reading (peers_table's) says others were busy, the cell's says nothing
    peers = _peers(
        torch_ran,
        default_kept,
        (cores + 1.0, cores + 0.5) if busy == "own-busy" else (0.1, 0.1),
        others=0.5 if busy == "run-others-busy" else 0.01,
    )
    load = None if busy == "run-others-busy" else LoadReading(wall=1.0, others=0.5 if busy == "others-busy" else 0.0)
    reasons = spark_chapter.flag_reasons(peers, load)
    assert bool(reasons) == (busy in ("others-busy", "run-others-busy")), reasons
    tables = spark_chapter.peers_view(peers, reasons)
    said = [str(s) for s in spark_chapter.peers_sentences(peers, reasons)]
    check_against_table(_merged(tables), said)
    assert all(r[1].endswith(FLAGGED) == bool(reasons) for r in tables[1].rows)  # call (s): flagged iff the run was
    assert all(len(line) <= WIDTH for t in tables for line in t.text().splitlines())  # fits a notebook's column
    updater = spark_chapter.updater_view(peers, reasons)
    updater_said = [str(s) for s in spark_chapter.updater_sentences(peers, reasons)]
    check_against_table(_merged(updater), updater_said)
    kept = [r[0] for r in updater[0].rows if "save_updater=False" not in r[0]]
    assert updater_said[1].startswith(f"**{kept[0]}**")  # the kept updater is named first, whichever is default


# --- the check of a stored (or made) run: every figure a sentence states is its table's -----------------------


def _rows_of(columns: list[str], rows: list[list[str]]) -> dict[str, dict[str, str]]:
    return {r[0]: dict(zip(columns, r)) for r in rows}


def _merged(tables) -> dict[str, dict[str, str]]:
    """One dict a system (by its label) from the cell's tables."""
    rows: dict[str, dict[str, str]] = {}
    for t in tables:
        for name, row in _rows_of(t.columns, t.rows).items():
            rows.setdefault(name, {}).update(row)
    return rows


def check_against_table(table: dict[str, dict[str, str]], said: list[str]) -> None:
    """Each sentence's figures against the table's rows (raises AssertionError naming the sentence)."""
    text = "\n".join(said)
    assert ("TorchDistributor did not run here" in text) == (L_PEER not in table and L_FIT in table), text
    assert ("TorchDistributor ran here" in text) == (L_PEER in table), text
    flagged = any(c.endswith(FLAGGED) for r in table.values() for c in r.values())
    for s in said:
        if s.startswith("kit's defaults"):
            assert f"ran as: {table[L_DEFAULTS]['ran as']}" in s, s
        for a, k, n, b, j in re.findall(r"\*\*(.+?)\*\* classified ([\d,]+) of ([\d,]+) .*?\*\*(.+?)\*\* ([\d,]+) ", s):
            assert table[a]["right"] == f"{k} of {n}" and table[b]["right"] == f"{j} of {n}", s
        if "One run each" in s:  # a timing sentence: never from a flagged run, every figure the table's
            assert not flagged, s
            cells = {c for r in table.values() for c in r.values()}
            for figure in re.findall(r"([+-]?\d+\.\d+) (?:ms|s)\b", s):
                assert figure in cells, (figure, s)
        if s.startswith(f"Goal: kit's defaults within {spark_chapter.POINTS} points"):
            gap = (_share(table[L_FIT]["right"]) - _share(table[L_DEFAULTS]["right"])) * 100
            assert f"({abs(gap):.1f} points {'below' if gap > 0 else 'above'} it)" in s, s
            assert s.split("Network.fit: ")[1].startswith("met" if gap <= spark_chapter.POINTS else "NOT met"), s
    if flagged:
        assert "No conclusion can be drawn from this run" in text, text


def _share(right: str) -> float:
    k, n = right.split(" of ")
    return int(k.replace(",", "")) / int(n.replace(",", ""))


def _html_table(output: dict) -> dict[str, dict[str, str]]:
    """One stored table's rows by their first cell, each a dict by column."""
    page = "".join(output["data"]["text/html"])
    rows = [
        [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)
    ]
    return _rows_of(rows[0], rows[1:])


def _stored(starts: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    (c,) = [c for c in cells(CH7) if c["cell_type"] == "code" and "".join(c["source"]).startswith(starts)]
    tables = [_html_table(o) for o in c["outputs"] if "text/html" in o.get("data", {})]
    said = ["".join(o["data"].get("text/markdown", "")) for o in c["outputs"] if "text/markdown" in o.get("data", {})]
    assert len(tables) == 2 and said, f"chapter 7's cell {starts!r} holds no stored tables and sentences"
    rows: dict[str, dict[str, str]] = {}
    for t in tables:
        for name, row in t.items():
            rows.setdefault(name, {}).update(row)
    return rows, said


@pytest.mark.parametrize("starts", [SHOW_CELL, UPDATER_CELL])
def test_the_stored_sentences_match_the_stored_tables(starts):
    table, said = _stored(starts)
    assert L_FIT in table or starts == UPDATER_CELL
    check_against_table(table, said)


def test_the_stored_updater_table_holds_both_settings():
    table, said = _stored(UPDATER_CELL)
    assert L_DEFAULTS in table and sum(s.startswith("save_updater=") for s in table) == 1, table
    assert any("classified" in s for s in said), said


# --- the chapter's cells, run for real, with torch importable and with it blocked ------------------------------

PRELUDE = """
import sys
if {block}:
    sys.modules["torch"] = None   # `import torch` raises ImportError from here on
import kit
import kit.bench.spark_peers as peers_module
from kit import measure
from kit.spark import local_spark_context
peers_module.CHAPTER_SYSTEMS = ("torch",)   # the test's narrowing: Network.fit and PyTorch's rows only
QUICK = True
display = lambda x: print(x.text() if hasattr(x, "text") else x)
sc = local_spark_context("local[2]", app_name="ch7-peers-test", quiet=True)
try:
    exec(compile({run!r} + {torch!r} + {show!r}, "<chapter 7 cells>", "exec"))
finally:
    sc.stop()
"""


def _run_cells(block: bool, timeout: float) -> str:
    code = PRELUDE.format(block=block, run=cell(CH7, RUN_CELL), torch=cell(CH7, TORCH_CELL), show=cell(CH7, SHOW_CELL))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KIT_QUICK": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_cells_say_so_when_torch_cannot_be_imported():
    out = _run_cells(block=True, timeout=300)
    assert "TorchDistributor did not run here: torch is not importable" in out, out
    assert not re.search(rf"^{L_PEER}\s+\|", out, re.M) and re.search(rf"^{L_FIT}\s+\|", out, re.M), out
    assert "pip install torch pandas pyarrow" in out, out


@pytest.mark.slow
def test_the_cells_run_torch_distributor_when_torch_imports():
    pytest.importorskip("torch")
    pytest.importorskip("pyspark.ml.torch.distributor")
    out = _run_cells(block=False, timeout=500)
    assert "TorchDistributor ran here" in out and L_TORCH in out and "TorchDistributor: ran" in out, out
    assert "TorchDistributor did not run" not in out, out
    assert f"to {TARGET}" in out


def _split(peers: dict) -> tuple[dict, dict]:
    """One run as the chapter's two cells make it: kit's rows, then Network.fit and PyTorch's."""
    torch_rows = {TORCH, PEER}
    first = {**peers, "rows": [r for r in peers["rows"] if r["system"] not in torch_rows]}
    first["right"] = {k: v for k, v in peers["right"].items() if k not in torch_rows}
    first["torch_distributor"] = "not asked for"
    then = {**peers, "rows": [r for r in peers["rows"] if r["system"] in torch_rows or r["system"] == FIT]}
    then["right"] = {k: v for k, v in peers["right"].items() if k in torch_rows or k == FIT}
    return first, then


@pytest.mark.parametrize("torch_ran", [True, False])
@pytest.mark.parametrize(("others", "then_others"), [(0.01, 0.01), (0.01, 0.5), (0.5, 0.01)])
def test_the_two_cells_runs_merge_into_the_one_run(torch_ran, others, then_others):
    whole = _peers(torch_ran, True, others=max(others, then_others))
    first, then = _split(whole)
    first["machine_load_by_others"], then["machine_load_by_others"] = others, then_others
    merged = spark_chapter.merged(first, then)
    assert [r["system"] for r in merged["rows"]] == [r["system"] for r in whole["rows"]]
    assert merged["goals"] == whole["goals"] and merged["torch_distributor"] == whole["torch_distributor"]
    assert merged["right"].keys() == whole["right"].keys()
    assert bool(spark_chapter.flag_reasons(merged)) == (max(others, then_others) > 0.2)  # the busier reading
    with pytest.raises(ValueError, match="the runs differ in epochs"):
        spark_chapter.merged(first, {**then, "epochs": 3})


@pytest.mark.parametrize(
    ("old", "new"),
    [("TorchDistributor ran here", "TorchDistributor did not run here"), ("classified 3", "classified 4")],
    ids=["torch-said-wrongly", "count-changed"],
)
def test_the_check_rejects_a_sentence_the_table_contradicts(old, new):
    peers = _peers(True, True)
    table = _merged(spark_chapter.peers_view(peers, []))
    said = [str(s).replace(old, new, 1) for s in spark_chapter.peers_sentences(peers, [])]
    assert any(old in str(s) for s in spark_chapter.peers_sentences(peers, [])), old
    with pytest.raises(AssertionError):
        check_against_table(table, said)


def test_the_check_rejects_a_timing_figure_the_table_does_not_hold():
    peers = _peers(True, True)
    table = _merged(spark_chapter.peers_view(peers, []))
    said = [str(s) for s in spark_chapter.peers_sentences(peers, [])]
    timing = [i for i, s in enumerate(said) if "One run each" in s]
    assert timing, said
    said[timing[0]] = said[timing[0]].replace("4.00 ms", "3.00 ms")
    with pytest.raises(AssertionError):
        check_against_table(table, said)
