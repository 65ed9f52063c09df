"""The device objects, and which devices exist: `Device` (interned: 'cpu:N', 'gpu:N'),
`LogicalDevice` (a labelled worker slot of one physical device), the GPUs CuPy can use, and the
simulated host devices.

    >>> from kit.core.devices import Device, LogicalDevice
    >>> Device("cpu:0") is Device("CPU")           # interned: arrays compare devices by identity
    True
    >>> LogicalDevice(Device("cpu:0"), 1, 2)
    LogicalDevice('cpu:0/logical1of2')
    >>> Device("cpu:7")
    Traceback (most recent call last):
    kit.core.devices.DeviceError: device 'cpu:7' does not exist: ...

`Device("cpu:3")` exists only while there are more than 3 simulated host devices (kit.core.devices),
and the error for a missing one says how to make it. Everything here is re-exported by
`kit.devices`, whose name the classes take as their `__module__` (reprs, pickles, tracebacks).
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import psutil

from kit import settings
from kit.core import backend
from kit.core.cpu_threads import cores_per_worker
from kit.core.device_rng import make_rng, seed_for
from kit.state import STATE

__all__ = [
    "AnyDevice",
    "Device",
    "DeviceError",
    "DeviceMismatchError",
    "LogicalDevice",
    "gpu_count",
    "host_device_count",
    "set_host_device_count",
]


class DeviceError(ValueError):
    """A device spec that does not name a device of this machine, or a cross-device mix-up."""


class DeviceMismatchError(DeviceError):
    """Arrays on different devices met in one op; the message names both devices."""


class OnDevice(Protocol):
    """What device code asks of an array (kit.ndarray.NDArray has it): its device, a copy onto another."""

    @property
    def device(self) -> AnyDevice: ...

    def to(self, device: str | AnyDevice) -> OnDevice: ...


def mismatch_error(op: str, a: OnDevice, b: OnDevice) -> None:
    raise DeviceMismatchError(
        f"{op}: arrays on different devices {a.device.name} and {b.device.name}; kit never copies "
        f"between devices silently: move one with .to({a.device.name!r}) first"
    )


class _DeviceBase:
    """What physical and logical devices share: a seeded generator, `send`, `activate`."""

    __slots__ = ()

    def rng(self) -> Any:
        """This device's random generator (NumPy or CuPy Generator), seeded by `kit.seed`."""
        if self._rng is None:
            with self._rng_lock:
                if self._rng is None:
                    self._rng = make_rng(self, seed_for(self))
        return self._rng

    def send(self, array: OnDevice) -> OnDevice:
        """A copy of a kit array on this device (the array itself when it is already here)."""
        return array.to(self)

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Make this device current for CuPy, on its own stream when it has one (no-op on the CPU)."""
        if self.kind != "gpu":
            yield
            return
        cupy = backend.cupy()
        with cupy.cuda.Device(self.index):
            stream = self._stream_for_activate()
            if stream is None:
                yield
            else:
                with stream:
                    yield

    def _stream_for_activate(self) -> Any:
        return None


class Device(_DeviceBase):
    """A physical device: 'cpu:N' or 'gpu:N'. Interned; use `Device(spec)` or `as_device`.
    cpu:1 and up exist only as simulated host devices (`set_host_device_count`)."""

    __slots__ = ("__weakref__", "_rng", "_rng_lock", "index", "kind", "name", "physical", "xp")
    logical = False

    def __new__(cls, spec: str | Device) -> Device:
        if isinstance(spec, Device):
            return spec
        key = _normalise(spec)
        kind, index = key.split(":")
        if kind == "gpu":
            count = gpu_count()
            if int(index) >= count:
                have = f"this machine has {count} usable GPU(s)" if count else backend.gpu_status()[1]
                raise DeviceError(f"device {spec!r} does not exist: {have}; kit.devices() lists what there is")
        elif int(index) >= STATE.host_devices:
            raise DeviceError(
                f"device {spec!r} does not exist: {_host_devices_now()}; {_more_host_devices(int(index))}"
            )
        found = STATE.devices.get(key)  # interned in kit.state, kept across resets
        if found is not None:
            return found
        with STATE.lock:
            found = STATE.devices.get(key)
            if found is None:
                found = object.__new__(cls)
                found.kind, found.index, found.name = kind, int(index), key
                found.physical = found  # a physical device is its own physical device
                if kind == "cpu":  # a plain attribute: read at every layer call, no property in between
                    found.xp = np
                found._rng = None
                found._rng_lock = threading.Lock()
                STATE.devices[key] = found
        return found

    def __getattr__(self, name: str) -> Any:
        """`xp`, the array module for this device, on a GPU: cupy, imported at its first use (a
        CPU device's is numpy, set when the device is made)."""
        if name != "xp":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.xp = xp = backend.cupy()
        return xp

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def simulated(self) -> bool:
        """True for a CPU device while the host is split into several simulated devices, and always
        for cpu:1 and up, which exist only as simulated devices (also after the count went down:
        their arrays stay where they were made, and never pass for a second physical CPU)."""
        return self.kind == "cpu" and (STATE.host_devices > 1 or self.index > 0)

    @property
    def blas_threads(self) -> int:
        """BLAS threads this device may use when every simulated host device works at once."""
        return cores_per_worker(STATE.host_devices) if self.simulated else (os.cpu_count() or 1)

    def memory_info(self) -> tuple[int, int]:
        """(free bytes, total bytes) of this device's memory (a simulated host device: the host's)."""
        if self.kind == "gpu":
            cupy = backend.cupy()
            with cupy.cuda.Device(self.index):
                free, total = cupy.cuda.runtime.memGetInfo()
            return int(free), int(total)
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    def describe(self) -> str:
        if self.kind == "gpu":
            props = backend.cupy().cuda.runtime.getDeviceProperties(self.index)
            gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            return f"{self.name}: {gpu_name}, {props['totalGlobalMem'] / 2**30:.1f} GiB (physical)"
        cpu = platform.processor() or platform.machine()
        cores = os.cpu_count() or 1
        if self.simulated and self.index >= STATE.host_devices:
            return (
                f"{self.name}: simulated on the host ({cpu}); no longer listed (now {_host_devices_now()}): "
                "its arrays stay on the host, in a separate placement domain"
            )
        if self.simulated:
            return (
                f"{self.name}: simulated on the host ({cpu}, {cores} core(s) shared by {STATE.host_devices} "
                f"simulated devices, {self.blas_threads} BLAS thread(s) each); a separate placement domain"
            )
        return f"{self.name}: {cpu}, {cores} core(s) (physical)"

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __str__(self) -> str:
        return f"{self.name} (simulated on the host)" if self.simulated else self.name

    def __reduce__(self) -> tuple:
        return (Device, (self.name,))


class LogicalDevice(_DeviceBase):
    """Slot `slot` of `count` on one physical device. Arrays on it are not interchangeable
    with arrays on its siblings: each worker keeps its own replica, as on real devices."""

    __slots__ = ("__weakref__", "_rng", "_rng_lock", "_stream", "count", "name", "physical", "slot")
    logical = True
    simulated = False

    def __init__(self, physical: Device, slot: int, count: int) -> None:
        self.physical = physical
        self.slot, self.count = slot, count
        self.name = f"{physical.name}/logical{slot}of{count}"
        self._stream = None
        self._rng = None
        self._rng_lock = threading.Lock()

    kind = property(lambda self: self.physical.kind)
    index = property(lambda self: self.physical.index)
    xp = property(lambda self: self.physical.xp)
    is_gpu = property(lambda self: self.physical.kind == "gpu")

    @property
    def blas_threads(self) -> int:
        """BLAS threads this slot may use on the CPU: the cores shared evenly, at least one."""
        return cores_per_worker(self.count)

    def memory_info(self) -> tuple[int, int]:
        return self.physical.memory_info()

    def describe(self) -> str:
        extra = "own CUDA stream" if self.is_gpu else f"{self.blas_threads} BLAS thread(s)"
        return (
            f"{self.name}: logical device {self.slot + 1} of {self.count} sharing physical "
            f"{self.physical.name} ({extra}); NOT a separate device"
        )

    def _stream_for_activate(self) -> Any:
        if self._stream is None:
            self._stream = backend.cupy().cuda.Stream(non_blocking=True)
        return self._stream

    def __repr__(self) -> str:
        return f"LogicalDevice({self.name!r})"

    def __str__(self) -> str:
        return self.name


AnyDevice = Device | LogicalDevice


def _normalise(spec: str) -> str:
    if not isinstance(spec, str):
        raise DeviceError(f"a device spec is a string like 'cpu:0' or 'gpu:1', not {spec!r}")
    text = spec.strip().lower().replace("cuda", "gpu")
    if text in ("cpu", "gpu"):
        text += ":0"
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "gpu") or not index.isdigit():
        raise DeviceError(f"bad device spec {spec!r}: write 'cpu:0' or 'gpu:N'")
    return f"{kind}:{int(index)}"


def gpu_count() -> int:
    """How many GPUs CuPy can use (probed once: a fact of the machine)."""
    n = STATE.probes.get("gpu_count")
    if n is None:
        ok, _ = backend.gpu_status()
        n = STATE.probes["gpu_count"] = int(backend.cupy().cuda.runtime.getDeviceCount()) if ok else 0
    return n


def _host_devices_now() -> str:
    last = STATE.host_devices - 1
    return "the CPU is one device, 'cpu:0'" if last == 0 else f"{last + 1} simulated host devices, cpu:0..cpu:{last}"


def _more_host_devices(index: int) -> str:
    """The remedy for a missing cpu:`index`: simulate enough host devices, within the bound."""
    most = settings.MAX_HOST_DEVICES
    if index >= most:
        return f"kit simulates at most {most} host devices, cpu:0..cpu:{most - 1}"
    n = index + 1
    return f"KIT_HOST_DEVICES={n} or kit.devices.set_host_device_count({n}) simulates {n} host devices"


def set_host_device_count(n: int) -> int:
    """Simulate `n` host devices cpu:0..cpu:n-1 (1: the CPU is one device). Returns the previous
    count. Call it before making arrays on the devices it removes: those stay usable but can no
    longer be looked up by name."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= settings.MAX_HOST_DEVICES:
        raise DeviceError(
            f"set_host_device_count({n!r}): kit simulates 1 to {settings.MAX_HOST_DEVICES} host devices; "
            "e.g. kit.devices.set_host_device_count(2)"
        )
    previous, STATE.host_devices = STATE.host_devices, n
    return previous


def host_device_count() -> int:
    return STATE.host_devices


for _cls in (DeviceError, Device, LogicalDevice):
    _cls.__module__ = "kit.core.devices"  # the public path, as reprs, pickles and tracebacks name it
del _cls
