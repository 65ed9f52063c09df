"""What planned inference (kit.nn.plan) records a network with: the workspace manager that hands
out the arrays recorded in the capture pass in the same order (and gives up keeping them past a
byte bound), the test of whether a network can be planned, and the plan's errors."""

from __future__ import annotations

import contextlib
from typing import Any

from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray
from kit.core.context import scope_out_of_workspaces
from kit.nn.layers import Layer
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode

__all__ = ["PlanDeclinedError", "PlanMismatchError", "ReplayMgr", "declined", "plannable"]


class PlanMismatchError(ValueError):
    """A layer asked for a different array on replay than when the plan was captured."""


class PlanDeclinedError(ValueError):
    """A layer has no planned kernel and does not say its forward can be replayed."""


_NO_SCOPE = contextlib.nullcontext()


class ReplayMgr(LayerWorkspaceMgr):
    """Hands out the arrays recorded in the capture pass, in the same order."""

    def __init__(self, device: Any, max_bytes: int | None = None) -> None:
        super().__init__(WorkspaceMode.NONE, "plan/", device, backward_follows=False)
        self.buffers: list[NDArray] = []
        self.capturing = True
        self.position = 0
        # a capture stops keeping buffers once they pass max_bytes: the pass then finishes on the
        # heap (each array freed when the next layers are done with it), so an over-large plan costs
        # no more memory than an unplanned pass, not every array of the pass at once
        self.max_bytes, self.recorded, self.over = max_bytes, 0, False

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        if self.capturing:
            with scope_out_of_workspaces():
                buffer = empty(shape, dtype, device)
            self.recorded += buffer.nbytes
            if self.max_bytes is not None and self.recorded > self.max_bytes and not self.over:
                self.over = True
                self.buffers.clear()
            if not self.over:
                self.buffers.append(buffer)
            return buffer
        buffer = self.buffers[self.position]
        if buffer.shape != tuple(shape):
            raise PlanMismatchError(
                f"planned inference: a layer asked for an array of shape {tuple(shape)} where the plan recorded "
                f"{buffer.shape} (array {self.position}); the network changed shape since it was planned: plan again"
            )
        self.position += 1
        return buffer

    def iteration(self) -> Any:
        return _NO_SCOPE

    def layer_call(self) -> Any:
        return _NO_SCOPE

    def updater(self) -> Any:
        return _NO_SCOPE


def plannable(layer: Layer) -> bool:
    """A planned kernel of its own, or a forward that may be replayed over plannable sublayers."""
    if type(layer).plan_step is not Layer.plan_step and not layer.is_composite:
        return True
    return layer.plan_replay and all(plannable(sub) for sub in layer.sublayers())


def declined(net: Any) -> str | None:
    """Why `net` cannot be planned (the first layer that cannot), or None when it can."""
    for i, layer in enumerate(net.body.layers):
        if not plannable(layer):
            return (
                f"planned inference: layer {i} ({type(layer).__name__}, or a layer inside it) has no planned kernel "
                "(plan_step) and does not say its forward can be replayed on the arrays recorded once "
                "(plan_replay = True, for a forward that takes every array from mgr); Network.output runs it unplanned"
            )
    return None
