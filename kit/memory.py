"""Memory: the one allocation function, its counters, a caching allocator and periodic GC.

Every array kit creates comes from `allocate(shape, dtype, device)`. Inside an open
workspace (kit.workspace) it carves the arena; otherwise it allocates on the heap, through
the caching allocator when that is switched on, and counts what it did. (One shortcut: an op
whose result goes to the plain host heap -- no workspace, no cache, no memory timeline recording,
a CPU device -- lets NumPy allocate inside the ufunc, as the raw op would, and counts the result
the same way.)

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

ND4J's MemoryManager GC window: `toggle_periodic_gc(True)` and `set_auto_gc_window(ms)`
make kit's loops call `gc.collect()` at most once per window (`maybe_gc()`), and count the
time it took.
"""

from __future__ import annotations

import gc
import math
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import numpy as np

from kit.context import _tls as _context
from kit.context import resolve
from kit.devices import AnyDevice, Device, gpu_count

__all__ = [
    "allocate",
    "allocate_heap",
    "cache_stats",
    "count_external",
    "counters",
    "gc_stats",
    "heap_allocations",
    "heap_bytes",
    "maybe_gc",
    "purge_cache",
    "reset_counters",
    "set_auto_gc_window",
    "set_max_cacheable_length",
    "set_max_device_cache",
    "set_max_host_cache",
    "toggle_periodic_gc",
]


# This thread's counters (the current workspace lives in kit.context).
class _Counters(threading.local):
    counts: Any = None  # this thread's counters, made on its first allocation


_tls = _Counters()
_all_counters: list[dict] = []
_all_counters_lock = threading.Lock()

# The memory timeline recording now (kit.timeline), or None: the one check that allocate_heap,
# kit.workspace and LayerWorkspaceMgr.create make, so that recording costs a global load and a
# comparison when it is off. kit.ndarray's fast paths, where NumPy allocates a heap result itself,
# read no new flag: while a timeline records, `_cache.on` is set too (_set_recorder), which sends
# them through allocate_heap, where they are counted and recorded.
_recorder: Any = None


def _set_recorder(recorder: Any) -> None:
    """Install kit.timeline's recorder, or remove it (None)."""
    global _recorder
    _recorder = recorder
    _cache.update_on()


def _thread_counters() -> dict:
    counts = _tls.counts
    if counts is None:
        counts = defaultdict(lambda: [0, 0])  # physical Device -> [allocations, bytes]
        _tls.counts = counts
        with _all_counters_lock:
            _all_counters.append(counts)
    return counts


def allocate(shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice) -> tuple[Any, Any]:
    """Allocate an uninitialised array: (xp array, owner). The owner is the workspace the
    memory was carved from, a cache lease, or None for a plain heap allocation."""
    ws = _context.ws
    if ws is not None:
        if ws.physical is device.physical:
            return ws.alloc(shape, dtype)
        if ws.physical is None:  # a scope_out_of_workspaces block: the heap, or a suspended generator's
            ws = resolve(ws)
            if ws is not None and ws.physical is device.physical:
                return ws.alloc(shape, dtype)
    return allocate_heap(shape, dtype, device)


def allocate_heap(shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice) -> tuple[Any, Any]:
    """`allocate` on the heap whatever workspace is open (kit.scope_out_of_workspaces in one call)."""
    nbytes = math.prod(shape) * dtype.itemsize
    counts = _tls.counts or _thread_counters()
    c = counts[device.physical]
    c[0] += 1
    c[1] += nbytes
    if _cache.on and _cache.enabled_for(device, nbytes):
        result = _cache.take(shape, dtype, device, nbytes)
    elif device.kind == "cpu":
        result = np.empty(shape, dtype), None
    elif gpu_count() == 1:  # the only GPU is always CuPy's current one: no device switch per result
        result = device.xp.empty(shape, dtype), None
    else:
        with device.physical.activate():
            result = device.xp.empty(shape, dtype), None
    if _recorder is not None:
        _recorder.heap(result, device, nbytes)
    return result


def count_external(device: AnyDevice, nbytes: int) -> None:
    """Count an allocation made outside `allocate` (a workspace spill or arena growth)."""
    c = _thread_counters()[device.physical]
    c[0] += 1
    c[1] += nbytes


def counters() -> dict[str, tuple[int, int]]:
    """Heap allocations made through kit, per physical device: name -> (count, bytes)."""
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with _all_counters_lock:
        snapshot = [dict(c) for c in _all_counters]
    for counts in snapshot:
        for dev, (n, b) in counts.items():
            total[dev.name][0] += n
            total[dev.name][1] += b
    return {k: (v[0], v[1]) for k, v in total.items()}


def heap_allocations(device: str | None = None, *, this_thread: bool = False) -> int:
    """How many heap allocations kit has made (all devices unless one is named)."""
    source = {k.name: tuple(v) for k, v in _thread_counters().items()} if this_thread else counters()
    return sum(n for name, (n, _) in source.items() if device is None or name == device)


def heap_bytes(device: str | None = None, *, this_thread: bool = False) -> int:
    source = {k.name: tuple(v) for k, v in _thread_counters().items()} if this_thread else counters()
    return sum(b for name, (_, b) in source.items() if device is None or name == device)


def reset_counters() -> None:
    with _all_counters_lock:
        for counts in _all_counters:
            counts.clear()


# ---------------------------------------------------------------------------------------
# caching allocator (ND4J's CUDA cache, for the heap path)

_BUCKET = 256  # bytes: requests are rounded up to this, so near sizes share blocks


class _Lease:
    """A cached block lent to one NDArray (and the views made from it). When the last of them is
    collected the lease goes too, and gives the block back to the cache -- but only if nothing
    else (a raw view, a .numpy() result) still points into it."""

    __slots__ = ("block", "device", "size")
    _gen = 0  # arrays from the cache are never stale: same check as workspaces, always passes
    _tid = None  # and any thread may use them

    def __init__(self, block: Any, device: Device, size: int) -> None:
        self.block, self.device, self.size = block, device, size

    def __del__(self) -> None:
        # refs to the block: this slot + getrefcount's argument; a surviving view of the memory
        # holds one more through its base
        if sys.getrefcount(self.block) <= 2:
            _cache.give(self.block, self.device, self.size)


class CachingAllocator:
    """Size-bucketed free lists of raw blocks, per device, with byte limits."""

    def __init__(self) -> None:
        self.max_host_cache = 0  # 0: off (NumPy + malloc already recycle; chapter 2 measures it)
        self.max_device_cache = 512 << 20  # ND4J's default device cache
        self.max_cacheable_length = 96 << 20  # ND4J's host cacheable length
        self._free: dict[tuple[str, int], list] = defaultdict(list)
        self._cached_bytes: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        # any cache enabled, or a memory timeline recording: the one flag the allocation fast paths
        # read; set, every heap result goes through allocate_heap
        self.on = False

    def update_on(self) -> None:
        self.on = self.max_host_cache > 0 or self.max_device_cache_kit > 0 or _recorder is not None

    def enabled_for(self, device: AnyDevice, nbytes: int) -> bool:
        limit = self.max_host_cache if device.kind == "cpu" else self.max_device_cache_kit
        return limit > 0 and nbytes <= self.max_cacheable_length

    # on GPUs CuPy's pool already caches; kit's cache on top is opt-in (set_max_device_cache)
    max_device_cache_kit = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype, device: AnyDevice, nbytes: int) -> tuple[Any, _Lease]:
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
        data = block[:nbytes].view(dtype).reshape(shape)
        return data, _Lease(block, phys, size)

    def give(self, block: Any, device: Device, size: int) -> None:
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


_cache = CachingAllocator()


def _check_bytes(name: str, value: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}({value!r}): give a whole number of bytes >= 0")
    return int(value)


def set_max_host_cache(nbytes: int) -> None:
    """Keep up to nbytes of freed host blocks for reuse (0 switches the host cache off)."""
    _cache.max_host_cache = _check_bytes("set_max_host_cache", nbytes)
    _cache.update_on()
    if nbytes == 0:
        _cache.purge()


def set_max_device_cache(nbytes: int) -> None:
    """GPU: keep up to nbytes of freed device blocks in kit's cache (ND4J's maximum device cache,
    default 512 MB); 0 switches kit's device cache off. It bounds what is *kept*, not what may be
    allocated: CuPy's pool is not capped (a cap there made a ResNet-18 step run out of memory on
    an 80 GB H100 once a benchmark had set 512 MB)."""
    _cache.max_device_cache = _check_bytes("set_max_device_cache", nbytes)
    _cache.max_device_cache_kit = nbytes
    _cache.update_on()


def set_max_cacheable_length(nbytes: int) -> None:
    """Blocks larger than this are never cached (ND4J: 96 MB host)."""
    _cache.max_cacheable_length = _check_bytes("set_max_cacheable_length", nbytes)


def cache_stats() -> dict[str, Any]:
    return _cache.stats()


def purge_cache() -> None:
    _cache.purge()


# ---------------------------------------------------------------------------------------
# periodic GC (ND4J MemoryManager: togglePeriodicGc / setAutoGcWindow)

_gc = {"enabled": False, "window_ms": 100, "last": 0.0, "calls": 0, "seconds": 0.0}


def toggle_periodic_gc(enabled: bool) -> None:
    """ND4J's default is off (since 1.0.0-beta4)."""
    _gc["enabled"] = bool(enabled)


def set_auto_gc_window(ms: int) -> None:
    """At most one gc.collect() per `ms` milliseconds from kit's loops; 0 disables it."""
    if not isinstance(ms, (int, float)) or ms < 0:
        raise ValueError(f"set_auto_gc_window({ms!r}): give milliseconds >= 0")
    _gc["window_ms"] = ms


def maybe_gc() -> bool:
    """Called once per iteration by kit's loops. Returns True when it collected."""
    if not _gc["enabled"] or _gc["window_ms"] <= 0:
        return False
    now = time.perf_counter()
    if (now - _gc["last"]) * 1000.0 < _gc["window_ms"]:
        return False
    gc.collect()
    done = time.perf_counter()
    _gc["last"] = done
    _gc["calls"] += 1
    _gc["seconds"] += done - now
    return True


def gc_stats() -> dict[str, Any]:
    return {k: _gc[k] for k in ("enabled", "window_ms", "calls", "seconds")}


def reset_gc_stats() -> None:
    _gc.update(calls=0, seconds=0.0, last=0.0)
