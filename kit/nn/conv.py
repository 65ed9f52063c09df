"""Convolution (with pooling, re-exported: ResNet-18's and LeNet's spatial parts).

    Conv2D(64, 3, padding=1)      (B, C, H, W) -> (B, 64, H, W)     im2col + matrix products
    MaxPool2D(2), AvgPool2D(2)    (B, C, H, W) -> (B, C, H/2, W/2)
    GlobalAvgPool()               (B, C, H, W) -> (B, C)

BatchNorm is in kit/nn/batchnorm.py (with the per-channel sums Conv2D shares), d2l's residual
block in kit/nn/residual.py.

Conv2D: one strided copy turns every k x k window of the padded input into the columns of a
(C*k*k, B*OH*OW) matrix (kit/nn/im2col.py says why this layout); the convolution is then a
matrix product, or one per example for small filter banks. The columns are k*k times the input,
so Conv2D builds them a chunk of examples at a time, in working memory of about
`Conv2D.column_bytes` (more on a GPU, where each chunk costs kernel launches), and builds them
again in backward (DL4J's ConvolutionLayer does the same): what the layer keeps for backward is
its input, which is the previous layer's output anyway. Columns that fit one chunk whole (a small
layer's: LeNet's, ResNet's stem) are kept for backward instead, as ACTIVATIONS (their bytes are
`kept_bytes`): building them again cost LeNet's step 12 % of its time for a few MiB.
`Conv2D.keep_columns` chooses: None (that rule, the default), False (always rebuilt, as DL4J),
True (always kept, up to `keep_columns_max_bytes`). The input gradient of a stride-1
'same' convolution is itself a convolution (of eps with the turned filters); other strides and
paddings add each window's column back (col2im).

The pooling layers live in kit/nn/pooling.py and are re-exported here.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from kit.arrays.checks import whole
from kit.arrays.ndarray import NDArray
from kit.nn.batchnorm import channel_sums
from kit.nn.im2col import col2im_add, im2col_into, out_size, pad_into
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec
from kit.nn.pooling import AvgPool2D, GlobalAvgPool, MaxPool2D
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["AvgPool2D", "Conv2D", "GlobalAvgPool", "MaxPool2D"]

PER_EXAMPLE_MAX_WEIGHTS = 4096  # filter banks up to this many weights multiply per example


class Scratch:
    """The working arrays of one layer call, made once (for the first, largest chunk) and viewed
    for each later chunk: a chunk loop inside one working-memory scope carves each array once,
    not once per chunk."""

    def __init__(self, mgr: LayerWorkspaceMgr, kind: Any, dtype: Any, device: Any) -> None:
        self.mgr, self.kind, self.dtype, self.device = mgr, kind, dtype, device
        self.flat: dict[str, Any] = {}

    def get(self, name: str, shape: tuple[int, ...]) -> Any:
        size = math.prod(shape)
        flat = self.flat.get(name)
        if flat is None or flat.size < size:
            flat = self.flat[name] = self.mgr.create(self.kind, (size,), self.dtype, self.device).data
        return flat[:size].reshape(shape)


class Conv2D(Layer):
    """Cross-correlation of (B, C, H, W) with OC filters of C x k x k, plus a bias per filter.

    column_bytes (class-wide): the working memory one chunk's columns may take; a chunk is as many
    examples as fit (at least one). keep_columns (class-wide): in training, make the whole batch's
    columns as ACTIVATIONS and keep them for backward instead of building them again there, at the
    cost of their bytes (`kept_bytes`) for the rest of the iteration: None (the default) where they
    fit `column_bytes`, True up to keep_columns_max_bytes, False never."""

    output_read_by_backward = False  # backward reads x, W and eps
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
        self.weight_init = weight_init
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

    def _columns(self, x: Any, xp: Any, scratch: Scratch, cols: Any = None) -> Any:
        """The (C*k*k, n*OH*OW) im2col matrix of x (n, C, H, W), in `cols` or scratch."""
        n = x.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        _, oh, ow = self.output_shape  # type: ignore[misc]
        k, p = self.kernel, self.padding
        xpad = pad_into(x, p, 0.0, scratch.get("xpad", (n, c, h + 2 * p, w + 2 * p))) if p else x
        out = cols if cols is not None else scratch.get("cols", (c, k, k, n, oh, ow))
        return im2col_into(xp, xpad, k, self.stride, oh, ow, out)

    @property
    def per_example(self) -> bool:
        """Small filter banks (LeNet's, ResNet's stem) multiply per example: OpenBLAS runs one
        (OC x C*k*k) @ (C*k*k x B*OH*OW) product with a tiny OC and C*k*k several times slower
        than B products of OH*OW columns each, and per example the results land in NCHW order
        with no transposing copies. Large banks use one product per chunk."""
        c = self.input_shape[0]  # type: ignore[index]
        return self.out_channels * c * self.kernel * self.kernel <= PER_EXAMPLE_MAX_WEIGHTS

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev, raw = x.device.xp, x.device, x.data
        self._x = x if mgr.backward_follows else None  # inference keeps nothing of the batch
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        c, k = self.input_shape[0], self.kernel  # type: ignore[index]
        size = c * k * k * b * oh * ow * x.dtype.itemsize
        limit = self.column_bytes if self.keep_columns is None else self.keep_columns_max_bytes
        keep = training and mgr.backward_follows and self.keep_columns is not False and size <= limit
        scratch = Scratch(mgr, FF, x.dtype, dev)
        kept_arr = mgr.create(ACT, (c, k, k, b, oh, ow), x.dtype, dev) if keep else None
        kept = None if kept_arr is None else kept_arr.data
        w2 = self.params["W"].data.reshape(oc, -1)  # (OC, C*k*k)
        bias = self.params["b"].data.reshape(1, oc, 1, 1)
        y = mgr.create(ACT, (b, oc, oh, ow), x.dtype, dev)
        step = b if keep else self.chunk(b, x.dtype.itemsize, dev.kind != "cpu")
        for s0 in range(0, b, step):
            n = min(step, b - s0)
            cols = self._columns(raw[s0 : s0 + n], xp, scratch, kept)  # (C*k*k, n*OH*OW)
            out = y.data[s0 : s0 + n]
            if self.per_example:  # (OC, Ckk) @ (Ckk, OH*OW) for each example, straight into y
                xp.matmul(w2, cols.reshape(-1, n, oh * ow).transpose(1, 0, 2), out=out.reshape(n, oc, -1))
                out += bias
            else:
                yt = scratch.get("yt", (oc, n * oh * ow))
                xp.matmul(w2, cols, out=yt)  # one product for the chunk
                xp.add(yt.reshape(oc, n, oh, ow).transpose(1, 0, 2, 3), bias, out=out)  # back to NCHW, + bias
        self._cols = kept_arr.reshape(c * k * k, -1) if kept_arr is not None else None
        self.kept_bytes = kept.nbytes if keep else 0
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        xp, dev, dt = eps.device.xp, eps.device, eps.dtype
        x = self._x.data
        self._x = None  # used up: nothing of the batch stays with the layer after its backward
        kept = self._cols.data if self._cols is not None else None  # (C*k*k, B*OH*OW)
        self._cols = None
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        scratch = Scratch(mgr, BP, dt, dev)
        e_all = eps.data
        channel_sums(e_all, self.grads["b"].data, mgr, BP, dev)  # the bias gradient: eps summed per channel
        gw = self.grads["W"].data.reshape(oc, -1)
        dx = None if self.skip_input_grad else mgr.create(GRAD, x.shape, dt, dev)
        _c, h, w = self.input_shape  # type: ignore[misc]
        by_convolution = self.stride == 1 and (h, w) == (oh, ow)
        flipped = self._turned_filters(xp, mgr, dev, dt) if dx is not None and by_convolution else None
        step = b if kept is not None else self.chunk(b, dt.itemsize, dev.kind != "cpu")
        for s0 in range(0, b, step):
            n = min(step, b - s0)
            if kept is not None:
                cols = kept
            else:
                cols = self._columns(x[s0 : s0 + n], xp, scratch)
            into = gw if s0 == 0 else scratch.get("gw", gw.shape)  # later chunks add their share
            if self.per_example:  # eps stays NCHW: (n, OC, OH*OW)
                e = e_all[s0 : s0 + n].reshape(n, oc, oh * ow)
                per = scratch.get("per", (n, *gw.shape))  # each example's weight gradient
                xp.matmul(e, cols.reshape(-1, n, oh * ow).transpose(1, 2, 0), out=per)
                xp.sum(per, axis=0, out=into)
            else:  # eps channel-major like the columns: (OC, n*OH*OW)
                e = scratch.get("e", (oc, n, oh, ow))
                xp.copyto(e, e_all[s0 : s0 + n].transpose(1, 0, 2, 3))
                e = e.reshape(oc, -1)
                xp.matmul(e, cols.T, out=into)
            if s0:
                gw += into
            if dx is not None:
                if by_convolution:
                    self._input_grad_by_convolution(e, dx.data[s0 : s0 + n], flipped, scratch, dev)
                else:
                    self._input_grad_by_col2im(e, dx.data[s0 : s0 + n], scratch, dev)
        return dx

    def _turned_filters(self, xp: Any, mgr: LayerWorkspaceMgr, dev: Any, dt: Any) -> Any:
        """The filters turned 180 degrees with in/out channels swapped, (C, OC*k*k): the input
        gradient of a stride-1 'same' convolution is eps convolved with them."""
        c, oc, k = self.input_shape[0], self.out_channels, self.kernel  # type: ignore[index]
        flipped = mgr.create(BP, (c, oc, k, k), dt, dev).data
        xp.copyto(flipped, self.params["W"].data.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        return flipped.reshape(c, -1)

    def _input_grad_by_convolution(self, e: Any, dx: Any, flipped: Any, scratch: Scratch, dev: Any) -> None:
        """Stride 1, 'same' size: dx is eps (padded by k-1-p) convolved with the filters turned
        180 degrees and with in/out channels swapped -- one more im2col and one product, with no
        k*k read-modify-write passes over dx. e: (n, OC, OH*OW) per example, else (OC, n*OH*OW)."""
        xp = dev.xp
        b = dx.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        oc = self.out_channels
        k, q = self.kernel, self.kernel - 1 - self.padding
        per_example = self.per_example
        if k == 1:  # a 1x1 convolution's columns of eps are eps itself
            ecols = e if per_example else e.reshape(oc, -1)
        else:
            # eps as 4-D images, (B, OC, H, W) per example or (OC, B, H, W), padded by q
            img = e.reshape(b, oc, h, w) if per_example else e.reshape(oc, b, h, w)
            frame = (img.shape[0], img.shape[1], h + 2 * q, w + 2 * q)
            epad = pad_into(img, q, 0.0, scratch.get("epad", frame)) if q else img
            buf = scratch.get("ecols", (oc, k, k, b, h, w))
            ecols = im2col_into(xp, epad, k, 1, h, w, buf, batch_axis=0 if per_example else 1)  # (OC*k*k, B*H*W)
            if per_example:
                ecols = ecols.reshape(-1, b, h * w).transpose(1, 0, 2)  # (B, OC*k*k, H*W)
        if per_example:
            xp.matmul(flipped, ecols, out=dx.reshape(b, c, -1))
            return
        dxt = scratch.get("dxt", (c, b * h * w))
        xp.matmul(flipped, ecols, out=dxt)
        xp.copyto(dx, dxt.reshape(c, b, h, w).transpose(1, 0, 2, 3))

    def _input_grad_by_col2im(self, e: Any, dx: Any, scratch: Scratch, dev: Any) -> None:
        """dcols = W^T eps, then each window's column added back to its pixels (col2im)."""
        xp = dev.xp
        b = dx.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        k, s, p = self.kernel, self.stride, self.padding
        w2t = self.params["W"].data.reshape(oc, -1).T
        if self.per_example:  # (B, C, k, k, OH, OW) columns, added into (B, C, Hp, Wp)
            dcols = scratch.get("dcols", (b, c, k, k, oh, ow))
            xp.matmul(w2t, e, out=dcols.reshape(b, c * k * k, -1))
            dcols = dcols.transpose(1, 2, 3, 0, 4, 5)
            target = scratch.get("target", (b, c, h + 2 * p, w + 2 * p)) if p else dx
            target.fill(0)
            col2im_add(dcols, s, target.transpose(1, 0, 2, 3))
            if p:
                xp.copyto(dx, target[:, :, p : p + h, p : p + w])
            return
        dcols = scratch.get("dcols", (c, k, k, b, oh, ow))  # channel-major
        xp.matmul(w2t, e, out=dcols.reshape(c * k * k, -1))
        target = scratch.get("target", (c, b, h + 2 * p, w + 2 * p))
        target.fill(0)
        col2im_add(dcols, s, target)
        xp.copyto(dx, target[:, :, p : p + h, p : p + w].transpose(1, 0, 2, 3))
