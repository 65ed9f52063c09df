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

from kit.arrays.checks import whole
from kit.arrays.ndarray import NDArray
from kit.nn.im2col import out_size, pad_into, pool_max_into, pool_scatter, pool_sum_into, tiles_exactly
from kit.nn.layers import ACT, BP, FF, GRAD, Layer
from kit.nn.workspace_mgr import LayerWorkspaceMgr

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

    def _padded_input(self, x: NDArray, mgr: LayerWorkspaceMgr, fill: float, kind: Any = FF) -> Any:
        if not self.padding:
            return x.data
        b, c, h, w = x.shape
        p = self.padding
        return pad_into(x.data, p, fill, mgr.create(kind, (b, c, h + 2 * p, w + 2 * p), x.dtype, x.device).data)

    def _scatter(self, eps: NDArray, mgr: LayerWorkspaceMgr, piece: Any) -> NDArray:
        """dx from each offset's share (see im2col.pool_scatter), through a padded frame if any."""
        xp, dev = eps.device.xp, eps.device
        b = eps.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        p = self.padding
        dx = mgr.create(GRAD, (b, c, h, w), eps.dtype, dev)
        target = mgr.create(BP, (b, c, h + 2 * p, w + 2 * p), eps.dtype, dev).data if p else dx.data
        tmp = mgr.create(BP, eps.shape, eps.dtype, dev).data
        pool_scatter(xp, piece, self.kernel, self.stride, target, self._tiles, tmp)
        if p:
            xp.copyto(dx.data, target[:, :, p : p + h, p : p + w])
        return dx


class MaxPool2D(_Pool2D):
    """Maximum of each window. Backward sends each window's gradient to its first maximum (the
    pixel argmax picks), whose offset a training forward keeps as one byte per output."""

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)
    output_read_by_backward = False  # backward reads the winners' offsets

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        # training keeps the winners' offsets (a byte per output) for backward; a backward after an
        # inference forward (a gradient check) finds them from the input; inference keeps nothing
        self._x = x if mgr.backward_follows and not training else None
        y = mgr.create(ACT, (x.shape[0], *self.output_shape), x.dtype, x.device)  # type: ignore[misc]
        self._idx = self._winners(x, y.data, mgr, ACT, FF) if training else None  # kept for backward
        if not training:
            pool_max_into(
                x.device.xp, self._padded_input(x, mgr, -np.inf), self.kernel, self.stride, y.data, None, None
            )
        return y

    def _winners(self, x: NDArray, y: Any, mgr: LayerWorkspaceMgr, kind: Any, scratch_kind: Any) -> NDArray:
        """y = the window maxima; returns the offset of each window's first maximum, made as `kind`."""
        idx_type = np.uint8 if self.kernel * self.kernel <= 256 else np.int32
        idx = mgr.create(kind, y.shape, idx_type, x.device)
        scratch = mgr.create(scratch_kind, y.shape, idx_type, x.device).data
        xpad = self._padded_input(x, mgr, -np.inf, scratch_kind)
        pool_max_into(x.device.xp, xpad, self.kernel, self.stride, y, idx.data, scratch)
        return idx

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, e = eps.device.xp, eps.data
        if self._idx is None:  # forward ran in inference mode: find the winners now
            maxima = mgr.create(BP, eps.shape, eps.dtype, eps.device).data
            self._idx = self._winners(self._x, maxima, mgr, BP, BP)
        idx = self._idx.data
        won = mgr.create(BP, eps.shape, np.bool_, eps.device).data
        self._idx = self._x = None  # used up

        def piece(offset: int, out: Any) -> None:
            xp.equal(idx, offset, out=won)  # where this offset won its window
            xp.multiply(e, won, out=out)

        return self._scatter(eps, mgr, piece)


class AvgPool2D(_Pool2D):
    """Average over each window, padding counted as zeros (count_include_pad)."""

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)
    output_read_by_backward = False  # backward reads nothing of the forward

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        y = mgr.create(ACT, (x.shape[0], *self.output_shape), x.dtype, x.device)  # type: ignore[misc]
        pool_sum_into(x.device.xp, self._padded_input(x, mgr, 0.0), self.kernel, self.stride, y.data)
        y.data *= 1.0 / (self.kernel * self.kernel)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev = eps.device.xp, eps.device
        share = mgr.create(BP, eps.shape, eps.dtype, dev).data
        xp.multiply(eps.data, 1.0 / (self.kernel * self.kernel), out=share)  # the same for every pixel

        def piece(offset: int, out: Any) -> None:
            xp.copyto(out, share)

        return self._scatter(eps, mgr, piece)


class GlobalAvgPool(Layer):
    """(B, C, H, W) -> (B, C): the mean of each channel."""

    output_read_by_backward = False

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"GlobalAvgPool needs (batch, C, H, W) inputs, got per-example {input_shape}")
        return (input_shape[0],)

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        y = mgr.create(ACT, x.shape[:2], x.dtype, x.device)
        x.device.xp.mean(x.data, axis=(2, 3), out=y.data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp = eps.device.xp
        c, h, w = self.input_shape  # type: ignore[misc]
        dx = mgr.create(GRAD, (eps.shape[0], c, h, w), eps.dtype, eps.device)
        xp.copyto(dx.data, eps.data[:, :, None, None])
        dx.data *= 1.0 / (h * w)
        return dx
