"""The README's plain `pytest` is the fast default; tests marked `slow` run when asked for (CI: `pytest -m slow`)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW_FILE = "tests/spark/test_standalone_cluster.py"  # marked slow as a whole
FAST_FILE = "tests/test_suite_selection.py"
CHAPTER = "notebooks/01_arrays_and_backends.ipynb"
SPARK_FILE = "tests/spark/test_wire.py"  # its tests use the `sc` fixture


# Every collection below runs in ONE fresh interpreter, `pytest.main` once per case (pytest's own
# in-process runner; a conftest outside a package is re-imported each time): kit and the test files
# are imported once, not once per case (each case used to be a process of its own, most of its time
# spent importing the same modules). Each case reports pytest's exit code and its printed output.
_RUNNER = """
import contextlib, io, json, os, sys
import pytest

answers = {}
for name, (cwd, args) in json.loads(sys.argv[1]).items():
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = pytest.main(["--co", "-q", "-p", "no:cacheprovider", *args])
    answers[name] = {"code": int(code), "out": out.getvalue(), "err": err.getvalue()}
print(json.dumps(answers))
"""

SELECTIONS = {  # case -> (the args after `-o testpaths=...`, the files collected in order)
    "default": ((), [CHAPTER, SPARK_FILE, FAST_FILE]),  # plain (testpaths): slow left out, chapters in
    "m-slow": (("-m", "slow"), [SLOW_FILE]),  # CI's second run: any -m is obeyed as given
    "named-file": ((SLOW_FILE,), [SLOW_FILE]),  # naming a file runs what it holds, slow or not
}
ADDRESS_IDS = {  # case -> (parametrize's arguments, whether collection refuses them)
    "lambdas-str": ("[lambda a: a, lambda a: -a], ids=str", True),  # `<function <lambda> at 0x...>`: per process
    "objects-repr": ("[object(), object()], ids=repr", True),
    "lambdas-default": ("[lambda a: a, lambda a: -a]", False),  # pytest's own ids: x0, x1
    "numbers-str": ("[1, 2], ids=str", False),
    "named": ("[lambda a: a, lambda a: -a], ids=['same', 'negated']", False),
}


@pytest.fixture(scope="module")
def collections(tmp_path_factory) -> dict[str, dict]:
    """Every case's collection, from one subprocess: {case: {"code", "out", "err"}}."""
    testpaths = ("-o", f"testpaths={SLOW_FILE} {FAST_FILE} {SPARK_FILE} {CHAPTER}")
    cases = {name: (str(ROOT), [*testpaths, *args]) for name, (args, _) in SELECTIONS.items()}
    for name, (params, _) in ADDRESS_IDS.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
        # a module name of its own per case: one process imports all five
        (folder / f"test_ids_{name.replace('-', '_')}.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('x', {params})\ndef test_x(x):\n    pass\n"
        )
        cases[f"ids-{name}"] = (str(folder), [str(folder)])
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(cases)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def _collected(answer: dict) -> list[str]:
    assert answer["code"] == 0, answer["out"][-2000:] + answer["err"][-2000:]
    return list(dict.fromkeys(line.split("::")[0] for line in answer["out"].splitlines() if "::" in line))


@pytest.mark.parametrize("case", list(SELECTIONS))
def test_testpaths_runs_leave_slow_tests_to_ci_unless_asked_for(request, collections, case):
    """Also the order `-n 2 --dist loadfile` hands files out in (tests/conftest.py turns xdist's sort
    by test count off): the chapters, then the Spark files, then the rest, most tests first, so the
    heaviest files do not start last while the other process idles."""
    assert getattr(request.config.option, "loadscopereorder", False) is False
    assert _collected(collections[case]) == SELECTIONS[case][1]


@pytest.mark.parametrize("case", list(ADDRESS_IDS))
def test_a_test_id_that_spells_an_address_is_refused_at_collection(collections, case):
    """CI runs the suite in two processes (pytest-xdist), which must collect identical ids."""
    refused = ADDRESS_IDS[case][1]
    answer = collections[f"ids-{case}"]
    said = answer["out"] + answer["err"]
    assert (answer["code"] != 0) == refused, said[-4000:]
    assert ("test ids name a memory address" in said) == refused
    if not refused:  # collected as usual: both parameters
        assert len([line for line in answer["out"].splitlines() if "::test_x[" in line]) == 2, said[-4000:]


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
