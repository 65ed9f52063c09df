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

The package reads like the book: settings and state (the environment, everything kit keeps
process-wide with one reset()) at the bottom, then the wings, lowest first: kit.core (backend,
devices, context, memory), kit.workspaces (arenas), kit.arrays (NDArray, creation, ops),
kit.measurement (measure, goals, tables, prose, reference runs), kit.monitor (readings, the memory
timeline, live panels), kit.data, kit.nn (layers, kernels, the training loop, evaluation),
kit.parallel, kit.training (early stopping, listeners, compare) and kit.spark. Every module that
used to sit at the top keeps its old name here: `kit.memory.count()`, `from kit import measure`,
`kit.earlystopping.EarlyStoppingTrainer` all work (`_MOVED` says where each one lives now).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kit import settings, state
from kit.arrays.creation import (
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
from kit.arrays.ndarray import DeviceMismatchError, NDArray, ShapeError
from kit.arrays.ops import concatenate, maximum, minimum, stack, where
from kit.core import backend, context, devices, memory
from kit.core.backend import BackendError, get_default_dtype, set_default_dtype
from kit.core.context import scope_out_of_workspaces
from kit.core.devices import (
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
from kit.monitor import readings, widgets
from kit.monitor.timeline import memory_timeline
from kit.workspaces import workspace
from kit.workspaces.workspace import (
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

# the old top-level modules, each by the name chapters and user code know it, and where it lives now
_MOVED = {
    **dict.fromkeys(
        ["backend", "context", "cpu_threads", "device_objects", "device_rng", "device_transfers", "devices"], "kit.core"
    ),
    **dict.fromkeys(["gc_window", "memory", "shapes"], "kit.core"),
    **dict.fromkeys(
        ["workspace", "workspace_config", "workspace_cycles", "workspace_errors", "workspace_registry"],
        "kit.workspaces",
    ),
    **dict.fromkeys(
        ["checks", "creation", "ndarray", "ndarray_copies", "ndarray_host", "ndarray_operators", "ndarray_views"],
        "kit.arrays",
    ),
    "ops": "kit.arrays",
    **dict.fromkeys(
        ["goals", "load", "measure", "prose", "reference", "reference_limits", "reference_runs", "tables"],
        "kit.measurement",
    ),
    **dict.fromkeys(["panel_live", "panels", "readings", "timeline", "timeline_views", "widgets"], "kit.monitor"),
    **dict.fromkeys(
        ["compare", "comparison", "earlystopping", "earlystopping_config", "listeners", "scaling"], "kit.training"
    ),
    "labels": "kit.data",
    "evaluation": "kit.nn",
}


def __getattr__(name: str) -> ModuleType:
    """`kit.measure`, `from kit import goals`: an old top-level name, imported from its wing on first use."""
    if name not in _MOVED:
        raise AttributeError(f"module 'kit' has no attribute {name!r}")
    module = importlib.import_module(f"{_MOVED[name]}.{name}")
    globals()[name] = module
    return module


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
