"""Chapters 6-8, read against what they print:

- chapter 7 where Spark cannot start (no Java): said once, near the top, with what supplies it,
  and no progress line left at 0 % (a `Progress` whose `with` block raises says it stopped);
- the opening of chapter 7 counts a round's bytes as section 2 defines a broadcast (once per
  executor) and section 5 measures them;
- a one-run time in chapters 6 and 7 computed from a flagged measurement carries the flag in the
  table cell (or the line) that prints it, not only in a note below.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _chapter_cells import NOTEBOOKS, cell, cells

from kit import measure, prose
from kit.measurement.load import LOAD_LIMIT, LoadReading
from kit.measurement.measure import Timing
from kit.measurement.tables import Table

CH6, CH7, CH8 = "06_early_stopping.ipynb", "07_training_on_spark.ipynb", "08_half_the_bytes.ipynb"


def _text(output: dict) -> str:
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    return "".join(data.get("text/markdown") or data.get("text/plain") or "")


# --- item 1: chapter 7 without Java ------------------------------------------------------------------------------


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


def test_every_progress_line_of_every_chapter_closes_with_its_work():
    """A Progress closed by hand after a loop is left open (and at its last count) when the loop
    raises; in a `with` block it closes and says it stopped. Every Progress the chapters make is
    opened by a `with` statement."""
    loose = []
    chapters = sorted(path.name for path in NOTEBOOKS.glob("0*.ipynb"))
    assert len(chapters) == 8
    for chapter in chapters:
        for c in cells(chapter):
            source = "".join(c["source"])
            if c["cell_type"] != "code" or "Progress(" not in source:
                continue
            tree = ast.parse(source)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Progress":
                    opened_by_with = any(
                        isinstance(w, ast.With) and any(item.context_expr is node for item in w.items)
                        for w in ast.walk(tree)
                    )
                    if not opened_by_with:
                        loose.append(f"{chapter}: {ast.get_source_segment(source, node)[:80]}")
    assert not loose, "open these in a with block:\n" + "\n".join(loose)


def test_the_error_that_says_spark_is_missing_shows_its_words_alone_and_keeps_a_command_whole():
    from kit.spark import SparkUnavailableError

    command = "`apt-get install -y openjdk-17-jre-headless`"
    err = SparkUnavailableError("Spark needs Java 17 and finds none (no `java` on PATH): " + "x " * 30 + command)
    lines = err._render_traceback_()
    assert lines[0].startswith("SparkUnavailableError: Spark needs Java 17")
    assert any(command in line for line in lines), lines
    assert all(len(line) <= 100 for line in lines)
    assert not any("Traceback" in line or line.lstrip().startswith("File ") for line in lines)


def test_the_package_the_message_names_is_what_supplies_java_here():
    """The remedy the message prints names a real package: on this Debian machine, the `java` that
    Spark runs is that package's."""
    import shutil
    import subprocess

    java, dpkg = shutil.which("java"), shutil.which("dpkg")
    if not (java and dpkg):
        pytest.skip("needs Debian's dpkg and a java on PATH")
    owner = subprocess.run([dpkg, "-S", os.path.realpath(java)], capture_output=True, text=True, timeout=30)
    assert owner.returncode == 0, owner.stderr
    assert owner.stdout.startswith("openjdk-17-jre-headless")


def _no_java_env(tmp_path: Path, how: str) -> dict:
    """This process's environment with Java made unavailable for real: JAVA_HOME an empty directory,
    or JAVA_HOME unset and PATH a directory of links to every program on PATH but java's."""
    env = dict(os.environ)
    env["KIT_QUICK"] = "1"
    if how == "JAVA_HOME empty":
        (tmp_path / "jre").mkdir()
        env["JAVA_HOME"] = str(tmp_path / "jre")
        return env
    env.pop("JAVA_HOME", None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in [Path(sys.executable).parent, *map(Path, os.environ.get("PATH", "").split(os.pathsep))]:
        if not folder.is_dir():
            continue
        for program in folder.iterdir():
            if not program.name.startswith("java") and not (bin_dir / program.name).exists():
                (bin_dir / program.name).symlink_to(program)
    env["PATH"] = str(bin_dir)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("how", ["JAVA_HOME empty", "no java on PATH"])
def test_chapter_7_without_java_says_so_once_near_the_top_and_leaves_no_bar_at_zero(tmp_path, how):
    """Chapter 7 run as "Run All" runs it (cell after cell, stopping at the first error) in a kernel
    that has no Java: the cell after the setup says what is missing and what supplies it, once, as
    words (no traceback), and the run stops there. A reader who runs section 1's cell anyway gets
    a progress line that says it stopped, not one left at 0 %."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / CH7, as_version=4)
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    start = next(
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "local_spark_context(" in c.source and "Progress(" in c.source
    )
    with client.setup_kernel(env=_no_java_env(tmp_path, how)):
        stopped_at = None
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            client.execute_cell(c, i)
            if any(o.output_type == "error" for o in c.outputs):
                stopped_at = i
                break
        run_all = [_text(o) for c in nb.cells[: stopped_at + 1] if c.cell_type == "code" for o in c.outputs]
        client.execute_cell(nb.cells[start], start)  # section 1's cell, run anyway

    assert stopped_at is not None and stopped_at <= 3, f"Run All went on to cell {stopped_at}"
    (error,) = [o for o in nb.cells[stopped_at].outputs if o.output_type == "error"]
    said = " ".join(" ".join(error.traceback).split())  # the words, unwrapped
    assert error.ename == "SparkUnavailableError"
    assert "Traceback" not in said and "File " not in said, said  # words, not a traceback
    where = "has no bin/java" if how == "JAVA_HOME empty" else "no `java` on PATH"
    assert "Spark needs Java 17" in said and where in said and "`apt-get install -y openjdk-17-jre-headless`" in said
    assert sum(text.count("openjdk-17-jre-headless") for text in run_all) == 1, run_all

    section_1 = [_text(o) for o in nb.cells[start].outputs]
    assert any("starting Spark" in t and "stopped after 0/1 steps" in t for t in section_1), section_1
    shown = "\n".join(_text(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert not re.search(r"\(0%\)|: 0/\d+, ", shown), shown  # no progress line at 0 %


# --- item 7: a round's bytes, as the chapter defines and measures them --------------------------------------------


def _sentence(chapter: str, pattern: str) -> re.Match:
    for c in cells(chapter):
        for o in c.get("outputs", []):
            m = re.search(pattern, _text(o))
            if m:
                return m
    raise AssertionError(f"{chapter}: no stored output matches {pattern!r}")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_opening_counts_the_bytes_section_5_measured_in_the_stored_run():
    opening = _sentence(
        CH7,
        r"broadcasts ([\d,]+) bytes .*? once to its (\d+) executor.*?brings ([\d,]+) bytes back to "
        r"the driver, each worker's state: ([\d,]+) bytes of model state a round, ([\d.]+) times "
        r"the ([\d,]+) bytes",
    )
    measured = _sentence(
        CH7,
        r"the driver broadcast ([\d,]+) bytes a round, .*? and received ([\d,]+) bytes in .*? "
        r"Together ([\d,]+) bytes a round, the figure the chapter's opening computed",
    )
    bc, executors, back, round_bytes, ratio, data = opening.groups()
    assert (_int(bc), _int(back)) == (_int(measured.group(1)), _int(measured.group(2)))
    assert _int(round_bytes) == int(executors) * _int(bc) + _int(back) == _int(measured.group(3))
    assert float(ratio) == float(f"{_int(round_bytes) / _int(data):.2g}")


def test_the_opening_no_longer_counts_the_broadcast_once_per_worker():
    """The regression: 230,880 bytes a round, 1.2 times the data, was the broadcast counted for each
    of the two workers, where one executor receives it once."""
    opening = "".join(cell(CH7, "round_bytes = "))
    assert "state_bytes * round_workers" not in opening
    said = _sentence(CH7, r"([\d,]+) bytes of model state a round, ([\d.]+) times")
    assert said.groups() == ("173,160", "0.91")


def _statements(source: str, keep) -> str:
    """The top-level statements of a cell's source that `keep(first line)` accepts, in order."""
    tree = ast.parse(source)
    return "\n".join(
        ast.get_source_segment(source, node)
        for node in tree.body
        if keep(ast.get_source_segment(source, node).splitlines()[0])
    )


@pytest.fixture(scope="module")
def spark_context(sc):
    """The session's local[2] context (tests/conftest.py; its start is most of the fits' time), with
    its Python workers started here, not in the first test. Never stopped here: it is shared."""
    sc.parallelize(range(2), 2).count()
    return sc


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_the_opening_s_round_equals_what_section_3_s_fit_sends(quick, monkeypatch, spark_context):
    """The opening cell's figure, computed in quick and in full mode, against a real Spark fit with
    section 3's own settings and code (one epoch: every round sends the same bytes), read from
    the fit's stats as section 5 reads them."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np

    from kit.data import ArrayIterator, DataSet, load_digits
    from kit.nn import Adam, mlp
    from kit.parallel import ParallelWrapper
    from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd

    env = {"QUICK": quick, "display": lambda *a, **k: None}
    monkeypatch.setattr("matplotlib.pyplot.show", lambda *a, **k: None)
    exec(cell(CH7, "# The problem, drawn"), env)
    exec(cell(CH7, "round_bytes = "), env)
    train, test = load_digits()
    names = {
        "QUICK": quick,
        "train": train,
        "DataSet": DataSet,
        "mlp": mlp,
        "Adam": Adam,
        "ArrayIterator": ArrayIterator,
        "ParallelWrapper": ParallelWrapper,
        "ParameterAveragingTrainingMaster": ParameterAveragingTrainingMaster,
        "SparkNetwork": SparkNetwork,
        "to_rdd": to_rdd,
    }
    exec(_statements(cell(CH7, "train, test = load_digits()"), lambda line: line.startswith("n = ")), names)
    names["sc"], names["test"] = spark_context, test
    exec(
        _statements(
            cell(CH7, "epochs = 2 if QUICK else 6"),
            lambda line: line.startswith(
                ("epochs =", "workers, batch", "data =", "rdd, test_rdd", "fitted =", "def fit_spark")
            ),
        ),
        names,
    )
    names["epochs"] = 1
    names["fit_spark"]()
    rounds = names["fitted"]["Spark averaging"].get_training_stats().rounds
    bc = int(np.median([r["broadcast_bytes"] for r in rounds]))
    got = int(np.median([r["driver_received_bytes"] for r in rounds]))
    assert (names["workers"], names["batch"], names["frequency"]) == (
        env["round_workers"],
        env["round_batch"],
        env["round_frequency"],
    ), "the opening draws section 3's settings"
    assert bc + got == env["round_bytes"], (bc, got, env["round_bytes"])


# --- item 5: a time from a flagged measurement carries the flag where it is printed ------------------------------

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


# (chapter, the cell's first line, the statements that print times, the names they read, by load):
# every time those statements print carries measure.FLAGGED under a busy machine, and none does
# under a calm one.
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
]


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
            out += [row[i] for row in item.rows for i in timed]
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
