"""The README's plain `pytest` is the fast default; tests marked `slow` run when asked for (CI: `pytest -m slow`)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW_FILE = "tests/spark/test_standalone_cluster.py"  # marked slow as a whole
FAST_FILE = "tests/test_suite_selection.py"


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
        ((), {FAST_FILE}),  # the plain run (testpaths): slow tests left out
        (("-m", "slow"), {SLOW_FILE}),  # CI's second run
        (("-m", "not slow or slow"), {SLOW_FILE, FAST_FILE}),  # any -m is obeyed as given
    ],
    ids=["default", "m-slow", "m-everything"],
)
def test_testpaths_runs_leave_slow_tests_to_ci_unless_a_marker_is_given(args, expected):
    assert _collected("-o", f"testpaths={SLOW_FILE} {FAST_FILE}", *args) == expected


def test_naming_a_file_runs_its_slow_tests():
    assert _collected(SLOW_FILE) == {SLOW_FILE}


def test_the_whole_default_run_holds_the_chapters_and_no_slow_test():
    slow = {"tests/test_browser.py", "tests/test_wheel.py", SLOW_FILE}
    paths = "tests/test_browser.py tests/test_wheel.py notebooks/01_arrays_and_backends.ipynb"
    collected = _collected("-o", f"testpaths={paths}")
    assert collected == {"notebooks/01_arrays_and_backends.ipynb"}, collected - slow
