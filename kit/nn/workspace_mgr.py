"""Workspace modes for networks: which workspace each kind of array lives in.

    WorkspaceMode.NONE      everything on the heap
    WorkspaceMode.SINGLE    one workspace per iteration holds every array of the iteration
    WorkspaceMode.SEPARATE  activations in one workspace per iteration; each layer's working
                            memory in another that is reset after every layer call, so its peak
                            is the largest layer's, not the sum; each activation gradient in a
                            slot of its own, handed back as soon as the layer below has read it
                            (DL4J alternates two ACTIVATION_GRAD workspaces; a residual block
                            holds a third gradient while its two paths run)

DL4J 1.0 made SINGLE and SEPARATE aliases of ENABLED; here they differ (chapter 3 measures how).
A layer asks its LayerWorkspaceMgr for arrays by ArrayType (ND4J's rule: `forward` returns
ACTIVATIONS, `backward` returns ACTIVATION_GRAD); temporaries made with ordinary kit ops go
to the current workspace, which inside a layer call is the working-memory one.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from typing import Any

import numpy as np

from kit.arrays.ndarray import NDArray, heap_result, wrap
from kit.core.memory import allocate_heap
from kit.state import STATE
from kit.workspaces.workspace import (
    AllocationPolicy,
    DebugMode,
    LearningPolicy,
    ResetPolicy,
    SpillPolicy,
    Workspace,
    WorkspaceConfig,
    WorkspaceScopeError,
    get_workspace_for_current_thread,
)

__all__ = ["ArrayType", "LayerWorkspaceMgr", "WorkspaceMode"]


class WorkspaceMode(enum.Enum):
    NONE = "NONE"
    SINGLE = "SINGLE"
    SEPARATE = "SEPARATE"


class ArrayType(enum.Enum):
    # members are singletons compared by identity: hash them as such, in C (Enum's own
    # __hash__ is Python code, and every layer's array requests look one up)
    __hash__ = object.__hash__

    INPUT = "INPUT"
    ACTIVATIONS = "ACTIVATIONS"
    ACTIVATION_GRAD = "ACTIVATION_GRAD"
    FF_WORKING_MEM = "FF_WORKING_MEM"
    BP_WORKING_MEM = "BP_WORKING_MEM"
    UPDATER_WORKING_MEM = "UPDATER_WORKING_MEM"


# DL4J's MultiLayerNetwork configurations (initialSize 0, BLOCK_LEFT, REALLOCATE, OVERALLOCATE)
_ACT_CONFIG = WorkspaceConfig(
    overallocation_limit=0.05,
    policy_learning=LearningPolicy.FIRST_LOOP,
    policy_spill=SpillPolicy.REALLOCATE,
    policy_allocation=AllocationPolicy.OVERALLOCATE,
    policy_reset=ResetPolicy.BLOCK_LEFT,
)


def _working_config(layer_calls: int) -> WorkspaceConfig:
    """DL4J: OVER_TIME learning over 2 x (number of layers) cycles, since one layer call is one
    cycle and the first layers may need no working memory at all."""
    return WorkspaceConfig(
        overallocation_limit=0.02,
        policy_learning=LearningPolicy.OVER_TIME,
        cycles_before_initialization=max(1, 2 * layer_calls),
        policy_spill=SpillPolicy.REALLOCATE,
        policy_allocation=AllocationPolicy.OVERALLOCATE,
    )


def _grad_slot_config() -> WorkspaceConfig:
    """A slot holds one gradient at a time: learned from its first cycle, grown (REALLOCATE) when a
    larger gradient comes, never over-allocated."""
    return WorkspaceConfig(
        policy_learning=LearningPolicy.FIRST_LOOP,
        policy_spill=SpillPolicy.REALLOCATE,
        policy_allocation=AllocationPolicy.STRICT,
    )


WS_SINGLE = "WS_SINGLE"
WS_ALL_LAYERS_ACT = "WS_ALL_LAYERS_ACT"
WS_LAYER_WORKING_MEM = "WS_LAYER_WORKING_MEM"
WS_UPDATER_WORKING_MEM = "WS_UPDATER_WORKING_MEM"
WS_ACTIVATION_GRAD = "WS_ACTIVATION_GRAD"  # SEPARATE's gradient slots: WS_ACTIVATION_GRAD_0, _1, ...


_NO_SCOPE = contextlib.nullcontext()
_WORKING = (ArrayType.FF_WORKING_MEM, ArrayType.BP_WORKING_MEM)


class _ThreadWorkspaces(threading.local):
    """One thread's workspaces of one manager: by name, and resolved by array type."""

    by_name: dict[str, Workspace] | None = None
    by_type: dict[ArrayType, Workspace] | None = None
    grad_slots: list[Workspace] | None = None  # SEPARATE: one activation gradient each
    pinned: frozenset[Workspace] = frozenset()  # slots whose gradient a block still reads (LayerWorkspaceMgr.pin)


class LayerWorkspaceMgr:
    """Maps ArrayTypes to workspaces for one mode, on this thread, under a name prefix (so
    several networks, or several replicas on one thread, keep separate arenas).

    Each thread resolves its workspaces once (`iteration()` checks them every iteration and
    re-makes a destroyed one); layers then reach theirs with one dictionary lookup.

    `backward_follows`: whether a backward pass may follow a forward under this manager (a
    training manager's, also after a forward with training=False, as a gradient check does).
    Under an inference manager (False) a layer keeps nothing for a backward: no reference to its
    input or output, and what only a backward reads (BatchNorm's normalised input) is working
    memory. So an inference pass on the heap holds what the next layer still reads, not every
    array of the pass, and nothing of the batch once it has answered."""

    recomputing = False  # a recomputed block's second forward (kit.nn.recompute): statistics are not moved again

    def __init__(
        self,
        mode: WorkspaceMode,
        prefix: str = "",
        device: Any = None,
        layer_calls: int = 1,
        backward_follows: bool = True,
    ) -> None:
        self.mode = WorkspaceMode(mode) if not isinstance(mode, WorkspaceMode) else mode
        self.backward_follows = backward_follows
        self.prefix = prefix
        self.layer_calls = layer_calls
        self.device = device
        self.separate = self.mode is WorkspaceMode.SEPARATE  # layer calls get their own scope
        self._local = _ThreadWorkspaces()  # workspaces belong to threads: one set per thread
        if self.mode is WorkspaceMode.NONE:
            self._names: dict[ArrayType, str] = {}
        elif self.mode is WorkspaceMode.SINGLE:
            self._names = dict.fromkeys(ArrayType, WS_SINGLE)
        else:  # SEPARATE: ACTIVATION_GRAD in slots (grad_slot), the others by name
            self._names = {
                t: WS_LAYER_WORKING_MEM
                if t in _WORKING
                else WS_UPDATER_WORKING_MEM
                if t is ArrayType.UPDATER_WORKING_MEM
                else WS_ALL_LAYERS_ACT
                for t in ArrayType
                if t is not ArrayType.ACTIVATION_GRAD
            }
        self._iteration_name = WS_SINGLE if self.mode is WorkspaceMode.SINGLE else WS_ALL_LAYERS_ACT

    @property
    def _ws(self) -> dict[str, Workspace]:
        found = self._local.by_name
        if found is None:
            found = self._local.by_name = {}
        return found

    def workspace(self, name: str) -> Workspace | None:
        if self.mode is WorkspaceMode.NONE:
            return None
        ws = self._ws.get(name)
        if ws is None or ws.destroyed:
            config = _working_config(self.layer_calls) if name == WS_LAYER_WORKING_MEM else _ACT_CONFIG
            ws = get_workspace_for_current_thread(config, self.prefix + name, self.device)
            self._ws[name] = ws
            self._local.by_type = None  # resolve again
        return ws

    def _by_type(self) -> dict[ArrayType, Workspace]:
        """This thread's workspace for each array type (made on first use)."""
        by_type = self._local.by_type
        if by_type is None:
            by_type = {t: self.workspace(name) for t, name in self._names.items()}
            self._local.by_type = by_type
        return by_type

    # ---- scopes --------------------------------------------------------------------
    # Each returns the workspace itself (a context manager) or a shared no-op: on the hot path of
    # every layer call, a generator-based context manager would cost more than the check it wraps.
    def iteration(self) -> contextlib.AbstractContextManager[Any]:
        """One training or inference iteration: opens the activations workspace (and checks
        this thread's workspaces: one destroyed since the last iteration is made anew)."""
        if self.mode is WorkspaceMode.NONE:
            return _NO_SCOPE
        by_type = self._local.by_type
        if by_type is not None:
            for ws in by_type.values():
                if ws.destroyed:
                    self._local.by_type = None
                    break
        slots = self._local.grad_slots
        if slots:  # a gradient nobody handed back (a backward run by hand) ends with its iteration
            for slot in slots:
                slot.take_back()
        return self.workspace(self._iteration_name)

    def layer_call(self) -> contextlib.AbstractContextManager[Any]:
        """One layer's forward or backward: SEPARATE resets working memory afterwards."""
        if not self.separate:
            return _NO_SCOPE
        return self._by_type()[ArrayType.FF_WORKING_MEM]

    def updater(self) -> contextlib.AbstractContextManager[Any]:
        if not self.separate:
            return _NO_SCOPE
        return self._by_type()[ArrayType.UPDATER_WORKING_MEM]

    # ---- arrays --------------------------------------------------------------------
    def create(self, array_type: ArrayType, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        """An uninitialised array in the workspace for `array_type` (or the heap)."""
        recorder = STATE.recorder
        if recorder is not None and recorder.array_type() is None:  # kit.timeline: name the array's type
            with recorder.typed(array_type.name):
                return self.create(array_type, shape, dtype, device)
        by_type = self._local.by_type
        ws = (by_type if by_type is not None else self._by_type()).get(array_type)
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        if (
            array_type is ArrayType.ACTIVATION_GRAD
            and self.separate
            and STATE.debug_mode is not DebugMode.BYPASS_EVERYTHING
        ):
            ws = self._grad_slot()
        if ws is None or STATE.debug_mode is DebugMode.BYPASS_EVERYTHING:  # bypass: the heap
            if STATE.cache.on or device.kind != "cpu":
                data, owner = allocate_heap(shape, dt, device)
                return wrap(data, device, owner)
            return heap_result(np.empty(shape, dt), device)  # allocate_heap's host path, in one call
        if not ws.is_scope_active:
            raise WorkspaceScopeError(
                f"workspace {ws.name!r} for array type {array_type.name} is not open (ND4J: "
                f'Workspace "{ws.name}" for array type {array_type.name} is not open)'
            )
        data, owner = ws.alloc(shape, dt)
        return wrap(data, device, owner)

    # ---- activation gradients (SEPARATE) ----------------------------------------------
    def _grad_slot(self) -> Workspace:
        """The first free gradient slot of this thread, lent for one array (a new slot when all
        are holding one). Only inside an iteration, as the activations workspace is."""
        act = self._by_type()[ArrayType.ACTIVATIONS]
        if not act.is_scope_active:
            raise WorkspaceScopeError(
                f"workspace {act.name!r} for array type ACTIVATION_GRAD is not open: activation gradients are "
                "made inside an iteration (mgr.iteration())"
            )
        slots = self._local.grad_slots
        if slots is None:
            slots = self._local.grad_slots = []
        for i, slot in enumerate(slots):
            if slot.destroyed:  # destroyed with the thread's workspaces: made anew
                slot = slots[i] = self._new_grad_slot(i)
            if not slot.is_scope_active:
                break
        else:
            slot = self._new_grad_slot(len(slots))
            slots.append(slot)
        slot.lend()
        return slot

    def _new_grad_slot(self, i: int) -> Workspace:
        name = f"{WS_ACTIVATION_GRAD}_{i}"
        slot = get_workspace_for_current_thread(_grad_slot_config(), self.prefix + name, self.device)
        self._ws[name] = slot
        return slot

    def release(self, grad: NDArray | None, keep: NDArray | None = None) -> None:
        """Hand back the slot of an activation gradient once it has been read (SEPARATE; elsewhere
        nothing to do: on the heap it goes with its last reference). A container releases each
        gradient after the layer below has read it; `keep` is what that layer returned, which may
        be a view of it (Flatten's reshape) and then keeps the slot. Nothing happens to a gradient
        released already, or pinned (`pin`) by a block that reads it again."""
        if grad is None or not self.separate:
            return
        slot = grad._owner  # grad.workspace, written out: this runs for every gradient of every step
        if slot.__class__ is not Workspace:
            return
        if not slot.is_scope_active or slot.thread_id != threading.get_ident() or not grad.is_valid:
            return
        if (keep is not None and keep._owner is slot) or slot in self._local.pinned:
            return
        slots = self._local.grad_slots
        if slots is not None and slot in slots:
            slot.take_back()

    def pin(self, grad: NDArray) -> None:
        """Keep `grad`'s slot through releases until `unpin`: a residual block's gradient, which its
        main path reads first and its shortcut after."""
        slot = grad.workspace
        if self.separate and slot is not None:
            self._local.pinned = self._local.pinned | {slot}

    def unpin(self, grad: NDArray) -> None:
        self._local.pinned = self._local.pinned - {grad.workspace}

    def zeros(self, array_type: ArrayType, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        out = self.create(array_type, shape, dtype, device)
        out.data.fill(0)
        return out

    def stats(self) -> dict[str, dict[str, Any]]:
        return {name: ws.stats() for name, ws in self._ws.items() if not ws.destroyed}

    def peak_bytes(self) -> int:
        """Sum of the peak bytes used in each of this manager's workspaces."""
        return sum(s["peak_used"] for s in self.stats().values())

    def destroy(self) -> None:
        for slot in self._local.grad_slots or ():
            slot.take_back()
        for ws in self._ws.values():
            if not ws.destroyed and not ws.is_scope_active:
                ws.destroy()
        self._ws.clear()
        self._local.by_type = None
        self._local.grad_slots = None
