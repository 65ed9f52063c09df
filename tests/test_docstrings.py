"""Every `>>>` example in kit's docstrings runs and shows its real output: doctest over each module.

One case per module of the kit package (found by walking kit/ with pkgutil), run in a temporary directory
with ELLIPSIS and NORMALIZE_WHITESPACE. A module whose import needs an optional dependency that is absent
here (cupy, pyspark, torch, nbconvert) is skipped with the reason, and so is one whose examples fail only
because such a dependency is absent (kit.book's examples call nbconvert); any other import error, and any
failed example, fails its case with doctest's report.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import os
import pkgutil

import pytest

import kit

os.environ.setdefault("KIT_QUICK", "1")

OPTIONAL = ("cupy", "pyspark", "torch", "nbconvert", "nbformat")  # nbformat: part of the nbconvert stack
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def module_names() -> list[str]:
    """kit and every module below it, including ones whose import would fail (they are reported per case)."""
    found = pkgutil.walk_packages(kit.__path__, prefix="kit.", onerror=lambda name: None)
    return ["kit", *sorted(info.name for info in found)]


def import_or_skip(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as error:
        missing = (error.name or "").split(".")[0]
        if missing in OPTIONAL:
            pytest.skip(f"importing {name} needs the optional dependency {missing!r}, which is not installed")
        raise


def installed(dep: str) -> bool:
    return importlib.util.find_spec(dep) is not None


def test_every_module_is_listed():
    names = module_names()
    assert "kit.nn.network" in names and "kit.parallel.wrapper" in names and "kit.data.dataset" in names


@pytest.mark.parametrize("name", module_names())
def test_examples_run(name, tmp_path, monkeypatch):
    module = import_or_skip(name)
    monkeypatch.chdir(tmp_path)  # files an example writes (a saved model, a stats log) land here
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=report.write)
    failed, attempted = runner.summarize(verbose=False)
    if failed:
        absent = [dep for dep in OPTIONAL if f"No module named '{dep}'" in report.getvalue() and not installed(dep)]
        if absent:
            pytest.skip(f"the examples of {name} need the optional dependency {absent[0]!r}, which is not installed")
    assert failed == 0, f"{failed} of {attempted} examples in {name} failed:\n{report.getvalue()}"
