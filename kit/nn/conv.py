"""Convolution (with pooling, re-exported: ResNet-18's and LeNet's spatial parts).

    Conv2D(64, 3, padding=1)      (B, C, H, W) -> (B, 64, H, W)     im2col + matrix products
    MaxPool2D(2), AvgPool2D(2)    (B, C, H, W) -> (B, C, H/2, W/2)
    GlobalAvgPool()               (B, C, H, W) -> (B, C)

BatchNorm is in kit/nn/batchnorm.py, d2l's residual block in kit/nn/residual.py; the arithmetic
of all of them is in kit/nn/image_kernels.py, where a replayed step (kit.nn.replay) runs it.

Conv2D: one strided copy turns every k x k window of the padded input into the columns of a
(C*k*k, B*OH*OW) matrix (kit/nn/im2col.py says why this layout); the convolution is then a matrix
product. The columns are k*k times the input, so Conv2D builds them a chunk of examples at a time
(about `Conv2D.column_bytes`) and again in backward, as DL4J's ConvolutionLayer does. Columns that
fit one chunk whole (LeNet's, ResNet's stem) are kept for backward instead (`kept_bytes`).
`Conv2D.keep_columns` chooses: None (that rule), False (always rebuilt), True (always kept, up to
`keep_columns_max_bytes`). The input gradient of a stride-1 'same' convolution is itself a
convolution; other strides and paddings add each window's column back (col2im).

The pooling layers live in kit/nn/pooling.py and are re-exported here.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.arguments import whole
from kit.core.backend import RawArray
from kit.core.device_objects import Device
from kit.nn.im2col import out_size
from kit.nn.image_kernels import ConvShape, channel_scratch_size, channel_sums_into, conv2d_backward_into, conv2d_into
from kit.nn.init import check_init
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec
from kit.nn.pooling import AvgPool2D, GlobalAvgPool, MaxPool2D
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["AvgPool2D", "Conv2D", "GlobalAvgPool", "MaxPool2D"]

PER_EXAMPLE_MAX_WEIGHTS = 4096  # filter banks up to this many weights multiply per example


class Conv2D(Layer):
    """Cross-correlation of (B, C, H, W) with OC filters of C x k x k, plus a bias per filter.

    column_bytes (class-wide): the working memory one chunk's columns may take; a chunk is as many
    examples as fit (at least one). keep_columns (class-wide): in training, make the whole batch's
    columns as ACTIVATIONS and keep them for backward instead of building them again there, at the
    cost of their bytes (`kept_bytes`) for the rest of the iteration: None (the default) where they
    fit `column_bytes`, True up to keep_columns_max_bytes, False never."""

    output_read_by_backward = False  # backward reads x, W and eps
    replayable = True  # its arithmetic is kit.nn.image_kernels'
    keep_columns: ClassVar[bool | None] = None
    keep_columns_max_bytes: ClassVar[int] = 128 << 20
    column_bytes: ClassVar[int] = 8 << 20
    # on a GPU, where each chunk costs kernel launches, the batch of the d2l job (256) in one chunk
    column_bytes_gpu: ClassVar[int] = 512 << 20

    def __init__(self, out_channels: int, kernel: int, stride: int = 1, padding: int = 0, weight_init: str = "he"):
        super().__init__()
        self.out_channels = whole("Conv2D", "out_channels", out_channels, 1)
        self.kernel = whole("Conv2D", "kernel", kernel, 1)
        self.stride = whole("Conv2D", "stride", stride, 1)
        self.padding = whole("Conv2D", "padding", padding, 0)
        self.weight_init = check_init("Conv2D", weight_init)
        self.kept_bytes = 0  # bytes of columns kept from the last training forward
        self._cols: NDArray | None = None

    def config(self) -> dict[str, Any]:
        return {
            "type": "Conv2D",
            "out_channels": self.out_channels,
            "kernel": self.kernel,
            "stride": self.stride,
            "padding": self.padding,
            "weight_init": self.weight_init,
        }

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(
                f"Conv2D needs (batch, channels, height, width) inputs, got per-example shape {input_shape}"
            )
        _c, h, w = input_shape
        k, s, p = self.kernel, self.stride, self.padding
        return (self.out_channels, out_size(h, k, s, p, "Conv2D"), out_size(w, k, s, p, "Conv2D"))

    def param_specs(self) -> list[ParamSpec]:
        c = self.input_shape[0]  # type: ignore[index]
        k, oc = self.kernel, self.out_channels
        return [
            ParamSpec("W", (oc, c, k, k), self.weight_init, c * k * k, oc * k * k, regularize=True),
            ParamSpec("b", (oc,), "zeros"),
        ]

    def chunk(self, batch: int, itemsize: int, gpu: bool = False) -> int:
        """Examples per chunk: as many as keep the largest columns (the input's, or in backward
        eps's for the input gradient) within `column_bytes` (`column_bytes_gpu` on a GPU), at
        least one."""
        c, h, w = self.input_shape  # type: ignore[misc]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        k = self.kernel
        per_example = max(c * oh * ow, oc * h * w) * k * k * itemsize
        budget = self.column_bytes_gpu if gpu else self.column_bytes
        return max(1, min(batch, budget // per_example))

    @property
    def per_example(self) -> bool:
        """Small filter banks (LeNet's, ResNet's stem) multiply per example: OpenBLAS runs one
        (OC x C*k*k) @ (C*k*k x B*OH*OW) product with a tiny OC and C*k*k several times slower
        than B products of OH*OW columns each, and per example the results land in NCHW order
        with no transposing copies. Large banks use one product per chunk."""
        c = self.input_shape[0]  # type: ignore[index]
        return self.out_channels * c * self.kernel * self.kernel <= PER_EXAMPLE_MAX_WEIGHTS

    def geometry(self, step: int) -> ConvShape:
        """What conv2d_into needs besides the arrays, for chunks of `step` examples."""
        return ConvShape(self.kernel, self.stride, self.padding, step, self.per_example)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        dev, dt = x.device, x.dtype
        self._x = x if mgr.backward_follows else None  # inference keeps nothing of the batch
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        c, h, w = self.input_shape  # type: ignore[misc]
        k, p = self.kernel, self.padding
        size = c * k * k * b * oh * ow * dt.itemsize
        limit = self.column_bytes if self.keep_columns is None else self.keep_columns_max_bytes
        keep = training and mgr.backward_follows and self.keep_columns is not False and size <= limit
        kept = mgr.create(ACT, (c, k, k, b, oh, ow), dt, dev) if keep else None
        y = mgr.create(ACT, (b, oc, oh, ow), dt, dev)
        n = b if keep else self.chunk(b, dt.itemsize, dev.kind != "cpu")
        xpad = _flat(mgr, FF, (n, c, h + 2 * p, w + 2 * p), dt, dev) if p else None
        cols = kept.data if kept is not None else _flat(mgr, FF, (c, k, k, n, oh, ow), dt, dev)
        yt = None if self.per_example else _flat(mgr, FF, (oc, n * oh * ow), dt, dev)
        params = self.params
        conv2d_into(dev.xp, x.data, params["W"].data, params["b"].data, y.data, self.geometry(n), xpad, cols, yt)
        self._cols = kept
        self.kept_bytes = kept.nbytes if keep else 0
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        dev, dt = eps.device, eps.dtype
        x = self._x.data
        self._x = None  # used up: nothing of the batch stays with the layer after its backward
        kept, self._cols = self._cols, None
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        c, h, w = self.input_shape  # type: ignore[misc]
        k, p = self.kernel, self.padding
        e, gb = eps.data, self.grads["b"].data
        sums = channel_scratch_size(e.shape, e.dtype, gb.dtype, False)
        channel_sums_into(dev.xp, e, gb, _flat(mgr, BP, (sums,), gb.dtype, dev), False)  # eps per channel: the bias's
        dx = None if self.skip_input_grad else mgr.create(GRAD, x.shape, dt, dev)
        by_convolution = self.stride == 1 and (h, w) == (oh, ow)
        flipped = mgr.create(BP, (c, oc, k, k), dt, dev).data if dx is not None and by_convolution else None
        n = b if kept is not None else self.chunk(b, dt.itemsize, dev.kind != "cpu")
        xpad = _flat(mgr, BP, (n, c, h + 2 * p, w + 2 * p), dt, dev) if p and kept is None else None
        cols = kept.data if kept is not None else _flat(mgr, BP, (c, k, k, n, oh, ow), dt, dev)
        work = _flat(mgr, BP, (n, oc, c * k * k) if self.per_example else (oc, n, oh, ow), dt, dev)
        frame, gcols, dxt = self._input_grad_scratch(dx is not None, by_convolution, n, mgr, dt, dev)
        more = _flat(mgr, BP, (oc, c * k * k), dt, dev) if n < b else None
        gw = self.grads["W"].data
        conv2d_backward_into(
            dev.xp, x, e, self.params["W"].data, gw, None if dx is None else dx.data, self.geometry(n),
            cols, xpad, work, more, flipped, frame, gcols, dxt,
        )  # fmt: skip
        return dx

    def _input_grad_scratch(
        self, needed: bool, by_convolution: bool, n: int, mgr: LayerWorkspaceMgr, dt: np.dtype, dev: Device
    ) -> tuple[RawArray | None, RawArray | None, RawArray | None]:
        """The input gradient's working memory for chunks of n: (padded eps or the col2im target,
        its columns, the product before NCHW), None where the path needs none."""
        if not needed:
            return None, None, None
        c, h, w = self.input_shape  # type: ignore[misc]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        k, p, per_example = self.kernel, self.padding, self.per_example
        if by_convolution:
            q = k - 1 - p
            epad = _flat(mgr, BP, (n, oc, h + 2 * q, w + 2 * q), dt, dev) if k > 1 and q else None
            ecols = _flat(mgr, BP, (oc, k, k, n, h, w), dt, dev) if k > 1 else None
            dxt = None if per_example else _flat(mgr, BP, (c, n * h * w), dt, dev)
            return epad, ecols, dxt
        dcols = _flat(mgr, BP, (c, k, k, n, oh, ow), dt, dev)
        target = _flat(mgr, BP, (n, c, h + 2 * p, w + 2 * p), dt, dev) if p or not per_example else None
        return target, dcols, None


def _flat(mgr: LayerWorkspaceMgr, kind: ArrayType, shape: tuple[int, ...], dt: np.dtype, dev: Device) -> RawArray:
    """Flat working memory for an array of `shape` (a kernel views its first chunk's prefix)."""
    return mgr.create(kind, (math.prod(shape),), dt, dev).data
