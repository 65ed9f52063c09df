"""Devices: where arrays live and which thread works on which device.

    >>> import kit
    >>> kit.devices()                      # [Device('cpu:0')], or [Device('cpu:0'), Device('gpu:0'), ...]
    [Device('cpu:0')...]
    >>> with kit.device("cpu:0"):
    ...     x = kit.zeros((2, 3))
    >>> x.device
    Device('cpu:0')
    >>> kit.attach_thread_to_device("cpu:0")   # ND4J AffinityManager: this thread -> cpu:0 (or "gpu:1")
    Device('cpu:0')
    >>> from kit.core.devices import detach_thread
    >>> detach_thread()                        # back to the default device
    >>> kit.logical_devices(2)                 # two labelled worker slots on one physical device
    [LogicalDevice('...:0/logical0of2'), LogicalDevice('...:0/logical1of2')]

A `Device` is interned: `Device("cpu:0") is Device("cpu:0")`, so arrays compare devices by
identity. Logical devices split one physical device into n labelled workers; on a GPU each
has its own CUDA stream, on the CPU each gets `cores // n` BLAS threads (threadpoolctl).
They always print as logical, so nobody mistakes two slots of one device for two devices.

Simulated host devices (JAX's --xla_force_host_platform_device_count): `KIT_HOST_DEVICES=N` or
`set_host_device_count(N)` makes the CPU appear as cpu:0 .. cpu:N-1, separate placement domains
like separate GPUs; copies between them go through the one counted transfer path
(`array.to(device)`, `transfer_stats()`). They always print as "simulated on the host".

Placement rules live here too: `default_devices(n)` (worker i -> device i % n) and
`cores_per_worker(n)` (the BLAS threads each of n concurrent workers gets on the CPU).

Its rooms (device_objects, device_transfers, device_rng, cpu_threads) are re-exported here.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterator

import numpy as np

from kit.core import backend
from kit.core.cpu_threads import BlasThreadShare, cores_per_worker
from kit.core.cpu_threads import blas_threads as blas_threads  # kit.devices.blas_threads, as before (not in __all__)
from kit.core.device_objects import (
    AnyDevice,
    Device,
    DeviceError,
    LogicalDevice,
    gpu_count,
    host_device_count,
    set_host_device_count,
)
from kit.core.device_rng import seed
from kit.core.device_transfers import host_source, reset_transfer_stats, scalar, to_host, transfer, transfer_stats
from kit.state import STATE

__all__ = [
    "Device",
    "DeviceError",
    "LogicalDevice",
    "attach_thread_to_device",
    "cores_per_worker",
    "current_device",
    "default_device",
    "default_devices",
    "device",
    "device_for_current_thread",
    "device_for_thread",
    "devices",
    "host_device_count",
    "host_source",
    "logical_devices",
    "reset_transfer_stats",
    "scalar",
    "seed",
    "set_host_device_count",
    "to_host",
    "transfer",
    "transfer_stats",
]
__all__ += ["BlasThreadShare"]


def devices() -> list[Device]:
    """The devices of this machine: cpu:0 (cpu:0..N-1 when simulated), then gpu:0..N-1 when
    CuPy can use them."""
    cpus = [Device(f"cpu:{i}") for i in range(STATE.host_devices)]
    return cpus + [Device(f"gpu:{i}") for i in range(gpu_count())]


def as_device(spec: str | AnyDevice | None) -> AnyDevice:
    if spec is None:
        return current_device()
    if isinstance(spec, (Device, LogicalDevice)):
        return spec
    return Device(spec)


def default_device() -> Device:
    """gpu:0 when the backend is CuPy, else cpu:0."""
    name = backend.name()
    key = "default device " + name  # Device(spec) parses the spec: every array creation asks, so keep it
    found = STATE.probes.get(key)
    if found is None:
        found = STATE.probes[key] = Device("gpu:0") if name == "cupy" else Device("cpu:0")
    return found


# ---------------------------------------------------------------------------------------
# thread <-> device affinity (ND4J's AffinityManager)


_thread = STATE.thread  # this thread's slots: .device_stack, the `with kit.device(...)` scopes


def attach_thread_to_device(dev: str | AnyDevice, thread: threading.Thread | None = None) -> AnyDevice:
    """Pin a thread (default: the calling one) to a device: its arrays are made there."""
    d = as_device(dev)
    ident = (thread or threading.current_thread()).ident
    if ident is None:
        raise DeviceError("attach_thread_to_device: that thread has not started yet")
    with STATE.lock:
        STATE.affinity[ident] = d
    if ident == threading.get_ident():
        _use_for_this_thread(d)
    return d


def detach_thread(thread: threading.Thread | None = None) -> None:
    ident = (thread or threading.current_thread()).ident
    with STATE.lock:
        d = STATE.affinity.pop(ident, None)
    if d is not None and d.kind == "gpu" and ident == threading.get_ident():
        _use_for_this_thread(None)


def _use_for_this_thread(d: AnyDevice | None) -> None:
    """A thread attached to a GPU launches its kernels there, on that device's own stream (a
    logical slot's), for as long as it stays attached: CuPy's current device and stream are
    per thread. Detached (None): back to the default stream. A thread attached to another
    device from the one it was told to use is the bug this prevents (its kernels went to the
    default stream while copies to it were queued on the slot's stream)."""
    if d is not None and d.kind != "gpu":
        return
    cupy = backend.cupy() if gpu_count() else None
    if cupy is None:
        return
    if d is None:
        cupy.cuda.Stream.null.use()
        return
    cupy.cuda.Device(d.index).use()
    (d._stream_for_activate() or cupy.cuda.Stream.null).use()


def device_for_thread(thread: threading.Thread) -> AnyDevice:
    d = STATE.affinity.get(thread.ident)  # type: ignore[arg-type]
    return d if d is not None else default_device()


def device_for_current_thread() -> AnyDevice:
    """The device this thread was attached to, or the default device."""
    d = STATE.affinity.get(threading.get_ident())
    return d if d is not None else default_device()


def current_device() -> AnyDevice:
    """The innermost `with kit.device(...)`, else the thread's attached device, else the default."""
    stack = _thread.device_stack
    if stack:
        return stack[-1]
    return device_for_current_thread()


@contextlib.contextmanager
def device(dev: str | AnyDevice) -> Iterator[AnyDevice]:
    """`with kit.device("gpu:1"):` creates arrays on gpu:1 (and makes it current for CuPy)."""
    d = as_device(dev)
    stack = _thread.device_stack
    if stack is None:
        stack = _thread.device_stack = []
    stack.append(d)
    try:
        with d.activate():
            yield d
    finally:
        stack.pop()


def default_devices(workers: int) -> list[AnyDevice]:
    """The placement rule: worker i -> device i % n over the GPUs when there are any (logical GPU
    slots when there are more workers than GPUs); else over the simulated host devices when
    there are enough; else `workers` logical slots of cpu:0 (one worker: cpu:0 itself)."""
    if isinstance(workers, bool) or not isinstance(workers, int | np.integer) or workers < 1:
        raise DeviceError(f"default_devices({workers!r}): give a whole number of workers >= 1")
    workers = int(workers)
    n = gpu_count()
    if n >= workers:
        return [Device(f"gpu:{i}") for i in range(workers)]
    if n:
        per = -(-workers // n)
        slots = {i: logical_devices(per, f"gpu:{i}") for i in range(n)}
        return [slots[i % n][i // n] for i in range(workers)]
    if STATE.host_devices > 1:
        hosts = [Device(f"cpu:{i}") for i in range(STATE.host_devices)]
        return [hosts[i % len(hosts)] for i in range(workers)]
    return list(logical_devices(workers, "cpu:0")) if workers > 1 else [Device("cpu:0")]


def logical_devices(n: int, physical: str | Device | None = None) -> list[LogicalDevice]:
    """Split one physical device into n labelled logical devices (worker slots)."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DeviceError(f"logical_devices(n): n must be a positive integer, got {n!r}")
    n = int(n)
    phys = as_device(physical) if physical is not None else default_device()
    if isinstance(phys, LogicalDevice):
        raise DeviceError(f"{phys.name} is already logical; split a physical device")
    return [LogicalDevice(phys, i, n) for i in range(n)]


@STATE.on_reset
def _this_thread_detached() -> None:
    """kit.state.reset() forgets every attachment; this thread's CuPy device and stream follow."""
    _use_for_this_thread(None)


class _DevicesModule(types.ModuleType):
    """`kit.devices` is this module, and calling it lists the devices: `kit.devices()` and
    `kit.devices.set_host_device_count(2)` both work as written."""

    def __call__(self) -> list[Device]:
        return devices()


sys.modules[__name__].__class__ = _DevicesModule
