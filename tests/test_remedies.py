"""Every remedy kit's error messages print in code form runs as printed.

Two ways of finding them: read the strings of kit/devices.py, kit/backend.py and kit/settings.py
(docstrings aside) for `kit.<...>(...)` calls and `VAR=value` settings; and raise each error those
modules word, and read the remedies from the real messages (where values are filled in). Each
remedy then runs in a fresh Python: a call after `import kit`, a setting as the environment of
`import kit`.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import kit
from kit import backend, settings
from kit.devices import devices, set_host_device_count

REPO = Path(__file__).resolve().parents[1]
MODULES = ("kit/devices.py", "kit/backend.py", "kit/settings.py")
CALL = re.compile(r"\bkit(?:\.\w+)+\((?:[^()]|\([^()]*\))*\)")
SETTING = re.compile(r"\b((?:KIT|BACKEND_PRIORITY)_[A-Z_]+)=([A-Za-z0-9_.-]+)")
FILLED = "\x00"  # where an f-string fills in a value


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(path: Path) -> list[str]:
    """The module's string literals, docstrings aside; an f-string with FILLED where a value goes."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            out.append("".join(v.value if isinstance(v, ast.Constant) else FILLED for v in node.values))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out.append(node.value)
    return out


def _remedies(text: str) -> set[str]:
    calls = set(CALL.findall(text))
    calls |= {f"{var}={value}" for var, value in SETTING.findall(text)}
    return calls


def _source_remedies() -> set[str]:
    found = set()
    for name in MODULES:
        for text in _strings(REPO / name):
            found |= {r for r in _remedies(text) if FILLED not in r}
    return found


def _raised(make: Callable[[], object]) -> str:
    with pytest.raises(Exception) as info:  # any error kit words
        make()
    return str(info.value)


def _message_remedies() -> set[str]:
    """Raise every error these modules word, and read the remedies from the messages."""
    messages = [_raised(lambda: kit.Device("cpu:1")), _raised(lambda: kit.Device(f"gpu:{kit.devices.gpu_count()}"))]
    previous = set_host_device_count(3)
    try:
        messages += [_raised(lambda: kit.Device("cpu:5")), _raised(lambda: kit.Device("cpu:64"))]
    finally:
        set_host_device_count(previous)
    messages.append(_raised(lambda: set_host_device_count(100_000)))
    previous_precision = backend.get_matmul_precision()
    messages.append(_raised(lambda: backend.set_matmul_precision("tf32")))
    assert backend.get_matmul_precision() == previous_precision
    messages.append(_raised(lambda: backend.resolve_dtype("quad")))
    bad = {
        "KIT_HOST_DEVICES": ["abc", "100000"],
        "KIT_DEFAULT_DTYPE": ["int7", "bfloat16"],
        "KIT_QUICK": ["maybe"],
        "KIT_MATMUL_PRECISION": ["fast"],
        "KIT_SEED": ["x"],
        "KIT_BACKEND": ["tpu"],
        "KIT_BACKEND_STRICT": ["perhaps"],
        "BACKEND_PRIORITY_CPU": ["low"],
        "BACKEND_PRIORITY_GPU": ["high"],
    }
    for variable, values in bad.items():
        for value in values:
            try:
                settings.load({variable: value})
            except settings.SettingError as exc:
                messages.append(str(exc))
            else:
                assert (variable, value) == ("KIT_DEFAULT_DTYPE", "bfloat16")  # fine where ml_dtypes is installed
    found = set()
    for message in messages:
        found |= _remedies(message)
    return found


SOURCE = _source_remedies()
MESSAGES = _message_remedies()


def test_the_remedies_are_found():
    """The finder sees what the messages say (so an empty search cannot pass for a clean one)."""
    assert "kit.devices()" in SOURCE and "kit.backend.set_matmul_precision('high')" in SOURCE
    assert "kit.set_default_dtype('float16')" in SOURCE and "KIT_HOST_DEVICES=2" in SOURCE
    assert "kit.devices.set_host_device_count(2)" in MESSAGES  # the advice for Device('cpu:1')
    assert "kit.devices.set_host_device_count(6)" in MESSAGES  # for cpu:5 of 3
    assert "KIT_HOST_DEVICES=2" in MESSAGES and "KIT_QUICK=1" in MESSAGES and "BACKEND_PRIORITY_GPU=0" in MESSAGES


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "BACKEND_PRIORITY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return {**env, **changes}


@pytest.mark.parametrize("remedy", sorted(SOURCE | MESSAGES))
def test_each_remedy_runs_as_printed(remedy):
    if "(" in remedy:
        cmd, env = ["-c", f"import kit\nprint(repr({remedy}))"], _env()
    else:
        variable, value = remedy.split("=", 1)
        cmd, env = ["-c", "import kit; print(kit.settings.load())"], _env(**{variable: value})
    out = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert out.returncode == 0, f"{remedy!r} does not run:\n{out.stderr[-2000:]}"


def test_kit_devices_is_the_list_and_the_module():
    """The clash the advice fell into: kit.devices was the function, so kit.devices.X raised AttributeError."""
    assert kit.devices() == kit.devices.devices()
    assert kit.devices.set_host_device_count is set_host_device_count
    assert devices() == kit.devices()  # the function, imported from the module
