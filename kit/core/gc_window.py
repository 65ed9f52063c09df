"""The periodic GC window (ND4J's MemoryManager: togglePeriodicGc, setAutoGcWindow): kit's loops
call `maybe_gc()` once per iteration, and with the window on it runs `gc.collect()` at most once per
`window_ms`, counting the calls and the time they took (`gc_stats`). Off by default, as in ND4J
since 1.0.0-beta4. Re-exported by kit.memory, where users reach it (`kit.memory.maybe_gc()`).

    >>> from kit import memory
    >>> memory.maybe_gc()                        # off: nothing collected
    False
"""

from __future__ import annotations

import gc
import time
from typing import Any

from kit.state import STATE

__all__ = ["gc_stats", "maybe_gc", "reset_gc_stats", "set_auto_gc_window", "toggle_periodic_gc"]


def toggle_periodic_gc(enabled: bool) -> None:
    """ND4J's default is off (since 1.0.0-beta4)."""
    STATE.gc["enabled"] = bool(enabled)


def set_auto_gc_window(ms: int) -> None:
    """At most one gc.collect() per `ms` milliseconds from kit's loops; 0 disables it."""
    if not isinstance(ms, (int, float)) or ms < 0:
        raise ValueError(f"set_auto_gc_window({ms!r}): give milliseconds >= 0")
    STATE.gc["window_ms"] = ms


def maybe_gc() -> bool:
    """Called once per iteration by kit's loops. Returns True when it collected."""
    gc_state = STATE.gc
    if not gc_state["enabled"] or gc_state["window_ms"] <= 0:
        return False
    now = time.perf_counter()
    if (now - gc_state["last"]) * 1000.0 < gc_state["window_ms"]:
        return False
    gc.collect()
    done = time.perf_counter()
    gc_state["last"] = done
    gc_state["calls"] += 1
    gc_state["seconds"] += done - now
    return True


def gc_stats() -> dict[str, Any]:
    return {k: STATE.gc[k] for k in ("enabled", "window_ms", "calls", "seconds")}


def reset_gc_stats() -> None:
    STATE.gc.update(calls=0, seconds=0.0, last=0.0)
