"""The README's plain `pytest` is the fast default; tests marked `slow` run when asked for (CI: `pytest -m slow`)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW_FILE = "tests/spark/test_standalone_cluster.py"  # marked slow as a whole
FAST_FILE = "tests/test_suite_selection.py"
CHAPTER = "notebooks/01_arrays_and_backends.ipynb"
SPARK_FILE = "tests/spark/test_wire.py"  # its tests use the `sc` fixture


def _collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return list(dict.fromkeys(line.split("::")[0] for line in done.stdout.splitlines() if "::" in line))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), [CHAPTER, SPARK_FILE, FAST_FILE]),  # the plain run (testpaths): slow tests left out, the chapters in
        (("-m", "slow"), [SLOW_FILE]),  # CI's second run: any -m is obeyed as given
        ((SLOW_FILE,), [SLOW_FILE]),  # naming a file runs what it holds, slow or not
    ],
    ids=["default", "m-slow", "named-file"],
)
def test_testpaths_runs_leave_slow_tests_to_ci_unless_asked_for(request, args, expected):
    """Also the order `-n 2 --dist loadfile` hands files out in (tests/conftest.py turns xdist's sort
    by test count off): the chapters, then the Spark files, then the rest, most tests first, so the
    heaviest files do not start last while the other process idles."""
    assert getattr(request.config.option, "loadscopereorder", False) is False
    assert _collected("-o", f"testpaths={SLOW_FILE} {FAST_FILE} {SPARK_FILE} {CHAPTER}", *args) == expected


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ("[lambda a: a, lambda a: -a], ids=str", True),  # `<function <lambda> at 0x...>`: differs per process
        ("[object(), object()], ids=repr", True),
        ("[lambda a: a, lambda a: -a]", False),  # pytest's own ids: x0, x1
        ("[1, 2], ids=str", False),
        ("[lambda a: a, lambda a: -a], ids=['same', 'negated']", False),
    ],
    ids=["lambdas-str", "objects-repr", "lambdas-default", "numbers-str", "named"],
)
def test_a_test_id_that_spells_an_address_is_refused_at_collection(tmp_path, params, refused):
    """CI runs the suite in two processes (pytest-xdist), which must collect identical ids."""
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_ids.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('x', {params})\ndef test_x(x):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode != 0) == refused, done.stdout[-2000:] + done.stderr[-2000:]
    assert ("test ids name a memory address" in done.stdout + done.stderr) == refused


def _spark_context_misuse(source: str) -> list[str]:
    """Lines where test code (not a script in a string, which runs in a process of its own) starts or
    stops a SparkContext in the test process: `local_spark_context(...)` hands back the session's
    running `sc`, so a test that stops what it got leaves every later file in that process a dead
    context. Calls made to see them refused (inside `with pytest.raises(...)`) start nothing."""
    tree = ast.parse(source)
    refused: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any("raises" in ast.unparse(item.context_expr) for item in node.items):
            refused |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in refused:
            continue
        name = ast.unparse(node.func)
        if name.split(".")[-1] == "local_spark_context" or name in {"sc.stop", "context.stop", "spark_context.stop"}:
            found.append(f"line {node.lineno}: {name}(...)")
    return found


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("sc = local_spark_context('local[2]')\nsc.stop()\n", 2),  # the chapter 7 test's old fixture
        ("def f(sc):\n    sc.stop()\n", 1),
        ("import kit.spark\nkit.spark.local_spark_context()\n", 1),
        ("with pytest.raises(TypeError):\n    local_spark_context(2)\n", 0),  # refused at the call
        ("SCRIPT = 'sc = local_spark_context()\\nsc.stop()'\n", 0),  # a script for a subprocess
        ("def f(sc):\n    sc.parallelize([1]).count()\n", 0),
    ],
    ids=["start-and-stop", "stop-the-fixture", "module-path", "refused", "in-a-script", "uses-it"],
)
def test_the_spark_context_rule_tells_starting_and_stopping_from_using(source, flagged):
    assert len(_spark_context_misuse(source)) == flagged


def test_only_the_sc_fixture_starts_or_stops_spark_in_the_test_process():
    """With `-n 2` the test files share two processes in an order that varies; one file stopping the
    context it got made later files in its process fail on a stopped `sc` (tests/conftest.py)."""
    misuse = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != ROOT / "tests" / "conftest.py" and (found := _spark_context_misuse(path.read_text()))
    }
    assert misuse == {}, f"use the `sc` fixture (tests/conftest.py) instead: {misuse}"
