"""Recording: a step run as written while kit.nn.kernels notes each kernel call (kit.nn.replay).

    >>> import numpy as np
    >>> from kit.nn.kernels import relu_into
    >>> from kit.nn.recording import record
    >>> x, y = np.array([-1.0, 2.0]), np.empty(2)
    >>> _, calls = record(lambda: relu_into(np, x, y))
    >>> [(func.__name__, args[1] is x) for func, args, _ in calls]
    [('relu_into', True)]

`record(run)` runs `run()` with `kernels.TAPE` taking notes. What a step allocates and which
workspace cycles it closes are noted by the managers it is run with: `KeepMgr` for an inference
pass (every array on the heap, kept by the plan, up to a byte budget), `Recorder` for a training
iteration (a view of the network's own manager, noting each array made and each scope closed, so
that a replay can hand the updater the same arrays and count the same cycles). kit.nn.replay
turns what they noted into a Tape and replays it; nothing here runs on a replayed step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray
from kit.core.context import scope_out_of_workspaces
from kit.nn.kernels import TAPE
from kit.nn.workspace_mgr import WS_ACTIVATION_GRAD, LayerWorkspaceMgr, WorkspaceMode
from kit.workspaces.workspace import Workspace

__all__ = ["KeepMgr", "Recorder", "record"]

T = TypeVar("T")


def record(run: Callable[[], T]) -> tuple[T, list[tuple[Any, tuple[Any, ...], Any]]]:
    """Run `run()` with kit.nn.kernels noting every kernel called on this thread: its result, the
    calls (a recording inside another notes its calls in its own list only)."""
    before, TAPE.calls = TAPE.calls, []
    calls = TAPE.calls
    try:
        return run(), calls
    finally:
        TAPE.calls = before


class KeepMgr(LayerWorkspaceMgr):
    """Inference: every array on the heap, kept by the plan (up to `max_bytes`: past them the
    pass finishes on the heap as an unplanned one would, and nothing is kept)."""

    def __init__(self, device: Any, max_bytes: int | None) -> None:
        super().__init__(WorkspaceMode.NONE, "plan/", device, backward_follows=False)
        self.max_bytes, self.recorded, self.over = max_bytes, 0, False

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        with scope_out_of_workspaces():
            buffer = empty(shape, dtype, device)
        self.recorded += buffer.nbytes
        if not self.over and self.max_bytes is not None and self.recorded > self.max_bytes:
            self.over = True
            if TAPE.calls is not None:  # keep none of the pass's arrays alive through its calls
                TAPE.calls.clear()
                TAPE.calls = None
        return buffer

    def iteration(self) -> Any:
        return contextlib.nullcontext()

    layer_call = updater = iteration


class Recorder(LayerWorkspaceMgr):
    """Training: hands out what the network's own manager does, noting each array made and each
    scope closed (allocations, bytes, offset, spills, arenas at open and close), in order."""

    def __init__(self, real: LayerWorkspaceMgr) -> None:  # a view of `real`: no workspaces of its own
        self.real, self.mode, self.separate, self.device = real, real.mode, real.separate, real.device
        self.backward_follows = True
        self.made: list[Any] = []
        self.scopes: list[tuple[Workspace, tuple[int, ...], tuple[int, ...]]] = []
        self.reentered = False  # a scope was entered while open already (the plan is not kept)
        self._lent: dict[int, tuple[int, ...]] = {}  # gradient slots lent now: their tally at lending

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        arr = self.real.create(array_type, shape, dtype, device)
        self.made.append(arr.data)
        slot = arr.workspace
        if slot is not None and slot.name.startswith(self.real.prefix + WS_ACTIVATION_GRAD):
            self._lent[id(slot)] = slot.lent_tally
        return arr

    def release(self, grad: Any, keep: Any = None) -> None:
        slot = None if grad is None else grad.workspace
        before = self._lent.get(id(slot)) if slot is not None else None
        self.real.release(grad, keep)
        if before is not None and not slot.is_scope_active:  # the slot's cycle ended: a scope's
            self.scopes.append((slot, before, slot.tally()))
            del self._lent[id(slot)]

    def pin(self, grad: NDArray) -> None:
        self.real.pin(grad)

    def unpin(self, grad: NDArray) -> None:
        self.real.unpin(grad)

    @contextlib.contextmanager
    def _scope(self, ws: Any) -> Iterator[Any]:
        if not isinstance(ws, Workspace):
            yield ws
            return
        self.reentered = self.reentered or ws.is_scope_active
        with ws:
            before = ws.tally()
            try:
                yield ws
            finally:
                self.scopes.append((ws, before, ws.tally()))

    def iteration(self) -> Any:
        return self._scope(self.real.iteration())

    def layer_call(self) -> Any:
        return self._scope(self.real.layer_call())

    def updater(self) -> Any:
        return self._scope(self.real.updater())
