"""Devices: where arrays live and which thread works on which device.

    >>> import kit
    >>> kit.devices()                      # [Device('cpu:0')] or [..., Device('gpu:0'), ...]
    >>> with kit.device("cpu:0"): x = kit.zeros((2, 3))
    >>> kit.attach_thread_to_device("gpu:1")   # ND4J AffinityManager: this thread -> gpu:1
    >>> workers = kit.logical_devices(2)       # two labelled worker slots on one physical device

A `Device` is interned: `Device("cpu:0") is Device("cpu:0")`, so arrays compare devices by
identity. Logical devices split one physical device into n labelled workers; on a GPU each
has its own CUDA stream, on the CPU each gets `cores // n` BLAS threads (threadpoolctl).
They always print as logical, so nobody mistakes two slots of one device for two devices.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from kit import backend

__all__ = [
    "Device",
    "DeviceError",
    "LogicalDevice",
    "attach_thread_to_device",
    "current_device",
    "default_device",
    "device",
    "device_for_current_thread",
    "device_for_thread",
    "devices",
    "logical_devices",
    "seed",
]


class DeviceError(ValueError):
    """A device spec that does not name a device of this machine, or a cross-device mix-up."""


class Device:
    """A physical device: 'cpu:0' or 'gpu:N'. Interned; use `Device(spec)` or `as_device`."""

    _registry: ClassVar[dict[str, Device]] = {}
    _registry_lock = threading.Lock()
    __slots__ = ("__weakref__", "_rng", "_rng_lock", "_xp", "index", "kind", "name", "physical")
    logical = False

    def __new__(cls, spec: str | Device) -> Device:
        if isinstance(spec, Device):
            return spec
        key = _normalise(spec)
        found = cls._registry.get(key)
        if found is not None:
            return found
        kind, index = key.split(":")
        if kind == "gpu":
            count = gpu_count()
            if int(index) >= count:
                have = f"this machine has {count} usable GPU(s)" if count else backend.gpu_status()[1]
                raise DeviceError(f"device {spec!r} does not exist: {have}; kit.devices() lists what there is")
        elif int(index) != 0:
            raise DeviceError(f"device {spec!r} does not exist: the CPU is one device, 'cpu:0'")
        with cls._registry_lock:
            found = cls._registry.get(key)
            if found is None:
                found = object.__new__(cls)
                found.kind, found.index, found.name = kind, int(index), key
                found.physical = found  # a physical device is its own physical device
                found._xp = None
                found._rng = None
                found._rng_lock = threading.Lock()
                cls._registry[key] = found
        return found

    @property
    def xp(self) -> Any:
        """The array module for this device: numpy or cupy."""
        if self._xp is None:
            if self.kind == "cpu":
                self._xp = np
            else:
                import cupy

                self._xp = cupy
        return self._xp

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def rng(self) -> Any:
        """This device's random generator (NumPy or CuPy Generator), seeded by `kit.seed`."""
        if self._rng is None:
            with self._rng_lock:
                if self._rng is None:
                    self._rng = _make_rng(self, _seed_for(self))
        return self._rng

    def memory_info(self) -> tuple[int, int]:
        """(free bytes, total bytes) of this device's memory."""
        if self.kind == "gpu":
            import cupy

            with cupy.cuda.Device(self.index):
                free, total = cupy.cuda.runtime.memGetInfo()
            return int(free), int(total)
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    def describe(self) -> str:
        if self.kind == "gpu":
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(self.index)
            gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            return f"{self.name}: {gpu_name}, {props['totalGlobalMem'] / 2**30:.1f} GiB (physical)"
        import platform

        cores = os.cpu_count() or 1
        return f"{self.name}: {platform.processor() or platform.machine()}, {cores} core(s) (physical)"

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Make this device current for CuPy (no-op on the CPU)."""
        if self.kind == "gpu":
            import cupy

            with cupy.cuda.Device(self.index):
                yield
        else:
            yield

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple:
        return (Device, (self.name,))


class LogicalDevice:
    """Slot `slot` of `count` on one physical device. Arrays on it are not interchangeable
    with arrays on its siblings: each worker keeps its own replica, as on real devices."""

    __slots__ = ("__weakref__", "_rng", "_rng_lock", "_stream", "count", "name", "physical", "slot")
    logical = True

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
        return max(1, (os.cpu_count() or 1) // self.count)

    def rng(self) -> Any:
        if self._rng is None:
            with self._rng_lock:
                if self._rng is None:
                    self._rng = _make_rng(self, _seed_for(self))
        return self._rng

    def memory_info(self) -> tuple[int, int]:
        return self.physical.memory_info()

    def describe(self) -> str:
        extra = "own CUDA stream" if self.is_gpu else f"{self.blas_threads} BLAS thread(s)"
        return (
            f"{self.name}: logical device {self.slot + 1} of {self.count} sharing physical "
            f"{self.physical.name} ({extra}); NOT a separate device"
        )

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        if self.is_gpu:
            import cupy

            with cupy.cuda.Device(self.index):
                if self._stream is None:
                    self._stream = cupy.cuda.Stream(non_blocking=True)
                with self._stream:
                    yield
        else:
            yield

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


_gpu_count: int | None = None


def gpu_count() -> int:
    global _gpu_count
    if _gpu_count is None:
        ok, _ = backend.gpu_status()
        if not ok:
            _gpu_count = 0
        else:
            import cupy

            _gpu_count = int(cupy.cuda.runtime.getDeviceCount())
    return _gpu_count


def devices() -> list[Device]:
    """The physical devices of this machine: cpu:0, then gpu:0..N-1 when CuPy can use them."""
    return [Device("cpu:0")] + [Device(f"gpu:{i}") for i in range(gpu_count())]


def as_device(spec: str | AnyDevice | None) -> AnyDevice:
    if spec is None:
        return current_device()
    if isinstance(spec, (Device, LogicalDevice)):
        return spec
    return Device(spec)


def default_device() -> Device:
    """gpu:0 when the backend is CuPy, else cpu:0."""
    return Device("gpu:0") if backend.name() == "cupy" else Device("cpu:0")


# ---------------------------------------------------------------------------------------
# thread <-> device affinity (ND4J's AffinityManager)

_local = threading.local()
_affinity: dict[int, AnyDevice] = {}
_affinity_lock = threading.Lock()


def attach_thread_to_device(dev: str | AnyDevice, thread: threading.Thread | None = None) -> AnyDevice:
    """Pin a thread (default: the calling one) to a device: its arrays are made there."""
    d = as_device(dev)
    ident = (thread or threading.current_thread()).ident
    if ident is None:
        raise DeviceError("attach_thread_to_device: that thread has not started yet")
    with _affinity_lock:
        _affinity[ident] = d
    return d


def detach_thread(thread: threading.Thread | None = None) -> None:
    ident = (thread or threading.current_thread()).ident
    with _affinity_lock:
        _affinity.pop(ident, None)


def device_for_thread(thread: threading.Thread) -> AnyDevice:
    d = _affinity.get(thread.ident)  # type: ignore[arg-type]
    return d if d is not None else default_device()


def device_for_current_thread() -> AnyDevice:
    """The device this thread was attached to, or the default device."""
    d = _affinity.get(threading.get_ident())
    return d if d is not None else default_device()


def current_device() -> AnyDevice:
    """The innermost `with kit.device(...)`, else the thread's attached device, else the default."""
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return device_for_current_thread()


@contextlib.contextmanager
def device(dev: str | AnyDevice) -> Iterator[AnyDevice]:
    """`with kit.device("gpu:1"):` creates arrays on gpu:1 (and makes it current for CuPy)."""
    d = as_device(dev)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(d)
    try:
        with d.activate():
            yield d
    finally:
        stack.pop()


def logical_devices(n: int, physical: str | Device | None = None) -> list[LogicalDevice]:
    """Split one physical device into n labelled logical devices (worker slots)."""
    if not isinstance(n, int) or n < 1:
        raise DeviceError(f"logical_devices(n): n must be a positive integer, got {n!r}")
    phys = as_device(physical) if physical is not None else default_device()
    if isinstance(phys, LogicalDevice):
        raise DeviceError(f"{phys.name} is already logical; split a physical device")
    return [LogicalDevice(phys, i, n) for i in range(n)]


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Limit BLAS threads process-wide for the duration (threadpoolctl)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=max(1, int(n)), user_api="blas"):
        yield


# ---------------------------------------------------------------------------------------
# random generators: one per device

_base_seed: int = int(os.environ.get("KIT_SEED", "0") or 0)
_seed_epoch = 0
_known: list = []  # weakrefs not needed: devices are few and long-lived


def _seed_for(dev: AnyDevice) -> int:
    slot = getattr(dev, "slot", -1) + 1
    return (_base_seed * 1_000_003 + dev.index * 1009 + (0 if dev.kind == "cpu" else 7) + slot * 31) & 0x7FFFFFFF


def _make_rng(dev: AnyDevice, s: int) -> Any:
    _known.append(dev)
    if dev.kind == "gpu":
        import cupy

        with cupy.cuda.Device(dev.index):
            return cupy.random.default_rng(s)
    return np.random.default_rng(s)


def seed(value: int) -> None:
    """Re-seed every device's generator (reproducible rand/randn)."""
    global _base_seed
    _base_seed = int(value)
    for dev in _known:
        dev._rng = None
    _known.clear()
