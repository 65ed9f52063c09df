"""The README's plain `pytest` is the fast default; tests marked `slow` run when asked for (CI: `pytest -m slow`)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW_FILE = "tests/spark/test_standalone_cluster.py"  # marked slow as a whole
FAST_FILE = "tests/test_suite_selection.py"
CHAPTER = "notebooks/01_arrays_and_backends.ipynb"


def _collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), {FAST_FILE, CHAPTER}),  # the plain run (testpaths): slow tests left out, the chapters in
        (("-m", "slow"), {SLOW_FILE}),  # CI's second run: any -m is obeyed as given
        ((SLOW_FILE,), {SLOW_FILE}),  # naming a file runs what it holds, slow or not
    ],
    ids=["default", "m-slow", "named-file"],
)
def test_testpaths_runs_leave_slow_tests_to_ci_unless_asked_for(args, expected):
    assert _collected("-o", f"testpaths={SLOW_FILE} {FAST_FILE} {CHAPTER}", *args) == expected


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
