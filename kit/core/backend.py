"""Backend selection: NumPy (CPU) or CuPy (GPU), chosen once per process.

How the choice is made (ND4J's rule, re-created):

    KIT_BACKEND=numpy|cupy       ask for one backend by name
    BACKEND_PRIORITY_CPU=<int>   ND4J's variable, default 0
    BACKEND_PRIORITY_GPU=<int>   ND4J's variable, default 100: the highest priority wins,
                                 so a usable GPU is chosen when nothing else is said
    KIT_BACKEND_STRICT=1         a GPU that was asked for but is unusable is an error
                                 instead of one warning and the CPU

The default floating dtype is float32; `KIT_DEFAULT_DTYPE` or `set_default_dtype()`
change it (float16 is ND4J's HALF; bfloat16 where the backend has it).

    >>> import kit
    >>> kit.backend.name()                           # 'numpy' on a machine without a usable GPU, else 'cupy'
    '...'
    >>> previous = kit.set_default_dtype("float16")  # returns the default it replaces
    >>> kit.zeros((2,)).dtype
    dtype('float16')
    >>> _ = kit.set_default_dtype(previous)          # back to float32
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from kit import settings
from kit.state import STATE

if TYPE_CHECKING:
    import cupy

# A raw array on a device, under an NDArray: a NumPy array on the host, a CuPy array (NumPy's
# interface) on a GPU. `Xp` is the module that made it: numpy or cupy (`kit.backend.cupy()`).
RawArray: TypeAlias = "np.ndarray | cupy.ndarray"
Xp: TypeAlias = ModuleType

__all__ = [
    "BackendChoice",
    "BackendError",
    "RawArray",
    "Xp",
    "choose",
    "cupy",
    "get_default_dtype",
    "get_matmul_precision",
    "gpu_status",
    "is_cupy_array",
    "name",
    "nvml",
    "resolve_dtype",
    "set_default_dtype",
    "set_matmul_precision",
    "supported_dtypes",
    "sync",
]


class BackendError(RuntimeError):
    """A backend was asked for strictly and cannot be used."""


@dataclass(frozen=True)
class BackendChoice:
    name: str  # "numpy" or "cupy"
    reason: str  # one line: why this backend was chosen
    gpu_reason: str  # one line: why the GPU is (un)usable


_lock = threading.Lock()


def gpu_status() -> tuple[bool, str]:
    """(usable, one-line reason). Probes CuPy once; never raises."""
    status = STATE.probes.get("gpu_status")  # a fact of the machine: probed once, kept by reset
    if status is None:
        status = STATE.probes["gpu_status"] = _probe_gpu()
    return status


def _probe_gpu() -> tuple[bool, str]:
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return (False, f"CuPy is not importable ({type(exc).__name__}: {_first_line(exc)})")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return (False, "CuPy found no CUDA device")
        cupy.zeros(1, dtype=cupy.float32).sum().item()  # a real kernel: driver and runtime agree
    except Exception as exc:
        return (False, f"CUDA is not usable ({type(exc).__name__}: {_first_line(exc)})")
    return (True, f"CuPy {cupy.__version__} sees {count} CUDA device(s)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


def choose(environ: dict[str, str] | None = None) -> BackendChoice:
    """Decide the backend from the environment. Pure apart from probing the GPU."""
    env = os.environ if environ is None else environ
    strict = settings.backend_strict(env)
    asked = settings.backend_name(env)
    if asked == "numpy":
        return BackendChoice("numpy", "KIT_BACKEND=numpy", gpu_status()[1])
    ok, why = gpu_status()
    if asked == "cupy":
        wanted_gpu, how = True, "KIT_BACKEND=cupy"
        explicit = True
    else:
        cpu = settings.backend_priority("BACKEND_PRIORITY_CPU", 0, env)
        gpu = settings.backend_priority("BACKEND_PRIORITY_GPU", 100, env)
        wanted_gpu = gpu > cpu
        how = (
            f"BACKEND_PRIORITY_GPU={gpu} > BACKEND_PRIORITY_CPU={cpu}"
            if wanted_gpu
            else (f"BACKEND_PRIORITY_CPU={cpu} >= BACKEND_PRIORITY_GPU={gpu}")
        )
        explicit = "BACKEND_PRIORITY_GPU" in env or "BACKEND_PRIORITY_CPU" in env
    if not wanted_gpu:
        return BackendChoice("numpy", how, why)
    if ok:
        return BackendChoice("cupy", how, why)
    message = f"a GPU backend was asked for ({how}) but {why}"
    if strict:
        raise BackendError(message + "; unset KIT_BACKEND_STRICT to fall back to the CPU")
    if explicit:
        warnings.warn(message + "; using NumPy on the CPU", RuntimeWarning, stacklevel=3)
    return BackendChoice("numpy", f"{how}, but the GPU is unusable: falling back to the CPU", why)


def current() -> BackendChoice:
    """The process-wide choice, made on first use."""
    choice = STATE.probes.get("backend")
    if choice is None:
        with _lock:
            choice = STATE.probes.get("backend")
            if choice is None:
                choice = STATE.probes["backend"] = choose()
                if choice.name == "cupy" and get_matmul_precision() == "high":
                    _apply_matmul_precision()
    return choice


def name() -> str:
    return current().name


# ---------------------------------------------------------------------------------------
# dtypes

_DTYPE_ALIASES = settings.DTYPE_ALIASES
_FLOATING = ("float16", "float32", "float64", "bfloat16")
_OTHER = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _bfloat16_dtype() -> np.dtype | None:
    try:
        import ml_dtypes  # provides bfloat16 for NumPy when installed
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def supported_dtypes() -> tuple[str, ...]:
    names = [d for d in _FLOATING if d != "bfloat16"] + list(_OTHER)
    if _bfloat16_dtype() is not None:
        names.insert(3, "bfloat16")
    return tuple(names)


_SUPPORTED_NP: frozenset[np.dtype] = frozenset(np.dtype(d) for d in ("float16", "float32", "float64", *_OTHER))


def resolve_dtype(dtype: object, *, floating_only: bool = False) -> np.dtype:
    """Turn a name or dtype-like into a NumPy dtype kit supports, or raise TypeError naming it."""
    if dtype is None:
        return get_default_dtype()
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        canonical = _DTYPE_ALIASES.get(key, key)
        if canonical == "bfloat16":
            bf = _bfloat16_dtype()
            if bf is None:
                raise TypeError(
                    "dtype 'bfloat16' is not available on this backend: NumPy has no bfloat16 "
                    "without the ml_dtypes package (pip install ml_dtypes)"
                )
            return bf
        try:
            dt = np.dtype(canonical)
        except TypeError:
            raise TypeError(f"unknown dtype {dtype!r}; kit supports {', '.join(supported_dtypes())}") from None
    elif isinstance(dtype, int | float | complex | np.generic):  # a value, not a type: np.float32(nan) is no dtype
        raise TypeError(f"dtype {dtype!r} is a number, not a dtype; give e.g. 'float32' or np.float32")
    else:
        try:
            dt = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError:
            raise TypeError(f"unknown dtype {dtype!r}; kit supports {', '.join(supported_dtypes())}") from None
    if dt not in _SUPPORTED_NP and dt != _bfloat16_dtype():
        raise TypeError(f"unsupported dtype {dt.name}; kit supports {', '.join(supported_dtypes())}")
    if floating_only and dt.kind != "f" and dt != _bfloat16_dtype():
        names = ", ".join(settings.default_dtype_names())
        raise TypeError(f"dtype {dt.name} is not floating; the default dtype must be one of {names}")
    return dt


def get_default_dtype() -> np.dtype:
    if STATE.default_dtype is None:
        STATE.default_dtype = resolve_dtype(settings.default_dtype(), floating_only=True)
    return STATE.default_dtype


def set_default_dtype(dtype: object) -> np.dtype:
    """Set the floating dtype used when none is given. Returns the previous one."""
    previous = get_default_dtype()
    STATE.default_dtype = resolve_dtype(dtype, floating_only=True)
    return previous


MATMUL_PRECISIONS = settings.MATMUL_PRECISIONS


def get_matmul_precision() -> str:
    """How float32 matrix products run on a GPU: 'highest' (float32) or 'high' (TF32)."""
    if STATE.matmul_precision is None:
        # CuPy's own switch, when set and KIT_MATMUL_PRECISION is not, is what runs: say so
        STATE.matmul_precision = settings.matmul_precision() or ("high" if settings.cupy_tf32() else "highest")
    return STATE.matmul_precision


def _check_precision(value: object, where: str) -> str:
    if value not in MATMUL_PRECISIONS:
        raise ValueError(
            f"{where}: the float32 matrix-product precision is one of {sorted(MATMUL_PRECISIONS)} "
            "('highest': float32; 'high': TF32 on tensor cores), e.g. kit.backend.set_matmul_precision('high')"
        )
    return str(value)


def set_matmul_precision(precision: str) -> str:
    """Set how float32 matrix products (and so kit's convolutions, which are matrix products)
    run on a GPU; returns the previous setting. 'high' lets cuBLAS use TF32 on tensor cores
    (Ampere and later), as PyTorch does for convolutions by default; 'highest' keeps float32.
    NumPy has no TF32: on the CPU the setting is kept and changes nothing. CuPy's batched
    products (3-D and more) stay float32 either way."""
    previous = get_matmul_precision()
    STATE.matmul_precision = _check_precision(precision, f"set_matmul_precision({precision!r})")
    if name() == "cupy":
        _apply_matmul_precision()
    return previous


@STATE.on_reset
def _matmul_precision_after_reset() -> None:
    """kit.state.reset() forgets the setting; on CuPy, cuBLAS is told the environment's again."""
    choice = STATE.probes.get("backend")
    if choice is not None and choice.name == "cupy":
        _apply_matmul_precision()


def _apply_matmul_precision() -> None:
    from cupy._core import _routines_linalg as linalg  # CuPy's own switch (what CUPY_TF32=1 sets)

    high = get_matmul_precision() == "high"
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32 if high else linalg.COMPUTE_TYPE_DEFAULT)


def sync() -> None:
    """Wait for queued GPU work (no-op on the CPU): call before reading a host clock."""
    if name() == "cupy":
        cupy().cuda.get_current_stream().synchronize()


# ---------------------------------------------------------------------------------------
# the optional GPU modules: imported here and nowhere else in kit


def cupy() -> ModuleType:
    """The CuPy module. Raises BackendError (with the reason) where CuPy cannot be used."""
    ok, why = gpu_status()
    if not ok:
        raise BackendError(f"CuPy is needed for this but {why}")
    import cupy as _cupy

    return _cupy


def is_cupy_array(obj: object) -> bool:
    """True for a CuPy ndarray (without importing CuPy where it is unusable)."""
    return type(obj).__module__.startswith("cupy") and hasattr(obj, "__cuda_array_interface__")


def nvml() -> Any:
    """NVIDIA's NVML module (nvidia-ml-py), initialised once; None where it is missing or fails."""
    if "nvml" not in STATE.probes:
        try:
            import pynvml

            pynvml.nvmlInit()
            STATE.probes["nvml"] = pynvml
        except Exception:  # not installed, or no NVIDIA driver: readings fall back to CuPy's pool
            STATE.probes["nvml"] = None
    return STATE.probes["nvml"]
