"""kit: learn GPU memory management and multi-device training by measuring it.

    >>> import kit
    >>> kit.devices()                                   # what this machine has
    [Device('cpu:0')...]
    >>> x = kit.randn((64, 32)); w = kit.randn((32, 10))
    >>> with kit.get_workspace_for_current_thread(name="LOOP") as ws:
    ...     y = (x @ w).tanh().sum(axis=1).detach()    # arena memory; the result kept
    >>> y                                               # detached: a heap copy that outlives the cycle
    NDArray(shape=(64,), dtype=float32, device=..., heap)
      [...]
    >>> ws.destroy()                                    # give the arena back

From a shell, `python -m kit info` prints the backend, devices and BLAS. pip knows kit as
`gpu-workspaces-kit` (the `kit` on PyPI is an unrelated project); the import name is `kit`.

`kit.devices` is both the module and, called, the list of devices: `kit.devices()` and
`kit.devices.set_host_device_count(2)` work as written. Environment variables (KIT_HOST_DEVICES,
KIT_DEFAULT_DTYPE, KIT_QUICK, ...) are checked once, at import, by kit.settings.

Modules, lowest first: settings (the environment), state (everything kit keeps process-wide, with
one reset()), backend (NumPy/CuPy), devices (placement, the one transfer path, BLAS-thread shares),
context (the current workspace), memory (the one allocation door and counter, the cache, GC window),
workspace (arenas), shapes/ndarray/ops/creation (arrays; ndarray.wrap builds every NDArray),
readings (RSS, GPU, one stats dictionary), widgets (live panels); above them kit.nn (layers, their
kernels, the training loop and its Trainable protocol), kit.data, kit.parallel (the wrapper;
inference as facade, engine and delivery), kit.earlystopping, kit.spark.
"""

from __future__ import annotations

from kit import backend, context, devices, memory, readings, settings, state, widgets, workspace
from kit.backend import BackendError, get_default_dtype, set_default_dtype
from kit.context import scope_out_of_workspaces
from kit.creation import (
    arange,
    array,
    asarray,
    empty,
    empty_like,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    randn,
    zeros,
    zeros_like,
)
from kit.devices import (
    Device,
    DeviceError,
    LogicalDevice,
    attach_thread_to_device,
    current_device,
    device,
    device_for_current_thread,
    logical_devices,
    seed,
)
from kit.ndarray import DeviceMismatchError, NDArray, ShapeError
from kit.ops import concatenate, maximum, minimum, stack, where
from kit.timeline import memory_timeline
from kit.workspace import (
    AllocationPolicy,
    DebugMode,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    Workspace,
    WorkspaceConfig,
    WorkspaceError,
    destroy_all_workspaces_for_current_thread,
    get_workspace_for_current_thread,
    set_debug_mode,
)

__version__ = "0.1.0"


def exp(x: NDArray) -> NDArray:
    return x.exp()


def log(x: NDArray) -> NDArray:
    return x.log()


def tanh(x: NDArray) -> NDArray:
    return x.tanh()


def sqrt(x: NDArray) -> NDArray:
    return x.sqrt()


def abs(x: NDArray) -> NDArray:
    return x.abs()


def clip(x: NDArray, lo: float | None, hi: float | None) -> NDArray:
    return x.clip(lo, hi)


def matmul(a: NDArray, b: NDArray) -> NDArray:
    return a.matmul(b)


__all__ = [
    "AllocationPolicy",
    "BackendError",
    "DebugMode",
    "Device",
    "DeviceError",
    "DeviceMismatchError",
    "LearningPolicy",
    "LogicalDevice",
    "NDArray",
    "ResetPolicy",
    "ShapeError",
    "SpillPolicy",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceError",
    "abs",
    "arange",
    "array",
    "asarray",
    "attach_thread_to_device",
    "backend",
    "clip",
    "concatenate",
    "context",
    "current_device",
    "destroy_all_workspaces_for_current_thread",
    "device",
    "device_for_current_thread",
    "devices",
    "empty",
    "empty_like",
    "exp",
    "full",
    "full_like",
    "get_default_dtype",
    "get_workspace_for_current_thread",
    "log",
    "logical_devices",
    "matmul",
    "maximum",
    "memory",
    "memory_timeline",
    "minimum",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "readings",
    "scope_out_of_workspaces",
    "seed",
    "set_debug_mode",
    "set_default_dtype",
    "settings",
    "sqrt",
    "stack",
    "state",
    "tanh",
    "where",
    "widgets",
    "workspace",
    "zeros",
    "zeros_like",
]
