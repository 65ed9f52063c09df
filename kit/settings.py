"""Settings from the environment: every variable kit reads, parsed and checked here, once.

    KIT_HOST_DEVICES=N         simulate N host devices cpu:0..cpu:N-1, 1 to 64 (default 1)
    KIT_DEFAULT_DTYPE=NAME     the default floating dtype: float16, float32 (default), float64,
                               bfloat16 with the ml_dtypes package; aliases half, fp16, float, ...
    KIT_QUICK=yes|no           quick mode (small workloads) for the chapters and `bench`:
                               1/true/yes or 0/false/no, any case (default no)
    KIT_REPLAY=yes|no          replay a recorded step at the kernel seam (kit.nn.replay; default
                               yes); no: every step runs the layers' forward and backward
    KIT_MATMUL_PRECISION=P     float32 matrix products on a GPU: 'highest' (float32) or 'high' (TF32)
    KIT_SEED=N                 the base seed of every device's generator (default 0)
    KIT_BACKEND=numpy|cupy     ask for one backend by name (kit.backend explains the rule)
    KIT_BACKEND_STRICT=yes|no  an unusable GPU that was asked for is an error (default no)
    BACKEND_PRIORITY_CPU=N     ND4J's backend priorities, integers (defaults 0 and 100)
    BACKEND_PRIORITY_GPU=N
    CUPY_TF32, KIT_COMMIT      read as given (CuPy's own switch; the commit a benchmark reports)

Importing kit checks them all, so a bad value stops the import with one line naming the
variable, the value, what is allowed and what to do (`python -m kit` prints that line and exits 2):

    >>> from kit import settings
    >>> settings.host_devices({"KIT_HOST_DEVICES": "4"})
    4
    >>> settings.quick({"KIT_QUICK": "Yes"})
    True
    >>> settings.host_devices({"KIT_HOST_DEVICES": "abc"})
    Traceback (most recent call last):
    kit.settings.SettingError: KIT_HOST_DEVICES='abc' is not a whole number: ...

kit's distribution name is here too (`DISTRIBUTION`): the `kit` on PyPI is someone else's project,
so every install hint kit prints comes from `install_hint`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = [
    "CONSOLE_SCRIPT",
    "DISTRIBUTION",
    "MATMUL_PRECISIONS",
    "MAX_HOST_DEVICES",
    "SettingError",
    "Settings",
    "backend_name",
    "backend_priority",
    "backend_strict",
    "commit",
    "cupy_tf32",
    "default_dtype",
    "default_dtype_names",
    "distribution_version",
    "extra_requirements",
    "host_devices",
    "install_hint",
    "is_checkout",
    "load",
    "matmul_precision",
    "quick",
    "replay",
    "seed",
]

DISTRIBUTION = "gpu-workspaces-kit"  # what pip installs; the import name is `kit`
CONSOLE_SCRIPT = "kit"  # pyproject's [project.scripts]
MAX_HOST_DEVICES = 64  # simulated host devices: each has its own counters, caches, generator, workspaces

# names the default floating dtype may be given by (ND4J's HALF is float16)
DTYPE_ALIASES = {
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "double": "float64",
    "float64": "float64",
    "fp64": "float64",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}

MATMUL_PRECISIONS = {
    "highest": "float32 products and sums (CuPy's and NumPy's default)",
    "high": "TF32 on a GPU's tensor cores (10-bit mantissa inputs, float32 sums); PyTorch's default for convolutions",
}

_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


class SettingError(ValueError):
    """An environment variable kit reads holds a value kit cannot use. The message is one line:
    the variable and its value, what is allowed, and what to do."""

    def __init__(self, variable: str, value: str, problem: str, remedy: str) -> None:
        self.variable, self.value = variable, value
        super().__init__(f"{variable}={value!r} {problem}; {remedy}")


ROOT = Path(__file__).resolve().parents[1]  # the checkout, when kit runs from one


def is_checkout(root: Path = ROOT) -> bool:
    """kit runs from a checkout of its source (pyproject.toml names it), not from an installed wheel."""
    try:
        return tomllib.loads((root / "pyproject.toml").read_text())["project"]["name"] == DISTRIBUTION
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return False


def extra_requirements(extra: str) -> list[str] | None:
    """The requirements of one of kit's extras: from the checkout's pyproject.toml, else from the
    installed distribution's metadata; None where neither says (a copied kit)."""
    if is_checkout():
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
        return list(extras[extra]) if extra in extras else None
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    found = [r.split(";")[0].strip() for r in requires if ";" in r and marker.search(r.split(";", 1)[1])]
    return found or None


def install_hint(extra: str | None = None) -> str:
    """A pip command that installs kit (with `extra`) and works today, as kit's messages print it
    (kit is not on PyPI yet): this checkout's (`pip install -e`), else the extra's own requirements,
    which PyPI has, read from the installed wheel's metadata."""
    if is_checkout():
        return f'pip install -e "{ROOT}[{extra}]"' if extra else f'pip install -e "{ROOT}"'
    requirements = extra_requirements(extra) if extra else None
    if requirements:
        quoted = " ".join(f'"{r}"' for r in requirements)
        return f"pip install {quoted} (the {extra} extra of {DISTRIBUTION})"
    wanted = f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION
    return f'pip install "{wanted}" from a wheel built in kit\'s checkout with `python -m build` (not on PyPI yet)'


def distribution_version() -> str | None:
    """The installed version of kit's distribution (importlib.metadata); None where it is not
    installed (a checkout on sys.path), so the caller falls back to kit.__version__."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _raw(env: Mapping[str, str] | None, variable: str) -> str | None:
    """The variable's value, stripped; None when it is unset or empty."""
    value = (os.environ if env is None else env).get(variable)
    if value is None or not value.strip():
        return None
    return value.strip()


def _flag(env: Mapping[str, str] | None, variable: str, meaning: str) -> bool:
    raw = _raw(env, variable)
    if raw is None:
        return False
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise SettingError(
        variable,
        raw,
        f"is not a yes/no value: 1, true or yes turn on {meaning}; 0, false or no (or unset) turn it off",
        f"e.g. {variable}=1, or unset it",
    )


def host_devices(env: Mapping[str, str] | None = None) -> int:
    """KIT_HOST_DEVICES: how many devices the CPU is split into (1 when unset)."""
    raw = _raw(env, "KIT_HOST_DEVICES")
    if raw is None:
        return 1
    allowed = f"kit simulates 1 to {MAX_HOST_DEVICES} devices on the host"
    remedy = "e.g. KIT_HOST_DEVICES=2, or unset it for one CPU device"
    if not raw.isdigit():
        raise SettingError("KIT_HOST_DEVICES", raw, f"is not a whole number: {allowed}", remedy)
    if not 1 <= int(raw) <= MAX_HOST_DEVICES:
        raise SettingError("KIT_HOST_DEVICES", raw, f"is out of range: {allowed}", remedy)
    return int(raw)


def default_dtype_names() -> tuple[str, ...]:
    """The dtypes the default may be: float16, float32, float64, and bfloat16 where ml_dtypes is installed."""
    found = importlib.util.find_spec("ml_dtypes") is not None
    return ("float16", "float32", "float64", "bfloat16") if found else ("float16", "float32", "float64")


def default_dtype(env: Mapping[str, str] | None = None) -> str:
    """KIT_DEFAULT_DTYPE as a canonical name ('float32' when unset)."""
    raw = _raw(env, "KIT_DEFAULT_DTYPE")
    if raw is None:
        return "float32"
    name = DTYPE_ALIASES.get(raw.lower())
    names = default_dtype_names()
    remedy = "e.g. KIT_DEFAULT_DTYPE=float16, or kit.set_default_dtype('float16') in code"
    if name == "bfloat16" and name not in names:
        raise SettingError(
            "KIT_DEFAULT_DTYPE",
            raw,
            "needs the ml_dtypes package (pip install ml_dtypes)",
            f"or use one of {', '.join(names)}",
        )
    if name is None:
        raise SettingError(
            "KIT_DEFAULT_DTYPE", raw, f"is not a dtype the default may be: one of {', '.join(names)}", remedy
        )
    return name


def quick(env: Mapping[str, str] | None = None) -> bool:
    """KIT_QUICK: quick mode (the test suite sets it); False when unset."""
    return _flag(env, "KIT_QUICK", "quick mode (small workloads)")


def replay(env: Mapping[str, str] | None = None) -> bool:
    """KIT_REPLAY: whether steps are replayed at the kernel seam (kit.nn.replay); True when unset."""
    if _raw(env, "KIT_REPLAY") is None:
        return True
    return _flag(env, "KIT_REPLAY", "the replay of recorded steps (kit.nn.replay)")


def matmul_precision(env: Mapping[str, str] | None = None) -> str | None:
    """KIT_MATMUL_PRECISION: 'high' or 'highest'; None when unset (kit.backend then reads CUPY_TF32)."""
    raw = _raw(env, "KIT_MATMUL_PRECISION")
    if raw is not None and raw not in MATMUL_PRECISIONS:
        raise SettingError(
            "KIT_MATMUL_PRECISION",
            raw,
            f"is not a matrix-product precision: one of {sorted(MATMUL_PRECISIONS)} "
            "('highest': float32; 'high': TF32 on tensor cores)",
            "e.g. KIT_MATMUL_PRECISION=high, or kit.backend.set_matmul_precision('high') in code",
        )
    return raw


def cupy_tf32(env: Mapping[str, str] | None = None) -> bool:
    """CUPY_TF32, CuPy's own switch, read as CuPy reads it: anything but 0 turns TF32 on."""
    raw = _raw(env, "CUPY_TF32")
    return raw is not None and raw != "0"


def seed(env: Mapping[str, str] | None = None) -> int:
    """KIT_SEED: the base seed of every device's generator (0 when unset)."""
    return _integer(env, "KIT_SEED", 0, "it seeds every device's generator", "e.g. KIT_SEED=1, or kit.seed(1)")


def backend_name(env: Mapping[str, str] | None = None) -> str | None:
    """KIT_BACKEND: 'numpy' or 'cupy' (any case); None when unset."""
    raw = _raw(env, "KIT_BACKEND")
    if raw is None:
        return None
    if raw.lower() not in ("numpy", "cupy"):
        raise SettingError(
            "KIT_BACKEND", raw, "is not a backend: 'numpy' (CPU) or 'cupy' (GPU)", "e.g. KIT_BACKEND=numpy, or unset it"
        )
    return raw.lower()


def backend_strict(env: Mapping[str, str] | None = None) -> bool:
    """KIT_BACKEND_STRICT: a GPU asked for but unusable is an error instead of a warning."""
    return _flag(env, "KIT_BACKEND_STRICT", "strict backend choice (an unusable GPU is an error)")


def backend_priority(variable: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """BACKEND_PRIORITY_CPU / BACKEND_PRIORITY_GPU: ND4J's backend priorities (integers)."""
    why = "ND4J's backend priorities are integers and the highest wins "
    why += "(defaults BACKEND_PRIORITY_CPU=0, BACKEND_PRIORITY_GPU=100)"
    return _integer(env, variable, default, why, f"e.g. {variable}=0, or unset it")


def _integer(env: Mapping[str, str] | None, variable: str, default: int, why: str, remedy: str) -> int:
    """The variable as an integer (`default` when unset), or SettingError saying `why` it must be one."""
    raw = _raw(env, variable)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingError(variable, raw, f"is not an integer: {why}", remedy) from None


def commit(env: Mapping[str, str] | None = None) -> str | None:
    """KIT_COMMIT: the commit to report where kit is not a git checkout (a wheel); None when unset."""
    return _raw(env, "KIT_COMMIT")


@dataclass(frozen=True)
class Settings:
    """Every setting, parsed: what `load` returns."""

    host_devices: int
    default_dtype: str
    quick: bool
    matmul_precision: str | None
    seed: int
    backend: str | None
    backend_strict: bool
    backend_priority_cpu: int
    backend_priority_gpu: int
    replay: bool = True


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Parse and check every setting (`env`: the process environment by default); the first bad
    one raises SettingError."""
    return Settings(
        host_devices=host_devices(env),
        default_dtype=default_dtype(env),
        quick=quick(env),
        matmul_precision=matmul_precision(env),
        seed=seed(env),
        backend=backend_name(env),
        backend_strict=backend_strict(env),
        backend_priority_cpu=backend_priority("BACKEND_PRIORITY_CPU", 0, env),
        backend_priority_gpu=backend_priority("BACKEND_PRIORITY_GPU", 100, env),
        replay=replay(env),
    )


def command_name(argv0: str | None = None) -> str | None:
    """The name kit's command line runs under (`python -m kit`, or the console script's name),
    or None when this process is not kit's command."""
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    if argv0 == "-m":  # `python -m kit` while Python is still importing the package it will run
        orig = list(getattr(sys, "orig_argv", []))
        for i, arg in enumerate(orig):
            if arg.startswith("-m"):
                module = arg[2:] or (orig[i + 1] if i + 1 < len(orig) else "")
                return "python -m kit" if module in ("kit", "kit.__main__") else None
        return None
    if Path(argv0).name == "__main__.py" and Path(argv0).parent.name == "kit":
        return "python -m kit"
    name = Path(argv0).name
    return name if name in (CONSOLE_SCRIPT, f"{CONSOLE_SCRIPT}.exe") else None


def _check_at_import() -> None:
    """Importing kit checks every setting. Inside kit's own command a bad one is one line on
    stderr and exit status 2 (argparse's convention); everywhere else it raises SettingError."""
    try:
        load()
    except SettingError as exc:
        name = command_name()
        if name is None:
            raise
        sys.stderr.write(f"{name}: error: {exc}\n")
        raise SystemExit(2) from None


_check_at_import()
