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
    >>> from kit.devices import detach_thread
    >>> detach_thread()                        # back to the default device
    >>> kit.logical_devices(2)                 # two labelled worker slots on one physical device
    [LogicalDevice('...:0/logical0of2'), LogicalDevice('...:0/logical1of2')]

A `Device` is interned: `Device("cpu:0") is Device("cpu:0")`, so arrays compare devices by
identity. Logical devices split one physical device into n labelled workers; on a GPU each
has its own CUDA stream, on the CPU each gets `cores // n` BLAS threads (threadpoolctl).
They always print as logical, so nobody mistakes two slots of one device for two devices.

Simulated host devices (JAX's --xla_force_host_platform_device_count): `KIT_HOST_DEVICES=N`,
or `set_host_device_count(N)`, makes the CPU appear as cpu:0 .. cpu:N-1, each a separate
placement domain exactly like separate GPUs: arrays know their device, ops never mix them,
each has its own counters, cache, workspaces and generator, and copies between them go
through the one transfer path, `Device.send(array)` / `array.to(device)`, which counts
them (`transfer_stats()`). They always print as "simulated on the host".

Placement rules live here too: `default_devices(n)` (worker i -> device i % n) and
`cores_per_worker(n)` (the BLAS threads each of n concurrent workers gets on the CPU).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil
from threadpoolctl import threadpool_limits

from kit import backend, settings
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


class DeviceError(ValueError):
    """A device spec that does not name a device of this machine, or a cross-device mix-up."""


class _DeviceBase:
    """What physical and logical devices share: a seeded generator, `send`, `activate`."""

    __slots__ = ()

    def rng(self) -> Any:
        """This device's random generator (NumPy or CuPy Generator), seeded by `kit.seed`."""
        if self._rng is None:
            with self._rng_lock:
                if self._rng is None:
                    self._rng = _make_rng(self, _seed_for(self))
        return self._rng

    def send(self, array: Any) -> Any:
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

    __slots__ = ("__weakref__", "_rng", "_rng_lock", "_xp", "index", "kind", "name", "physical")
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
                found._xp = None
                found._rng = None
                found._rng_lock = threading.Lock()
                STATE.devices[key] = found
        return found

    @property
    def xp(self) -> Any:
        """The array module for this device: numpy or cupy."""
        if self._xp is None:
            self._xp = np if self.kind == "cpu" else backend.cupy()
        return self._xp

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def simulated(self) -> bool:
        """True for a CPU device while the host is split into several simulated devices."""
        return self.kind == "cpu" and STATE.host_devices > 1

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
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= settings.MAX_HOST_DEVICES:
        raise DeviceError(
            f"set_host_device_count({n!r}): kit simulates 1 to {settings.MAX_HOST_DEVICES} host devices; "
            "e.g. kit.devices.set_host_device_count(2)"
        )
    previous, STATE.host_devices = STATE.host_devices, n
    return previous


def host_device_count() -> int:
    return STATE.host_devices


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
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise DeviceError(f"default_devices({workers!r}): give a whole number of workers >= 1")
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


def cores_per_worker(workers: int) -> int:
    """BLAS threads for each of `workers` concurrent CPU workers: the cores shared evenly, >= 1."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


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
    with threadpool_limits(limits=max(1, int(n)), user_api="blas"):
        yield


# ---------------------------------------------------------------------------------------
# the one transfer path between devices


def transfer(dst: Any, dst_device: AnyDevice, src: Any, src_device: AnyDevice, host_arrays: bool = False) -> None:
    """Copy the raw array `src` (on src_device) into `dst` (on dst_device), same shape. Every
    copy between two devices in kit comes through here and is counted per device pair.
    `host_arrays`: both are NumPy arrays standing for data of those devices (the small host
    messages of gradient sharing, whatever the backend): counted, copied on the host."""
    if src_device is not dst_device:
        with STATE.lock:
            entry = STATE.transfers.setdefault((src_device.name, dst_device.name), [0, 0])
            entry[0] += 1
            entry[1] += int(src.nbytes)
    if host_arrays:
        np.copyto(dst, src)
        return
    src_gpu, dst_gpu = src_device.kind == "gpu", dst_device.kind == "gpu"
    if not src_gpu and not dst_gpu:
        np.copyto(dst, src)
    elif not dst_gpu:  # device -> host, on the source's stream (it waits for the source's writes)
        with _on_own_stream(src_device):
            if dst.flags.c_contiguous and src.flags.c_contiguous:
                src.get(out=dst)
            else:
                np.copyto(dst, src.get())
    elif not src_gpu:  # host -> device, on the destination's stream (its later readers follow it)
        with _on_own_stream(dst_device):
            if dst.flags.c_contiguous:
                dst.set(np.ascontiguousarray(src))
            else:
                dst[...] = dst_device.xp.asarray(src)
    else:  # GPU -> GPU: logical siblings (one memory space) or a peer copy between two GPUs
        _gpu_copy(dst, dst_device, src, src_device)


def _stream_of(d: AnyDevice) -> Any:
    """The CUDA stream kit's work for `d` runs on: a logical slot's own stream, else the default
    (null) stream of the physical GPU, whichever thread asks."""
    own = d._stream_for_activate()
    return own if own is not None else backend.cupy().cuda.Stream.null


@contextlib.contextmanager
def _on_own_stream(d: AnyDevice) -> Iterator[Any]:
    cupy = backend.cupy()
    stream = _stream_of(d)
    with cupy.cuda.Device(d.index), stream:
        yield stream


def _gpu_copy(dst: Any, dst_device: AnyDevice, src: Any, src_device: AnyDevice) -> None:
    """A copy between two GPU streams, ordered both ways with events: the destination's stream
    waits until the source's stream has written `src`, and the source's stream waits until the
    copy has read it (so the source may overwrite or free `src` at once). Each logical device has
    its own non-blocking stream, which does not wait for the default stream, nor it for them:
    without the events a copy can read memory still being written (seen on an H100: a worker's
    label rows read as zeros, then a NaN loss)."""
    cupy = backend.cupy()
    with _on_own_stream(src_device) as src_stream:
        if dst_device.physical is not src_device.physical:
            src = cupy.ascontiguousarray(src)  # on the source's stream, before `written` is recorded
        written = src_stream.record()
    with _on_own_stream(dst_device) as dst_stream:
        if dst_stream != src_stream:
            dst_stream.wait_event(written)
        if dst_device.physical is src_device.physical:
            cupy.copyto(dst, src)
        elif dst.flags.c_contiguous:
            dst.data.copy_from_device_async(src.data, src.nbytes, dst_stream)
        else:
            dst[...] = cupy.asarray(src)
        read = dst_stream.record()
    if dst_stream != src_stream:
        src_stream.wait_event(read)


def to_host(raw: Any, device: AnyDevice) -> np.ndarray:
    """A NumPy copy of the raw array `raw` on `device`, through the counted transfer path (on a
    GPU: read on the device's own stream, so the copy waits for the writes queued there)."""
    if device.kind != "gpu":
        return raw
    out = np.empty(raw.shape, raw.dtype)
    transfer(out, host_source(device), raw, device)
    return out


def scalar(raw: Any, device: AnyDevice) -> Any:
    """The one element of `raw` as a Python scalar, read on the device's own stream."""
    if device.kind != "gpu":
        return raw.item()
    with _on_own_stream(device):
        return raw.item()


def host_source(device: AnyDevice) -> AnyDevice:
    """The device host (NumPy) memory counts as coming from when copied onto `device`: the
    device itself on a CPU (a host-to-host copy is no transfer), cpu:0 for a GPU."""
    return device if device.kind == "cpu" else Device("cpu:0")


def transfer_stats() -> dict[tuple[str, str], tuple[int, int]]:
    """Copies between devices since the last reset: (source, target) -> (count, bytes)."""
    with STATE.lock:
        return {pair: (n, b) for pair, (n, b) in STATE.transfers.items()}


def reset_transfer_stats() -> None:
    with STATE.lock:
        STATE.transfers.clear()


# ---------------------------------------------------------------------------------------
# random generators: one per device


def _seed_for(dev: AnyDevice) -> int:
    slot = getattr(dev, "slot", -1) + 1
    return (STATE.base_seed * 1_000_003 + dev.index * 1009 + (0 if dev.kind == "cpu" else 7) + slot * 31) & 0x7FFFFFFF


def _make_rng(dev: AnyDevice, s: int) -> Any:
    STATE.seeded.append(dev)  # devices are few and long-lived: no weakrefs needed
    if dev.kind == "gpu":
        cupy = backend.cupy()
        with cupy.cuda.Device(dev.index):
            return cupy.random.default_rng(s)
    return np.random.default_rng(s)


def seed(value: int) -> None:
    """Re-seed every device's generator (reproducible rand/randn)."""
    STATE.base_seed = int(value)
    _forget_generators()


@STATE.on_reset
def _this_thread_detached() -> None:
    """kit.state.reset() forgets every attachment; this thread's CuPy device and stream follow."""
    _use_for_this_thread(None)


@STATE.on_reset
def _forget_generators() -> None:
    """Every device makes its generator again from the seed at its next random draw."""
    for dev in STATE.seeded:
        dev._rng = None
    STATE.seeded.clear()


# ---------------------------------------------------------------------------------------
# BLAS threads shared out among concurrent CPU workers, process-wide, for as long as they run

_blas_lock = threading.RLock()  # re-entrant: a share collected by the GC may be released inside a hold


def _blas_hold(limit: int) -> int:
    with _blas_lock:
        token = next(STATE.blas_tokens)
        before = min(STATE.blas_holders.values(), default=None)
        STATE.blas_holders[token] = limit
        if STATE.blas_original is None:
            STATE.blas_original = threadpool_limits(limits=limit, user_api="blas")
        elif before is None or limit < before:
            threadpool_limits(limits=limit, user_api="blas")
        return token


def _blas_let_go(token: int) -> None:
    with _blas_lock:
        if STATE.blas_holders.pop(token, None) is None:
            return
        if STATE.blas_holders:
            threadpool_limits(limits=min(STATE.blas_holders.values()), user_api="blas")
        else:
            _restore_blas_limits()


@STATE.on_reset
def _restore_blas_limits() -> None:
    """No share holds BLAS threads any more: the limits from before the first one come back."""
    with _blas_lock:
        STATE.blas_holders.clear()
        if STATE.blas_original is not None:
            STATE.blas_original.restore_original_limits()
        STATE.blas_original = None


class BlasThreadShare:
    """`cores_per_worker(workers)` BLAS threads for everything in the process, held while
    `workers` CPU workers run at once (each BLAS call with every core would fight the others for
    them): from construction until `release()`, or for a `with` block. Shares live side by side:
    the smallest limit among the live ones applies, and the last one released restores the limits
    from before the first (shares do not restore each other's). ParallelInference holds one while
    it serves from several CPU workers. `blas_threads(n)` is the plain form for one block of code.

        >>> from kit.devices import BlasThreadShare
        >>> with BlasThreadShare(workers=2) as share:  # two workers: half the cores each
        ...     pass                                    # run them here
        >>> share.threads == cores_per_worker(2)
        True
    """

    def __init__(self, workers: int) -> None:
        self.threads = cores_per_worker(workers)
        self._token: int | None = _blas_hold(self.threads)

    def release(self) -> None:
        """Give the share back; once released, releasing again does nothing."""
        token, self._token = self._token, None
        if token is not None:
            _blas_let_go(token)

    def __enter__(self) -> BlasThreadShare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ += ["BlasThreadShare"]


class _DevicesModule(types.ModuleType):
    """`kit.devices` is this module, and calling it lists the devices: `kit.devices()` and
    `kit.devices.set_host_device_count(2)` both work as written."""

    def __call__(self) -> list[Device]:
        return devices()


sys.modules[__name__].__class__ = _DevicesModule
