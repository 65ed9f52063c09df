"""Pooling layers: max and average over k x k windows, and the global average.

    MaxPool2D(2)                       (B, C, H, W) -> (B, C, H/2, W/2)
    MaxPool2D(3, stride=2, padding=1)  overlapping windows, padded with -inf
    AvgPool2D(2)                       padding counts as zeros (count_include_pad)
    GlobalAvgPool()                    (B, C, H, W) -> (B, C)

Both window poolings are k*k elementwise passes over strided views of the input (for windows
that tile it, the views of the reshape (B, C, OH, k, OW, k)); max pooling keeps the offset of
each window's first maximum, one byte per output, so that backward writes each gradient straight
to its pixel (kit/nn/im2col.py has the kernels, `python -m kit bench train` the alternatives).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.arguments import whole
from kit.core.backend import RawArray
from kit.nn.im2col import (
    avg_pool_backward_into,
    avg_pool_into,
    global_avg_pool_backward_into,
    global_avg_pool_into,
    max_pool_backward_into,
    max_pool_into,
    out_size,
    tiles_exactly,
)
from kit.nn.layers import ACT, BP, FF, GRAD, Layer
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["AvgPool2D", "GlobalAvgPool", "MaxPool2D"]


class _Pool2D(Layer):
    def __init__(self, kernel: int = 2, stride: int | None = None, padding: int = 0) -> None:
        super().__init__()
        name = type(self).__name__
        kernel = whole(name, "kernel", kernel, 1)
        stride = kernel if stride is None else whole(name, "stride", stride, 1)
        padding = whole(name, "padding", padding, 0, kernel // 2, " (up to kernel // 2)")
        self.kernel, self.stride, self.padding = kernel, stride, padding

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "kernel": self.kernel, "stride": self.stride, "padding": self.padding}

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"{type(self).__name__} needs (batch, C, H, W) inputs, got per-example {input_shape}")
        c, h, w = input_shape
        k, s, p = self.kernel, self.stride, self.padding
        name = type(self).__name__
        return (c, out_size(h, k, s, p, name), out_size(w, k, s, p, name))

    @property
    def _tiles(self) -> bool:
        _c, h, w = self.input_shape  # type: ignore[misc]
        return tiles_exactly(h, w, self.kernel, self.stride, self.padding)

    def _frame(self, x: NDArray, mgr: LayerWorkspaceMgr, kind: ArrayType = FF) -> RawArray | None:
        """The padded input's frame (working memory), None without padding."""
        if not self.padding:
            return None
        b, c, h, w = x.shape
        p = self.padding
        return mgr.create(kind, (b, c, h + 2 * p, w + 2 * p), x.dtype, x.device).data

    def _scatter_arrays(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> tuple[NDArray, RawArray | None, RawArray]:
        """dx, the padded frame it is gathered in (None without padding), and one share (B, C, OH, OW)."""
        dev, dt = eps.device, eps.dtype
        c, h, w = self.input_shape  # type: ignore[misc]
        p = self.padding
        dx = mgr.create(GRAD, (eps.shape[0], c, h, w), dt, dev)
        target = mgr.create(BP, (eps.shape[0], c, h + 2 * p, w + 2 * p), dt, dev).data if p else None
        return dx, target, mgr.create(BP, eps.shape, dt, dev).data


class MaxPool2D(_Pool2D):
    """Maximum of each window. Backward sends each window's gradient to its first maximum (the
    pixel argmax picks), whose offset a training forward keeps as one byte per output."""

    output_read_by_backward = False  # backward reads the winners' offsets
    replayable = True

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        # training keeps the winners' offsets (a byte per output) for backward; a backward after an
        # inference forward (a gradient check) finds them from the input; inference keeps nothing
        self._x = x if mgr.backward_follows and not training else None
        y = mgr.create(ACT, (x.shape[0], *self.output_shape), x.dtype, x.device)  # type: ignore[misc]
        self._idx = self._winners(x, y.data, mgr, ACT, FF) if training else None  # kept for backward
        if not training:
            k, s, p = self.kernel, self.stride, self.padding
            max_pool_into(x.device.xp, x.data, k, s, p, y.data, self._frame(x, mgr), None, None)
        return y

    def _winners(self, x: NDArray, y: RawArray, mgr: LayerWorkspaceMgr, kind: ArrayType, scratch: ArrayType) -> NDArray:
        """y = the window maxima; returns the offset of each window's first maximum, made as `kind`."""
        idx_type = np.uint8 if self.kernel * self.kernel <= 256 else np.int32
        idx = mgr.create(kind, y.shape, idx_type, x.device)
        work = mgr.create(scratch, y.shape, idx_type, x.device).data
        k, s, p = self.kernel, self.stride, self.padding
        max_pool_into(x.device.xp, x.data, k, s, p, y, self._frame(x, mgr, scratch), idx.data, work)
        return idx

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        if self._idx is None:  # forward ran in inference mode: find the winners now
            maxima = mgr.create(BP, eps.shape, eps.dtype, eps.device).data
            self._idx = self._winners(self._x, maxima, mgr, BP, BP)
        idx = self._idx.data
        won = mgr.create(BP, eps.shape, np.bool_, eps.device).data
        self._idx = self._x = None  # used up
        dx, target, tmp = self._scatter_arrays(eps, mgr)
        k, s, p = self.kernel, self.stride, self.padding
        max_pool_backward_into(eps.device.xp, eps.data, idx, won, k, s, p, self._tiles, dx.data, target, tmp)
        return dx


class AvgPool2D(_Pool2D):
    """Average over each window, padding counted as zeros (count_include_pad)."""

    output_read_by_backward = False  # backward reads nothing of the forward
    replayable = True

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        y = mgr.create(ACT, (x.shape[0], *self.output_shape), x.dtype, x.device)  # type: ignore[misc]
        k, s, p = self.kernel, self.stride, self.padding
        avg_pool_into(x.device.xp, x.data, k, s, p, y.data, self._frame(x, mgr))
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        share = mgr.create(BP, eps.shape, eps.dtype, eps.device).data
        dx, target, tmp = self._scatter_arrays(eps, mgr)
        k, s, p = self.kernel, self.stride, self.padding
        avg_pool_backward_into(eps.device.xp, eps.data, share, k, s, p, self._tiles, dx.data, target, tmp)
        return dx


class GlobalAvgPool(Layer):
    """(B, C, H, W) -> (B, C): the mean of each channel."""

    output_read_by_backward = False
    replayable = True

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"GlobalAvgPool needs (batch, C, H, W) inputs, got per-example {input_shape}")
        return (input_shape[0],)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        y = mgr.create(ACT, x.shape[:2], x.dtype, x.device)
        global_avg_pool_into(x.device.xp, x.data, y.data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        c, h, w = self.input_shape  # type: ignore[misc]
        dx = mgr.create(GRAD, (eps.shape[0], c, h, w), eps.dtype, eps.device)
        global_avg_pool_backward_into(eps.device.xp, eps.data, dx.data)
        return dx
