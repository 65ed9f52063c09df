"""Memory: the one allocation function, its counters, a caching allocator and periodic GC.

Every array kit creates comes from `allocate(shape, dtype, device)`: inside an open workspace it
carves the arena; otherwise it allocates on the heap (through the caching allocator when on) and
counts it. (An op whose result goes to the plain host heap lets NumPy allocate inside the ufunc, and
counts the result the same way.) Long-lived BLAS buffers (flat parameters, gradients, updater state)
come from `allocate_aligned`, starting on a cache line (`ALIGNMENT`) as an arena does.

    >>> import kit
    >>> before = kit.memory.heap_allocations()
    >>> y = kit.ones((100,)) + 1
    >>> kit.memory.heap_allocations() - before      # ones() and the sum
    2
    >>> kit.memory.set_max_host_cache(64 << 20)     # keep freed host blocks for reuse
    >>> stats = kit.readings.stats()                # counters, cache, workspaces, RSS, GPU
    >>> sorted(stats)
    ['cache', 'gc', 'gpus', 'heap_allocations', 'heap_by_device', 'heap_bytes', 'rss_bytes', 'workspaces']
    >>> stats["cache"]["max_host_cache"]
    67108864
    >>> kit.memory.set_max_host_cache(0)            # off again (the default)

ND4J's periodic GC window is kit.core.gc_window, re-exported here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import re
import threading
import weakref
from collections import defaultdict
from typing import Any

import numpy as np

from kit.core import backend
from kit.core.backend import RawArray, Xp
from kit.core.context import resolve
from kit.core.devices import AnyDevice, Device, gpu_count
from kit.core.gc_window import gc_stats, maybe_gc, reset_gc_stats, set_auto_gc_window, toggle_periodic_gc
from kit.core.shapes import as_shape
from kit.state import STATE

__all__ = [
    "ALIGNMENT",
    "CachingAllocator",
    "Lease",
    "aligned_bytes",
    "allocate",
    "allocate_aligned",
    "allocate_heap",
    "cache_stats",
    "count",
    "counters",
    "data_address",
    "gc_stats",
    "heap_allocations",
    "heap_bytes",
    "maybe_gc",
    "purge_cache",
    "reset_counters",
    "reset_gc_stats",
    "set_auto_gc_window",
    "set_max_cacheable_length",
    "set_max_device_cache",
    "set_max_host_cache",
    "set_recorder",
    "toggle_periodic_gc",
]


_thread = STATE.thread  # this thread's slots: .ws (the current workspace), .counts

ALIGNMENT = 64  # bytes: a cache line, and enough for AVX-512 loads (ND4J aligns to 16); where a
# workspace's arena, every carve from it, and a long-lived heap buffer (allocate_aligned) start
_BYTE = np.dtype(np.uint8)


def set_recorder(recorder: Any) -> None:
    """Install kit.timeline's recorder, or remove it (None). `STATE.recorder` is the one check that
    allocate_heap, kit.workspace and LayerWorkspaceMgr.create make, so that recording costs a load
    and a comparison when it is off. kit.ndarray's fast paths, where NumPy allocates a heap result
    itself, read no new flag: while a timeline records, the cache's `on` is set too, which sends
    them through allocate_heap, where they are counted and recorded."""
    STATE.recorder = recorder
    STATE.cache.update_on()


class _ThreadEnd:
    """Held by one thread's slots only: freed when the thread ends, and its finalizer then moves
    the thread's counts into STATE.retired_counts (a process that starts many threads keeps one
    total for the ended ones, not a list that grows by one per thread)."""

    __slots__ = ("__weakref__",)


def _retire(counts: dict) -> None:
    with STATE.lock:
        retired = STATE.retired_counts
        for dev, (n, b) in counts.items():
            total = retired.setdefault(dev, [0, 0])
            total[0] += n
            total[1] += b
        STATE.thread_counters[:] = [c for c in STATE.thread_counters if c is not counts]


def _thread_counters() -> dict:
    counts = _thread.counts
    if counts is None:
        counts = defaultdict(lambda: [0, 0])  # physical Device -> [allocations, bytes]
        _thread.counts = counts
        _thread.end = _ThreadEnd()
        weakref.finalize(_thread.end, _retire, counts)
        with STATE.lock:
            STATE.thread_counters.append(counts)
    return counts


def count(device: AnyDevice, nbytes: int, allocations: int = 1) -> None:
    """Count one heap allocation of `nbytes` on `device` (or `allocations` of `nbytes` in all): the
    one place kit counts memory. The heap path, the cache, a workspace's arena growth or spill,
    NumPy results made inside a ufunc (kit.ndarray) and a planned training step all come here."""
    c = (_thread.counts or _thread_counters())[device.physical]
    c[0] += allocations
    c[1] += nbytes


def allocate(shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice) -> tuple[Any, Any]:
    """The one door for memory: an uninitialised array, as `(raw, owner)`. The owner is the
    workspace whose arena the memory was carved from (Workspace.alloc), the cache's lease on a
    block (CachingAllocator.alloc), or None for a plain heap allocation (allocate_heap)."""
    ws = _thread.ws
    if ws is not None:
        if ws.physical is device.physical:
            return ws.alloc(shape, dtype)
        if ws.physical is None:  # a scope_out_of_workspaces block: the heap, or a suspended generator's
            ws = resolve(ws)
            if ws is not None and ws.physical is device.physical:
                return ws.alloc(shape, dtype)
    return allocate_heap(shape, dtype, device)


def allocate_heap(shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice) -> tuple[Any, Any]:
    """`allocate` on the heap whatever workspace is open (kit.scope_out_of_workspaces in one call):
    through the cache when it is on for this size, else a fresh array."""
    nbytes = math.prod(shape) * dtype.itemsize
    count(device, nbytes)
    cache = STATE.cache
    if cache.on and cache.enabled_for(device, nbytes):
        result = cache.alloc(shape, dtype, device, nbytes)
    elif device.kind == "cpu":
        result = np.empty(shape, dtype), None
    elif gpu_count() == 1:  # the only GPU is always CuPy's current one: no device switch per result
        result = device.xp.empty(shape, dtype), None
    else:
        with device.physical.activate():
            result = device.xp.empty(shape, dtype), None
    if STATE.recorder is not None:
        STATE.recorder.heap(result, device, nbytes)
    return result


def allocate_aligned(shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice) -> tuple[Any, Any]:
    """`allocate_heap` for a long-lived buffer that BLAS reads and writes (a network's parameters,
    gradients, master weights, updater state): on the host it starts on an ALIGNMENT boundary, as a
    workspace's arena does. NumPy aligns only to 16 bytes: a matrix product written into a buffer
    16 bytes past a cache line ran 4 % slower here (ResNet's and the MLP's largest layers alike), and
    whether a buffer landed on a line changed from run to run. Only the start is aligned: what is
    carved from the buffer further on (a later layer's weights) is wherever it falls. Counted as
    allocated: the buffer and the room to move its start. With the cache on for this size, or on a
    GPU (CuPy's pool aligns to 256 bytes), it is `allocate_heap`."""
    shape = as_shape(shape, "allocate_aligned")  # (-4,) or (2.5,) refused, not an empty or truncated buffer
    nbytes = math.prod(shape) * dtype.itemsize
    cache = STATE.cache
    if device.kind != "cpu" or (cache.on and cache.enabled_for(device, nbytes)):
        return allocate_heap(shape, dtype, device)
    count(device, nbytes + ALIGNMENT)
    raw, block = aligned_bytes(np, nbytes)
    out = block.view(dtype).reshape(shape)
    if STATE.recorder is not None:  # the block that owns the memory: its release is the buffer's
        STATE.recorder.heap((raw, None), device, nbytes + ALIGNMENT)
    return out, None


def aligned_bytes(xp: Xp, nbytes: int) -> tuple[RawArray, RawArray]:
    """(raw, block): `nbytes` bytes starting on an ALIGNMENT boundary, a view into `raw` (NumPy's or
    CuPy's `xp`), which owns them and holds ALIGNMENT bytes more, so the start can move to a line.
    What a workspace's arena and `allocate_aligned` are made of; the caller counts it."""
    raw = xp.empty(nbytes + ALIGNMENT, dtype=_BYTE)
    start = -data_address(raw) % ALIGNMENT
    return raw, raw[start : start + nbytes]


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none (macOS, musl, Windows)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def give_back_freed(device: AnyDevice) -> None:
    """Return memory freed earlier to the device before a large allocation that replaces it (a
    workspace's arena after its learning cycle's spills): CuPy's cached blocks go back to the GPU
    (free_all_blocks), the C heap's free pages back to the operating system (glibc's malloc_trim),
    so the process does not hold the spills and the arena at once."""
    if device.kind == "gpu":
        backend.cupy().get_default_memory_pool().free_all_blocks()
        return
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def data_address(data: RawArray) -> int:
    """The address of a NumPy or CuPy array's first byte."""
    if isinstance(data, np.ndarray):
        return int(data.__array_interface__["data"][0])
    return int(data.data.ptr)


def counters() -> dict[str, tuple[int, int]]:
    """Heap allocations made through kit, per physical device: name -> (count, bytes)."""
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with STATE.lock:
        snapshot = [dict(c) for c in STATE.thread_counters] + [STATE.retired_counts.copy()]
    for counts in snapshot:
        for dev, (n, b) in counts.items():
            total[dev.name][0] += n
            total[dev.name][1] += b
    return {k: (v[0], v[1]) for k, v in total.items()}


def heap_allocations(device: str | AnyDevice | None = None, *, this_thread: bool = False) -> int:
    """How many heap allocations kit has made (all devices unless one is given: a Device or its name)."""
    return sum(n for n, _ in _counted(device, this_thread, "heap_allocations"))


def heap_bytes(device: str | AnyDevice | None = None, *, this_thread: bool = False) -> int:
    return sum(b for _, b in _counted(device, this_thread, "heap_bytes"))


DEVICE_NAME = re.compile(r"(cpu|gpu):\d+(/logical\d+of\d+)?")  # Device.name and LogicalDevice.name


def _counted(device: str | AnyDevice | None, this_thread: bool, where: str) -> list[tuple[int, int]]:
    """(allocations, bytes) of each device counted, of `device` only when given: a name that is no
    device's ("cpu", "CPU:0", 0) is refused, never read as a device that allocated nothing."""
    source = {k.name: tuple(v) for k, v in _thread_counters().items()} if this_thread else counters()
    if device is None:
        return list(source.values())
    name = getattr(device, "name", device)
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise ValueError(f"{where}(device={device!r}): a device or its name, e.g. 'cpu:0' or 'gpu:0'")
    return [v for k, v in source.items() if k == name]


def reset_counters() -> None:
    with STATE.lock:
        for counts in STATE.thread_counters:
            counts.clear()
        STATE.retired_counts.clear()


# ---------------------------------------------------------------------------------------
# caching allocator (ND4J's CUDA cache, for the heap path)

_BUCKET = 256  # bytes: requests are rounded up to this, so near sizes share blocks


class Lease:
    """The cache's lease on one block: the owner of every array made from it. The block goes
    back to the cache exactly when the last array that points into its memory is collected --
    NDArrays, their views, and raw NumPy/CuPy views alike -- because every one of them holds
    `lent`, the one array made over the block for this lease (a NumPy view's base is the array
    it was cut from, never the block itself; CuPy's is too), and a weak reference watches `lent`.
    (CuPy's pool does the same with its MemoryPointer.)"""

    __slots__ = ("device", "size")
    _gen = 0  # arrays from the cache are never stale: same check as workspaces, always passes
    _tid = None  # and any thread may use them

    def __init__(self, block: RawArray, device: Device, size: int, lent: RawArray, cache: CachingAllocator) -> None:
        self.device, self.size = device, size
        watch = weakref.ref(lent, functools.partial(cache.returned, block, device, size))
        cache.out[id(watch)] = watch


def _lend(block: RawArray, device: Device) -> RawArray:
    """An array over all of `block` that is not a view of it: every view cut from it has it as
    its base, so it lives exactly as long as anything that points into the block."""
    if device.kind == "cpu":
        return np.frombuffer(memoryview(block), dtype=np.uint8)
    return device.xp.ndarray(block.shape, block.dtype, memptr=block.data)  # CuPy: shares the pointer


class CachingAllocator:
    """Size-bucketed free lists of raw blocks, per device, with byte limits."""

    def __init__(self) -> None:
        self._free: dict[tuple[str, int], list] = defaultdict(list)
        self._cached_bytes: dict[str, int] = defaultdict(int)
        # re-entrant: a block lent earlier can come back (a weak-reference callback, from the garbage
        # collector) on a thread that holds the lock already, inside alloc, stats or purge
        self._lock = threading.RLock()
        self.out: dict[int, weakref.ref] = {}  # one watch per block lent now; it leaves when the block is free
        self.defaults()

    def defaults(self) -> None:
        """The limits of a fresh process, nothing cached, counters at zero."""
        self.max_host_cache = 0  # 0: off (NumPy + malloc already recycle; chapter 2 measures it)
        self.max_device_cache = 512 << 20  # ND4J's default device cache
        self.max_device_cache_kit = 0  # on GPUs CuPy's pool already caches; kit's on top is opt-in
        self.max_cacheable_length = 96 << 20  # ND4J's host cacheable length
        self.hits = 0
        self.misses = 0
        self.purge()
        self.update_on()

    def update_on(self) -> None:
        # any cache enabled, or a memory timeline recording: the one flag the allocation fast paths
        # read; set, every heap result goes through allocate_heap
        self.on = self.max_host_cache > 0 or self.max_device_cache_kit > 0 or STATE.recorder is not None

    def enabled_for(self, device: AnyDevice, nbytes: int) -> bool:
        limit = self.max_host_cache if device.kind == "cpu" else self.max_device_cache_kit
        return limit > 0 and nbytes <= self.max_cacheable_length

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice, nbytes: int) -> tuple[Any, Lease]:
        """A cached block if one of this size is free, else a new one: `(raw, lease)`."""
        size = max(_BUCKET, -(-nbytes // _BUCKET) * _BUCKET)
        phys = device.physical
        with self._lock:
            bucket = self._free.get((phys.name, size))
            block = bucket.pop() if bucket else None
            if block is not None:
                self._cached_bytes[phys.name] -= size
                self.hits += 1
            else:
                self.misses += 1
        if block is None:
            with phys.activate():
                block = phys.xp.empty(size, dtype=np.uint8)
        lent = _lend(block, phys)
        return lent[:nbytes].view(dtype).reshape(shape), Lease(block, phys, size, lent, self)

    def returned(self, block: RawArray, device: Device, size: int, watch: weakref.ref) -> None:
        """The last array over a lent block is gone: the block is free again."""
        self.out.pop(id(watch), None)
        self.give(block, device, size)

    def give(self, block: RawArray, device: Device, size: int) -> None:
        limit = self.max_host_cache if device.kind == "cpu" else self.max_device_cache_kit
        with self._lock:
            if self._cached_bytes[device.name] + size <= limit:
                self._free[(device.name, size)].append(block)
                self._cached_bytes[device.name] += size

    def purge(self) -> None:
        with self._lock:
            self._free.clear()
            self._cached_bytes.clear()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "cached_bytes": dict(self._cached_bytes),
                "max_host_cache": self.max_host_cache,
                "max_device_cache": self.max_device_cache,
                "max_cacheable_length": self.max_cacheable_length,
            }


STATE.cache = CachingAllocator()
STATE.on_reset(STATE.cache.defaults)


def _check_bytes(name: str, value: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}({value!r}): give a whole number of bytes >= 0")
    return int(value)


def set_max_host_cache(nbytes: int) -> None:
    """Keep up to nbytes of freed host blocks for reuse (0 switches the host cache off)."""
    STATE.cache.max_host_cache = _check_bytes("set_max_host_cache", nbytes)
    STATE.cache.update_on()
    if nbytes == 0:
        STATE.cache.purge()


def set_max_device_cache(nbytes: int) -> None:
    """GPU: keep up to nbytes of freed device blocks in kit's cache (ND4J's maximum device cache,
    default 512 MB); 0 switches kit's device cache off. It bounds what is *kept*, not what may be
    allocated: CuPy's pool is not capped (a cap there made a ResNet-18 step run out of memory on
    an 80 GB H100 once a benchmark had set 512 MB)."""
    STATE.cache.max_device_cache = _check_bytes("set_max_device_cache", nbytes)
    STATE.cache.max_device_cache_kit = nbytes
    STATE.cache.update_on()


def set_max_cacheable_length(nbytes: int) -> None:
    """Blocks larger than this are never cached (ND4J: 96 MB host)."""
    STATE.cache.max_cacheable_length = _check_bytes("set_max_cacheable_length", nbytes)


def cache_stats() -> dict[str, Any]:
    return STATE.cache.stats()


def purge_cache() -> None:
    STATE.cache.purge()
