"""kit.settings: every environment variable kit reads is parsed and checked there, once; a bad
value is one line naming the variable, the value, what is allowed and what to do; importing kit
raises it, and kit's command line prints it and exits 2."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import kit
from kit import backend, settings
from kit.settings import SettingError
from kit.state import STATE

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

BAD = [
    ("KIT_HOST_DEVICES", "abc", "is not a whole number: kit simulates 1 to 64 devices"),
    ("KIT_HOST_DEVICES", "100000", "is out of range: kit simulates 1 to 64 devices"),
    ("KIT_HOST_DEVICES", "0", "is out of range"),
    ("KIT_HOST_DEVICES", "65", "is out of range"),
    ("KIT_HOST_DEVICES", "-2", "is not a whole number"),
    ("KIT_HOST_DEVICES", "2.5", "is not a whole number"),
    ("KIT_DEFAULT_DTYPE", "int7", "is not a dtype the default may be: one of float16, float32, float64"),
    ("KIT_DEFAULT_DTYPE", "int32", "is not a dtype the default may be"),
    ("KIT_QUICK", "maybe", "is not a yes/no value"),
    ("KIT_QUICK", "2", "is not a yes/no value"),
    ("KIT_QUICK", "on", "is not a yes/no value"),
    ("KIT_MATMUL_PRECISION", "fast", "is not a matrix-product precision: one of ['high', 'highest']"),
    ("KIT_SEED", "x", "is not an integer"),
    ("KIT_BACKEND", "tpu", "is not a backend: 'numpy' (CPU) or 'cupy' (GPU)"),
    ("KIT_BACKEND_STRICT", "perhaps", "is not a yes/no value"),
    ("BACKEND_PRIORITY_GPU", "high", "is not an integer"),
    ("BACKEND_PRIORITY_CPU", "1.5", "is not an integer"),
]


@pytest.mark.parametrize(("variable", "value", "problem"), BAD)
def test_a_bad_value_is_one_line_naming_variable_value_what_is_allowed_and_a_remedy(variable, value, problem):
    with pytest.raises(SettingError) as info:
        settings.load({variable: value})
    message = str(info.value)
    assert message.startswith(f"{variable}={value!r} {problem}")
    assert "\n" not in message
    assert "e.g. " in message or "use one of" in message  # what to do
    assert (info.value.variable, info.value.value) == (variable, value)


def test_the_default_dtype_error_lists_only_what_the_default_accepts():
    with pytest.raises(SettingError) as info:
        settings.default_dtype({"KIT_DEFAULT_DTYPE": "int7"})
    listed = str(info.value).split("one of ", 1)[1].split(";", 1)[0]
    assert listed.split(", ") == list(settings.default_dtype_names())
    for name in listed.split(", "):  # every name listed is one the default really takes
        assert np.dtype(backend.resolve_dtype(name, floating_only=True)).kind in "fV"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(v, True) for v in ("1", "true", "TRUE", "Yes", " yes ")]
    + [(v, False) for v in ("0", "false", "False", "no", "NO", "")],
)
def test_quick_accepts_yes_and_no_in_any_case(value, expected):
    assert settings.quick({"KIT_QUICK": value}) is expected


def test_unset_variables_give_the_defaults():
    assert settings.load({}) == settings.Settings(
        host_devices=1,
        default_dtype="float32",
        quick=False,
        matmul_precision=None,
        seed=0,
        backend=None,
        backend_strict=False,
        backend_priority_cpu=0,
        backend_priority_gpu=100,
    )


def test_good_values_are_parsed():
    env = {
        "KIT_HOST_DEVICES": " 64 ",
        "KIT_DEFAULT_DTYPE": "Double",
        "KIT_QUICK": "yes",
        "KIT_MATMUL_PRECISION": "high",
        "KIT_SEED": "7",
        "KIT_BACKEND": "NumPy",
        "KIT_BACKEND_STRICT": "1",
        "BACKEND_PRIORITY_CPU": "200",
        "BACKEND_PRIORITY_GPU": "-1",
    }
    assert settings.load(env) == settings.Settings(64, "float64", True, "high", 7, "numpy", True, 200, -1)


def test_backend_and_devices_read_their_settings_through_kit_settings(monkeypatch):
    monkeypatch.setattr(STATE, "default_dtype", None)
    monkeypatch.setenv("KIT_DEFAULT_DTYPE", "fp64")
    assert backend.get_default_dtype() == np.float64
    monkeypatch.setattr(STATE, "default_dtype", None)
    monkeypatch.setenv("KIT_DEFAULT_DTYPE", "int7")
    with pytest.raises(SettingError, match="KIT_DEFAULT_DTYPE='int7'"):
        backend.get_default_dtype()
    monkeypatch.setattr(STATE, "default_dtype", None)
    monkeypatch.delenv("KIT_DEFAULT_DTYPE")
    with pytest.raises(SettingError, match="KIT_BACKEND='tpu'"):
        backend.choose({"KIT_BACKEND": "tpu"})


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIT_", "BACKEND_PRIORITY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return {**env, **changes}


def _python(args: list[str], cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=_env(**env)
    )


def test_importing_kit_with_a_bad_setting_raises_the_setting_error():
    out = _python(["-c", "import kit"], KIT_HOST_DEVICES="abc")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "kit.settings.SettingError: KIT_HOST_DEVICES='abc' is not a whole number: kit simulates 1 to 64 "
        "devices on the host; e.g. KIT_HOST_DEVICES=2, or unset it for one CPU device"
    )


@pytest.mark.parametrize(
    ("variable", "value"), [("KIT_HOST_DEVICES", "abc"), ("KIT_HOST_DEVICES", "100000"), ("KIT_QUICK", "maybe")]
)
def test_python_m_kit_prints_one_line_and_exits_2(variable, value):
    out = _python(["-m", "kit", "info"], **{variable: value})
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"python -m kit: error: {variable}={value!r} ")


def _console_script(tmp_path: Path) -> Path:
    """What pip writes for [project.scripts] kit = kit.__main__:main, in a folder named like a venv's bin."""
    (entry,) = PYPROJECT["project"]["scripts"].items()
    assert entry == (settings.CONSOLE_SCRIPT, "kit.__main__:main")
    script = tmp_path / "bin" / settings.CONSOLE_SCRIPT
    script.parent.mkdir()
    script.write_text(
        "import re\nimport sys\nfrom kit.__main__ import main\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n"
    )
    return script


def test_the_console_script_says_its_own_name_and_exits_2_on_a_bad_setting(tmp_path):
    script = _console_script(tmp_path)
    out = _python([str(script), "info"], cwd=tmp_path, KIT_DEFAULT_DTYPE="int7")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("kit: error: KIT_DEFAULT_DTYPE='int7' is not a dtype the default may be")
    usage = _python([str(script), "-h"], cwd=tmp_path)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kit [-h] [--version]")
    version = _python([str(script), "--version"], cwd=tmp_path)
    assert version.stdout.strip() == f"{settings.DISTRIBUTION} {settings.distribution_version() or kit.__version__}"


def test_command_name_knows_kits_own_command_only(monkeypatch):
    assert settings.command_name("/venv/bin/kit") == "kit"
    assert settings.command_name("/repo/kit/__main__.py") == "python -m kit"
    assert settings.command_name("/usr/bin/pytest") is None
    assert settings.command_name("-c") is None
    monkeypatch.setattr(sys, "orig_argv", ["python", "-X", "dev", "-m", "kit", "info"])
    assert settings.command_name("-m") == "python -m kit"
    monkeypatch.setattr(sys, "orig_argv", ["python", "-mkit.__main__"])
    assert settings.command_name("-m") == "python -m kit"
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "kitchen"])
    assert settings.command_name("-m") is None


def test_the_distribution_name_is_one_name_everywhere():
    assert PYPROJECT["project"]["name"] == settings.DISTRIBUTION != "kit"
    assert PYPROJECT["project"]["version"] == kit.__version__
    assert settings.install_hint("spark") == f'pip install -e "{REPO}[spark]"'  # a checkout: its own extra
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    licence = (REPO / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License\n") and "END OF TERMS AND CONDITIONS" in licence


# install hints in files other sessions own, to be moved to settings.install_hint there
PENDING_HINTS: set[str] = set()


def test_no_install_hint_names_the_strangers_kit_distribution():
    """`pip install kit[...]` installs an unrelated project from PyPI: no hint may say it (the README's
    warning, "`pip install kit` installs a stranger's code", in backticks, is the exception)."""
    stranger = re.compile(r"(?<![\w.-])kit\[|(?<![\w.-])kit @ |pip install (?:-\w+ )*kit(?=[\s\"'])")
    files = [*sorted((REPO / "kit").rglob("*.py")), REPO / "README.md", REPO / "environment.yml", REPO / ".ci" / "run"]
    offenders = []
    for path in files:
        name = path.relative_to(REPO).as_posix()
        if name not in PENDING_HINTS:
            offenders += [f"{name}: {m.group(0)!r}" for m in stranger.finditer(path.read_text())]
    assert not offenders, offenders
    assert stranger.search('pip install "kit[spark]"') and stranger.search("pip install kit[bench]")
    assert not stranger.search(f'pip install "{settings.DISTRIBUTION}[spark]" or {settings.DISTRIBUTION} @ git+')


@pytest.mark.parametrize("extra", sorted(PYPROJECT["project"]["optional-dependencies"]))
def test_every_install_hint_works_today_from_a_checkout_and_from_a_wheel(extra, monkeypatch):
    """The hints said `pip install "gpu-workspaces-kit[extra]"`, which no index has yet: from a checkout
    the hint installs its extra, and from a wheel it names the extra's own requirements (PyPI has them)."""
    assert settings.install_hint(extra) == f'pip install -e "{REPO}[{extra}]"'
    monkeypatch.setattr(settings, "is_checkout", lambda root=None: False)  # as a wheel install sees itself
    requires = [f"{r}; extra == '{e}'" for e, rs in PYPROJECT["project"]["optional-dependencies"].items() for r in rs]
    monkeypatch.setattr(settings.metadata, "requires", lambda name: requires)
    hint = settings.install_hint(extra)
    wanted = PYPROJECT["project"]["optional-dependencies"][extra]
    assert (
        hint == "pip install " + " ".join(f'"{r}"' for r in wanted) + f" (the {extra} extra of {settings.DISTRIBUTION})"
    )
    monkeypatch.setattr(settings.metadata, "requires", lambda name: [])  # a copied kit: no metadata at all
    assert "python -m build" in settings.install_hint(extra) and "not on PyPI yet" in settings.install_hint(extra)


def test_no_message_prints_an_install_command_pypi_cannot_serve():
    """Every caller goes through settings.install_hint; none spells `pip install "gpu-workspaces-kit` itself."""
    spelled = re.compile(r"pip install \\?[\"']?" + re.escape(settings.DISTRIBUTION))
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "kit").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line) and path.name != "settings.py"
    ]
    assert offenders == []
