"""Readings: one dictionary with everything a panel or a test asks "how much?" about.

    >>> import kit
    >>> before = kit.readings.stats()  # heap counters, caching allocator, workspaces, RSS, GPU pools, GC
    >>> x = kit.zeros((1000,), dtype="float32")
    >>> kit.readings.stats()["heap_bytes"] - before["heap_bytes"]
    4000
    >>> kit.readings.rss_bytes() > 0   # this process's resident set (psutil), in bytes
    True
    >>> kit.readings.gpu_memory()      # per GPU: CuPy pool used/total, and NVML's used/total when present
    [...]

It sits above the workspace layer: it reads kit.memory's counters and kit.workspace's arenas;
nothing below imports it.
"""

from __future__ import annotations

from typing import Any

import psutil

from kit.core import backend, memory
from kit.core.devices import gpu_count
from kit.workspaces import workspace

__all__ = ["gpu_memory", "rss_bytes", "stats"]


def rss_bytes() -> int:
    """Resident set size of this process (psutil)."""
    return int(psutil.Process().memory_info().rss)


def gpu_memory() -> list[dict[str, Any]]:
    """Per GPU: CuPy pool used/total bytes and, with nvidia-ml-py, the device's used/total."""
    out = []
    for i in range(gpu_count()):
        cupy = backend.cupy()
        entry: dict[str, Any] = {"device": f"gpu:{i}"}
        with cupy.cuda.Device(i):
            pool = cupy.get_default_memory_pool()
            entry["pool_used_bytes"] = int(pool.used_bytes())
            entry["pool_total_bytes"] = int(pool.total_bytes())
        nvml = backend.nvml()
        if nvml is not None:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i))
                entry["device_used_bytes"], entry["device_total_bytes"] = int(info.used), int(info.total)
            except Exception:  # NVML present but unusable for this device: pool numbers only
                pass
        out.append(entry)
    return out


def stats() -> dict[str, Any]:
    """Heap counters, cache, workspaces, RSS, GPUs and the GC window, in one dictionary."""
    heap = memory.counters()
    return {
        "heap_allocations": sum(n for n, _ in heap.values()),
        "heap_bytes": sum(b for _, b in heap.values()),
        "heap_by_device": heap,
        "cache": memory.cache_stats(),
        "workspaces": [ws.stats() for ws in workspace.all_workspaces()],
        "rss_bytes": rss_bytes(),
        "gpus": gpu_memory(),
        "gc": memory.gc_stats(),
    }
