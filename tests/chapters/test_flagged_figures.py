"""A figure computed from a timing kit.measure flagged carries the flag where a chapter prints it (the
table cell or the line), not only in a note below: no code cell prints a timing's figure outside
kit's flagging paths, and every time chapters 6 and 7 print is marked under a busy machine and
unmarked under a calm one."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from _chapter_cells import cell, cells
from _chapter_cells import output_text as _text
from _chapter_cells import statements as _statements

from kit import measure, prose
from kit.measurement.load import LOAD_LIMIT, LoadReading
from kit.measurement.measure import Timing
from kit.measurement.tables import Table

CH4, CH5 = "04_multi_device_training.ipynb", "05_parallel_inference.ipynb"
CH6, CH7 = "06_early_stopping.ipynb", "07_training_on_spark.ipynb"


TIMING_FIGURES = re.compile(
    r"\.median\b|percentile\(|\btput\b|_ratio\b|b64_threads|per_limit\[|table\[|\{seconds|\{s[12]\b"
)


FLAG_PATHS = re.compile(
    r'\["flags"\]|'
    r"flagged_figure|_figure\(|flag_column|compare_timings|no_conclusion|prose\.flags|mark\(|flagged="
)


PRINTS = re.compile(r"\bprint\(|prose\.show\(|prose\.sentence\(|display\(")


@pytest.mark.parametrize("chapter", [CH4, CH5])
def test_no_cell_prints_a_timing_figure_outside_the_flagging_paths(chapter):
    offenders = []
    for i, c in enumerate(cells(chapter)):
        source = "".join(c["source"])
        if c["cell_type"] != "code" or not PRINTS.search(source):
            continue
        printed = [
            line for line in source.splitlines() if TIMING_FIGURES.search(line) and ('f"' in line or "f'" in line)
        ]
        if printed and not FLAG_PATHS.search(source):
            offenders.append(f"cell {i}: {printed[0].strip()[:100]}")
    assert not offenders, "figures from timings printed without kit's flag:\n" + "\n".join(offenders)


BUSY, CALM = LoadReading(others=2 * LOAD_LIMIT), LoadReading(others=0.0)


def _timing(name: str, load: LoadReading, spread: float = 0.01) -> Timing:
    return Timing(name, [1.0, 1.0 + 2 * spread, 1.0 + spread], 1, load=load.others)


def _ch6_runs():
    curves = SimpleNamespace(seconds_to=lambda epoch: 0.5, rows=[(0, 0.1, 0.2, 0.25), (1, 0.1, 0.2, 0.75)])
    result = SimpleNamespace(best_model_epoch=1, best_model_score=0.96, total_epochs=4)
    return {"runs": {"single": (result, curves, SimpleNamespace(iteration=100))}, "curves": curves, "result": result}


def _ch7_fits(load):
    return {
        "fit_times": {"ParallelWrapper": _timing("ParallelWrapper", load), "Spark averaging": _timing("Spark", load)},
        "right": {"ParallelWrapper": np.ones(3, bool), "Spark averaging": np.ones(3, bool)},
    }


PRINTED_TIMES = [
    (
        CH6,
        "class Curves(EarlyStoppingListener):",
        ("es_busy =", "prose.show("),
        lambda load: {**_ch6_runs(), "es_load": load},
    ),
    (CH6, "def accuracy_config():", ("display(Table(",), lambda load: {**_ch6_runs(), "busy": load}),
    (
        CH7,
        "epochs = 2 if QUICK else 6",
        ("fit_notes", "display(Table("),
        lambda load: {
            **_ch7_fits(load),
            "fit_load": load,
            "workers": 2,
            "batch": 32,
            "frequency": 5,
            "epochs": 2,
            "data": SimpleNamespace(num_examples=240),
        },
    ),
    (
        CH7,
        "import matplotlib.pyplot as plt\nfrom matplotlib.patches import Patch",
        ("spark_timing =", "display(Table("),
        lambda load: {
            **_ch7_fits(load),
            "stats": SimpleNamespace(rounds=[{}] * 3),
            "summary": dict.fromkeys(
                ("broadcast_ms", "job_ms", "aggregate_ms", "worker_load_ms", "worker_get_model_ms", "worker_fit_ms"),
                1.5,
            ),
        },
    ),
    (
        CH7,
        "freq_runs = {}",
        ("freq_busy =", "display(Table("),
        lambda load: {
            "freq_load": load,
            "freq_runs": {1: {"rounds": 23, "seconds": 5.2, "job_ms": 128.0, "right": np.ones(3, bool)}},
        },
    ),
    (CH7, "shared = SparkNetwork(sc,", ("shared_time =",), lambda load: {"shared_load": load, "shared_seconds": 4.1}),
    (
        CH7,
        "memory_rows, fit_ms = [], {}",
        ("def task_timing", "display(Table("),
        lambda load: {
            "memory_load": load,
            "fit_ms": {("SEPARATE", True): [1.0, 1.01]},
            "memory_rows": [("SEPARATE", True, 0.2, 66112, 88, 1.0)],
        },
    ),
    (CH7, "# the side-by-side's table", ("for table in", "for said in"), lambda load: _ch7_peers(load)),
    (CH7, "# the updater kept against restarted", ("for table in", "for said in"), lambda load: _ch7_peers(load)),
]


def _ch7_peers(load: LoadReading) -> dict:
    """Section 10's run as kit.bench.spark_peers returns it: kit's defaults, the flipped updater, one process."""
    from kit.bench import spark_chapter

    right = {n: np.arange(40) % k > 0 for n, k in ((spark_chapter.FIT, 5), (spark_chapter.DEFAULTS, 4))}
    right["kit averaging, save_updater=False"] = np.arange(40) % 3 > 0

    def row(system, per_step, overhead):
        return {
            "system": system,
            "semantics": "rounds",
            "call_s": 9.5,
            "per_step_ms": per_step,
            "overhead_ms": overhead,
            "to_target_s": 4.2,
            "final_accuracy": float(right[system].mean()),
        }

    rows = [row(spark_chapter.FIT, 2.5, float("nan")), row(spark_chapter.DEFAULTS, 20.5, 18.0)]
    rows.append(row("kit averaging, save_updater=False", 21.5, 19.0))
    peers = {
        "data": "synthetic",
        "epochs": 1,
        "rows": rows,
        "right": right,
        "load_average": [0.1, 0.1],
        "torch_distributor": "not asked for",
        "goals": {"all": "not compared"},
        "skipped": {},
    }
    return {"spark_chapter": spark_chapter, "peers": peers, "peers_reasons": spark_chapter.flag_reasons(peers, load)}


def _printed(chapter, start, keep, names, capsys) -> list[str]:
    shown = []
    env = {
        "display": shown.append,
        "measure": measure,
        "prose": prose,
        "Table": Table,
        "Timing": Timing,
        "kit": SimpleNamespace(prose=prose),
        **names,
    }
    exec(_statements(cell(chapter, start), lambda line: line.startswith(keep)), env)
    if "shared_time" in env:
        shown.append(env["shared_time"])
    return [*shown, capsys.readouterr().out]


def _time_cells(shown) -> list[str]:
    """The times printed: each table cell under a header that names a time, and each figure with a
    unit of time in a line of text."""
    out = []
    for item in shown:
        if isinstance(item, Table):
            timed = [i for i, c in enumerate(item.columns) if re.search(r"\((?:s|ms)\)|median per call|time", c)]
            out += [row[i] for row in item.rows for i in timed if row[i] != "-"]  # "-": nothing measured
        else:
            out += re.findall(r"\d+\.\d+ s\b(?: \(flagged\))?", str(item))
    return out


@pytest.mark.parametrize(
    ("chapter", "start", "keep", "names"), PRINTED_TIMES, ids=[f"{c[0][:2]}:{c[1][:24]}" for c in PRINTED_TIMES]
)
def test_a_time_from_a_flagged_measurement_is_marked_where_it_is_printed(chapter, start, keep, names, capsys):
    busy = _time_cells(_printed(chapter, start, keep, names(BUSY), capsys))
    calm = _time_cells(_printed(chapter, start, keep, names(CALM), capsys))
    assert busy and all(t.endswith(measure.FLAGGED) for t in busy), busy
    assert calm and not any(measure.FLAGGED in t for t in calm), calm


def test_a_wide_spread_flags_a_task_s_median_fit_though_the_machine_was_calm(capsys):
    """Chapter 7's workspace table: a median task fit whose tasks spread wide is flagged in its
    cell, as the sentence under the table says no conclusion can be drawn from it."""
    names = {
        "memory_load": CALM,
        "fit_ms": {("NONE", False): [0.5, 1.5, 0.4]},
        "memory_rows": [("NONE", False, 12.0, 0, 0, 0.5)],
    }
    (table, _) = _printed(CH7, "memory_rows, fit_ms = [], {}", ("def task_timing", "display(Table("), names, capsys)
    assert table.rows[0][-1] == "0.5" + measure.FLAGGED


def _time_table(text: str) -> bool:
    """A stored table (text with ` | ` columns) with a time among its columns (or, transposed, rows)."""
    return any(re.search(r"\((?:s|ms)\)|median per call|time to", line) for line in text.splitlines() if " | " in line)


def test_every_time_table_of_chapters_6_and_7_is_held_to_the_rule():
    """The class: every stored table of chapters 6 and 7 with a time column comes from a cell that
    PRINTED_TIMES runs (a new one fails here until it is added there)."""
    listed = [(c, s) for c, s, _, _ in PRINTED_TIMES]
    missing = []
    for chapter in (CH6, CH7):
        for c in cells(chapter):
            source = "".join(c["source"])
            if any(_time_table(_text(o)) for o in c.get("outputs", [])):
                if not any(chapter == ch and source.startswith(start) for ch, start in listed):
                    missing.append(f"{chapter}: {source.splitlines()[0]}")
    assert not missing, missing


def test_the_stored_chapters_mark_what_their_runs_flagged():
    """The stored runs themselves: a table whose note says the machine was busy marks its times, and
    a time marked flagged stands in a table that says why."""
    for chapter in (CH6, CH7):
        for c in cells(chapter):
            for o in c.get("outputs", []):
                text = _text(o)
                if not _time_table(text):
                    continue
                if "machine busy" in text:
                    assert "(flagged)" in text, text
                if "(flagged)" in text:
                    assert re.search(r"machine busy|flagged|UNRELIABLE", text.replace("(flagged)", "")), text
