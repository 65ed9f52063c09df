"""Everything kit keeps for the whole process, in one object with one `reset()`.

kit's modules hold no mutable state of their own: the settings a user changes (host devices,
the seed, the default dtype, debug modes, the GC window), the counters kit keeps (allocations
per thread, copies between devices), its registries (live workspaces, seeded devices, thread
affinity, BLAS-thread limits) and each thread's slots (the current workspace, the device stack,
the workspace manager, the allocation counters) are attributes of `STATE`, read through it.
(tinygrad keeps its counters the same way, in `GlobalCounters` with a `reset()`.)

    >>> import kit
    >>> from kit.state import STATE
    >>> kit.devices.set_host_device_count(3)
    1
    >>> STATE.host_devices
    3
    >>> kit.state.reset()                      # settings back to the environment's, counters to zero
    >>> STATE.host_devices, kit.backend.get_default_dtype().name
    (1, 'float32')

`reset()` also closes this thread's workspaces, empties the caching allocator and lets other
modules put back what they own (`on_reset`): the test suite calls it after every test. It keeps
what was probed from the hardware and the interned devices (arrays made before a reset still compare
their device by identity); memo caches of pure functions hold nothing a user could observe.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from kit import settings

__all__ = ["STATE", "State", "on_reset", "reset"]


class _Thread(threading.local):
    """One thread's slots. Class defaults, so a new thread reads them without a miss."""

    ws: Any = None  # the workspace new arrays go to (kit.context), None: the heap
    counts: Any = None  # this thread's allocation counters (kit.memory), made on first use
    device_stack: list | None = None  # `with kit.device(...)` scopes (kit.devices)
    manager: Any = None  # this thread's workspace manager (kit.workspace)
    end: Any = None  # freed when the thread ends: its counts then retire (kit.memory)


class State:
    """kit's process-wide state. One instance, `STATE`; `reset()` puts it back as at import."""

    def __init__(self) -> None:
        self.thread = _Thread()
        self.lock = threading.RLock()  # guards the registries below where threads meet
        self.probes: dict[str, Any] = {}  # facts of this machine, probed once: never reset
        # name -> interned Device (kit.devices): never reset, so `Device("cpu:0") is x.device` holds
        # for every array, network and probe made before a reset too
        self.devices: dict[str, Any] = {}
        self._hooks: list[Callable[[], None]] = []
        self.workspaces: weakref.WeakSet = weakref.WeakSet()  # every live workspace, all threads
        self.thread_counters: list[dict] = []  # every live thread's allocation counters
        self.retired_counts: dict[Any, list[int]] = {}  # the ended threads' counts, added up (kit.memory)
        self.seeded: list = []  # devices whose generators were made from base_seed (kit.devices)
        self._serials: dict[str, Iterator[int]] = {}  # never reset: names stay unique for the process
        self.blas_holders: dict[int, int] = {}  # BLAS-thread share token -> threads it asked for (kit.devices)
        self.blas_original: Any = None  # the first share's limiter: it remembers the limits from before
        self.blas_tokens = itertools.count(1)
        # the IPython shell whose cell events kit.panel_live watches, and whether a cell runs there:
        # never reset, since the events stay registered with that shell
        self.cell_watch: dict[str, Any] = {"running": True, "shell": None}
        self._fresh()

    def _fresh(self) -> None:
        """The settings and counters as a fresh process has them."""
        # devices
        self.host_devices: int = settings.host_devices()  # KIT_HOST_DEVICES
        self.base_seed: int = settings.seed()  # KIT_SEED
        self.affinity: dict[int, Any] = {}  # thread ident -> device it is attached to
        self.transfers: dict[tuple[str, str], list[int]] = {}  # (source, target) -> [copies, bytes]
        # backend
        self.default_dtype: Any = None  # None: KIT_DEFAULT_DTYPE, read on first use
        self.matmul_precision: str | None = None  # None: KIT_MATMUL_PRECISION, read on first use
        # memory
        self.recorder: Any = None  # the memory timeline recording now (kit.timeline), or None
        self.gc = {"enabled": False, "window_ms": 100, "last": 0.0, "calls": 0, "seconds": 0.0}
        # workspaces
        self.debug_mode: Any = None  # kit.workspace.DebugMode; set by kit.workspace at import
        self.track_sites = False
        # reference runs: the figures `beside` showed (kit.reference), and those it marked flagged
        self.reported: dict[str, Any] = {}
        self.reported_flagged: set[str] = set()
        # a Spark executor's networks, built from their JSON config and reused by later tasks
        # (kit.spark.executor): each executor is a Python process of its own, with its own STATE.
        # A reset drops them: their workspaces may be closed and their settings gone
        self.executor_nets: dict[str, Any] = {}
        # widget panels shown and not closed yet (kit.panel_live): told when their cell ends
        self.live_panels: weakref.WeakSet = weakref.WeakSet()

    def reset(self) -> None:
        """Close this thread's workspaces, empty caches, and put every setting, counter and
        registry back as a fresh process has them (the machine's probed facts stay)."""
        with self.lock:
            for counts in self.thread_counters:
                counts.clear()
            self.retired_counts.clear()
            debug = self.debug_mode
            self._fresh()
            if debug is not None:
                self.debug_mode = type(debug).DISABLED
        self.thread.device_stack = None
        for hook in list(self._hooks):
            hook()
        self.thread.ws = None

    def unique_name(self, prefix: str) -> str:
        """`prefix` and a number no other name with that prefix got in this process: net0, net1, ..."""
        with self.lock:
            serial = self._serials.setdefault(prefix, itertools.count())
            return f"{prefix}{next(serial)}"

    def on_reset(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Register `hook` to run in every reset, after the fields are fresh (for what modules
        above this one own: workspaces to close, generators to forget, caches to empty)."""
        self._hooks.append(hook)
        return hook


STATE = State()
reset = STATE.reset
on_reset = STATE.on_reset
