"""tests/ mirrors kit/: every module has a test file of its name, so a reader who opens
kit/nn/init.py finds its tests in tests/nn/test_init.py (or tests/test_init.py, or a file
prefixed with its sub-package, tests/test_bench_d2l.py for kit/bench/d2l.py).

The modules that have none yet are listed in UNTESTED, a list that may only shrink: a new module
without a test file fails here, and so does a listed module that has one now (or is gone), until
it is dropped from the list. A package's `__init__` and `__main__` are not counted. Read from the
file tree; nothing is imported."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT, TESTS = ROOT / "kit", ROOT / "tests"

# 72 of 115 modules had no test file of their name when issue 42 counted them (plain names only)
UNTESTED: set[str] = set()


def named_after(module: Path, test_files: list[Path]) -> list[Path]:
    """The test files, of `test_files` (relative to tests/), named after `module` (relative to kit/):
    test_<name>.py at the top of tests/ or in a folder named after one of the module's packages,
    or test_<package>_<name>.py anywhere, <package> the sub-package the module sits in."""
    packages, name = module.parts[:-1], module.stem
    prefixed = f"{packages[-1]}_{name}" if packages else None
    found = []
    for test in test_files:
        stem = test.stem.removeprefix("test_")
        if (stem == name and all(folder in packages for folder in test.parent.parts)) or stem == prefixed:
            found.append(test)
    return found


def _modules() -> dict[str, Path]:
    paths = (p.relative_to(KIT) for p in sorted(KIT.rglob("*.py")))
    return {".".join(("kit", *p.with_suffix("").parts)): p for p in paths if p.stem not in ("__init__", "__main__")}


def _untested() -> set[str]:
    test_files = [p.relative_to(TESTS) for p in TESTS.rglob("test_*.py")]
    return {name for name, path in _modules().items() if not named_after(path, test_files)}


@pytest.mark.parametrize(
    ("module", "test", "found"),
    [
        ("nn/init.py", "nn/test_init.py", True),
        ("nn/init.py", "test_init.py", True),
        ("nn/init.py", "test_nn_init.py", True),
        ("nn/init.py", "nn/test_nn_init.py", True),
        ("nn/init.py", "spark/test_init.py", False),  # another wing's folder
        ("nn/init.py", "nn/test_initial.py", False),
        ("bench/d2l.py", "test_bench_d2l.py", True),
        ("bench/spark.py", "spark/test_spark.py", False),  # kit.spark's tests, not the Spark benchmark's
        ("parallel/inference/engine.py", "parallel/test_engine.py", True),
        ("parallel/inference/engine.py", "test_inference_engine.py", True),
        ("parallel/inference/engine.py", "test_parallel_engine.py", False),
        ("state.py", "test_state.py", True),
        ("state.py", "nn/test_state.py", False),
        ("state.py", "chapters/test_state.py", False),
    ],
)
def test_a_module_is_matched_to_the_test_files_of_its_name_only(module, test, found):
    assert named_after(Path(module), [Path("test_other.py"), Path(test)]) == ([Path(test)] if found else [])


def test_the_modules_and_the_test_files_are_found():
    modules = _modules()
    assert "kit.nn.network" in modules and "kit.parallel.inference.engine" in modules and "kit.state" in modules
    assert "kit" not in modules and "kit.nn" not in modules and "kit.__main__" not in modules
    assert "kit.nn.network" not in _untested() and "kit.spark.stats" not in _untested()


def test_every_new_module_has_a_test_file_of_its_name():
    new = sorted(_untested() - UNTESTED)
    assert not new, (
        f"modules without a test file of their name: {new}; write tests/<its package>/test_<name>.py "
        "(or tests/test_<package>_<name>.py, as tests/test_bench_d2l.py for kit.bench.d2l)"
    )


def test_the_list_of_untested_modules_only_shrinks():
    stale = sorted(UNTESTED - _untested())
    assert not stale, f"{stale} have a test file now (or are gone): drop them from UNTESTED"
