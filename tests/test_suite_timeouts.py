"""A wait inside a test ends before pytest's own timeout for that test, so its words (the subprocess's output,
the remedy) reach the report instead of pytest-timeout's bare stack dump: a limit that can never fire is no limit."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INI_TIMEOUT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"]


def _marker_timeout(node: ast.FunctionDef | ast.AsyncFunctionDef) -> float | None:
    for deco in node.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and ast.unparse(deco.func).endswith("mark.timeout")
            and deco.args
            and isinstance(deco.args[0], ast.Constant)
        ):
            return float(deco.args[0].value)
    return None


# Playwright's waits take milliseconds (page.goto, page.wait_for_selector, locator.click, ...); the rest seconds.
_MILLISECOND_METHODS = ("goto", "wait_for", "click", "fill", "press", "expect_", "reload", "new_page", "set_default_")


def _seconds(call: ast.Call, value: float) -> float:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "asyncio":
        return value  # asyncio.wait_for: seconds
    return value / 1000 if name.startswith(_MILLISECOND_METHODS) else value


def _literal_waits(node: ast.AST) -> list[tuple[int, float]]:
    waits = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            for kw in call.keywords:
                literal = isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, int | float)
                if kw.arg == "timeout" and literal:
                    waits.append((call.lineno, _seconds(call, float(kw.value.value))))
    return waits


def _waits_over_their_tests_limit() -> list[str]:
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text())
        module_tests = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        limits = [_marker_timeout(n) or INI_TIMEOUT for n in module_tests if n.name.startswith("test")]
        module_limit = max(limits, default=INI_TIMEOUT)  # a helper may serve the test with the longest limit
        for node in module_tests:
            limit = (_marker_timeout(node) or INI_TIMEOUT) if node.name.startswith("test") else module_limit
            found += [
                f"{path.relative_to(ROOT)}:{line}: waits {wait:g} s inside {node.name} (pytest stops it at {limit:g} s)"
                for line, wait in _literal_waits(node)
                if wait >= limit
            ]
    return found


def test_every_literal_wait_in_a_test_ends_before_pytests_timeout_for_it():
    assert _waits_over_their_tests_limit() == []


def test_the_check_finds_a_wait_as_long_as_the_limit(tmp_path, monkeypatch):
    source = f"import subprocess\ndef test_x():\n    subprocess.run(['true'], timeout={INI_TIMEOUT})\n"
    tree = ast.parse(source)
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert _literal_waits(fn) == [(3, float(INI_TIMEOUT))] and _marker_timeout(fn) is None


def test_playwright_waits_are_read_as_milliseconds():
    for source, value, seconds in (
        ("page.wait_for_selector('x', timeout=120_000)", 120_000, 120),
        ("link.first.wait_for(timeout=20_000)", 20_000, 20),
        ("asyncio.wait_for(f, timeout=5)", 5, 5),
        ("subprocess.run(cmd, timeout=540)", 540, 540),
    ):
        (call,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
        assert _seconds(call, value) == seconds, source
