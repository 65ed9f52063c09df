"""Recomputation (activation checkpointing) of a block: keep its input and output, not what is
inside, and run its forward again when backward reaches it.

    Residual(64, recompute=True)          # or resnet18(recompute=True): every block

A recomputed block's layers see a `RecomputeView` of the network's workspace manager: their
ACTIVATIONS go to the block's own workspace (WS_RECOMPUTE, one arena every block reuses). The
forward pass keeps nothing for a backward (`backward_follows=False`); backward runs the forward
again keeping what backward reads, with the first pass's batch statistics and BatchNorm's running
statistics left alone (`recomputing=True`). The trade is measured by `python -m kit bench memory`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from kit.arrays.ndarray import NDArray, wrap
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspaceMode

__all__ = ["WS_RECOMPUTE", "RecomputeView"]

WS_RECOMPUTE = "WS_RECOMPUTE"


class RecomputeView(LayerWorkspaceMgr):
    """What a recomputed block's layers get as their manager (no workspaces of its own)."""

    def __init__(self, real: LayerWorkspaceMgr, backward_follows: bool, recomputing: bool) -> None:
        self.real = real
        self.mode, self.separate, self.device, self.prefix = real.mode, real.separate, real.device, real.prefix
        self.backward_follows, self.recomputing = backward_follows, recomputing
        self.block = None if real.mode is WorkspaceMode.NONE else real.workspace(WS_RECOMPUTE)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The block's forward or backward: its activations live until this scope closes."""
        return self.block if self.block is not None else contextlib.nullcontext()

    def create(self, array_type: ArrayType, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        if array_type is ArrayType.ACTIVATIONS and self.block is not None:
            data, owner = self.block.alloc(tuple(shape), np.dtype(dtype))
            return wrap(data, device, owner)
        return self.real.create(array_type, shape, dtype, device)

    def layer_call(self) -> contextlib.AbstractContextManager[Any]:
        return self.real.layer_call()

    def updater(self) -> contextlib.AbstractContextManager[Any]:
        return self.real.updater()

    def release(self, grad: NDArray | None, keep: NDArray | None = None) -> None:
        self.real.release(grad, keep)

    def pin(self, grad: NDArray) -> None:
        self.real.pin(grad)

    def unpin(self, grad: NDArray) -> None:
        self.real.unpin(grad)
