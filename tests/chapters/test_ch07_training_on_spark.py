"""Chapter 7, read against what it prints: where Spark cannot start (no Java) it says so once, near the
top, with what supplies it, and leaves no progress line at 0 %; its opening counts a round's bytes as
section 2 defines a broadcast (once per executor) and section 5 measures them."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from _chapter_cells import NOTEBOOKS, cell, cells
from _chapter_cells import output_text as _text
from _chapter_cells import statements as _statements

CH7 = "07_training_on_spark.ipynb"


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
