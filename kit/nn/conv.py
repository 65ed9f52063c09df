"""Convolution (with pooling, re-exported: ResNet-18's and LeNet's spatial parts).

    Conv2D(64, 3, padding=1)      (B, C, H, W) -> (B, 64, H, W)     im2col + matrix products
    MaxPool2D(2), AvgPool2D(2)    (B, C, H, W) -> (B, C, H/2, W/2)
    GlobalAvgPool()               (B, C, H, W) -> (B, C)

BatchNorm is in kit/nn/batchnorm.py (with the per-channel sums Conv2D's bias gradient shares),
d2l's residual block in kit/nn/residual.py.

Conv2D: one strided copy turns every k x k window of the padded input into the columns of a
(C*k*k, B*OH*OW) matrix (kit/nn/im2col.py says why this layout); the convolution is then one
matrix product for the batch, or one per example for small filter banks. In training the
matrix is made as ACTIVATIONS and kept for backward (Conv2D.keep_columns; its bytes are
`kept_bytes`), so backward does not build it again. The input gradient of a stride-1 'same'
convolution is itself a convolution (of eps with the turned filters); other strides and
paddings add each window's column back (col2im).

The pooling layers live in kit/nn/pooling.py and are re-exported here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kit.ndarray import NDArray
from kit.nn.batchnorm import channel_sums
from kit.nn.im2col import col2im_add, im2col_into, out_size, pad_into
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec
from kit.nn.pooling import AvgPool2D, GlobalAvgPool, MaxPool2D
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["AvgPool2D", "Conv2D", "GlobalAvgPool", "MaxPool2D"]

PER_EXAMPLE_MAX_WEIGHTS = 4096  # filter banks up to this many weights multiply per example


class Conv2D(Layer):
    """Cross-correlation of (B, C, H, W) with OC filters of C x k x k, plus a bias per filter.

    keep_columns (class-wide, default True): in training, the im2col matrix built in forward is
    made as ACTIVATIONS and kept for backward instead of being rebuilt there. It then survives
    SEPARATE's per-layer reset of working memory, at the cost of its bytes (`kept_bytes`) for
    the rest of the iteration. Columns larger than keep_columns_max_bytes (a layer) are rebuilt
    in backward instead, as they all are with keep_columns = False."""

    keep_columns: ClassVar[bool] = True
    keep_columns_max_bytes: ClassVar[int] = 128 << 20

    def __init__(self, out_channels: int, kernel: int, stride: int = 1, padding: int = 0, weight_init: str = "he"):
        super().__init__()
        for name, v, low in (("out_channels", out_channels, 1), ("kernel", kernel, 1), ("stride", stride, 1)):
            if not isinstance(v, int) or v < low:
                raise ValueError(f"Conv2D({name}={v!r}): must be an integer >= {low}")
        if not isinstance(padding, int) or padding < 0:
            raise ValueError(f"Conv2D(padding={padding!r}): must be an integer >= 0")
        self.out_channels, self.kernel, self.stride, self.padding = out_channels, kernel, stride, padding
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

    def _columns(self, x: Any, xp: Any, mgr: LayerWorkspaceMgr, kind: Any, device: Any) -> NDArray:
        """The (C*k*k, B*OH*OW) im2col matrix of x (B, C, H, W), made as `kind`."""
        b = x.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        _, oh, ow = self.output_shape  # type: ignore[misc]
        k, p = self.kernel, self.padding
        xpad = pad_into(x, p, 0.0, mgr.create(FF, (b, c, h + 2 * p, w + 2 * p), x.dtype, device).data) if p else x
        cols = mgr.create(kind, (c, k, k, b, oh, ow), x.dtype, device)
        im2col_into(xp, xpad, k, self.stride, oh, ow, cols.data)
        return cols.reshape(c * k * k, b * oh * ow)

    @property
    def per_example(self) -> bool:
        """Small filter banks (LeNet's, ResNet's stem) multiply per example: OpenBLAS runs one
        (OC x C*k*k) @ (C*k*k x B*OH*OW) product with a tiny OC and C*k*k several times slower
        than B products of OH*OW columns each, and per example the results land in NCHW order
        with no transposing copies. Large banks use one product for the batch."""
        c = self.input_shape[0]  # type: ignore[index]
        return self.out_channels * c * self.kernel * self.kernel <= PER_EXAMPLE_MAX_WEIGHTS

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev = x.device.xp, x.device
        self._x = x if mgr.backward_follows else None  # inference keeps nothing of the batch
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        c, k = self.input_shape[0], self.kernel  # type: ignore[index]
        size = c * k * k * b * oh * ow * x.dtype.itemsize
        keep = training and mgr.backward_follows and self.keep_columns and size <= self.keep_columns_max_bytes
        cols = self._columns(x.data, xp, mgr, ACT if keep else FF, dev)  # (C*k*k, B*OH*OW)
        self._cols, self.kept_bytes = (cols, cols.data.nbytes) if keep else (None, 0)
        w2 = self.params["W"].data.reshape(oc, -1)  # (OC, C*k*k)
        bias = self.params["b"].data.reshape(1, oc, 1, 1)
        y = mgr.create(ACT, (b, oc, oh, ow), x.dtype, dev)
        if self.per_example:  # (OC, Ckk) @ (Ckk, OH*OW) for each example, straight into y
            xp.matmul(w2, cols.data.reshape(-1, b, oh * ow).transpose(1, 0, 2), out=y.data.reshape(b, oc, -1))
            y.data += bias
            return y
        yt = mgr.create(FF, (oc, b * oh * ow), x.dtype, dev).data
        xp.matmul(w2, cols.data, out=yt)  # one product for the batch
        xp.add(yt.reshape(oc, b, oh, ow).transpose(1, 0, 2, 3), bias, out=y.data)  # back to NCHW, + bias
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        xp, dev, dt = eps.device.xp, eps.device, eps.dtype
        x = self._x.data
        self._x = None  # used up: nothing of the batch stays with the layer after its backward
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        cols = (self._cols if self._cols is not None else self._columns(x, xp, mgr, BP, dev)).data
        self._cols = None
        gw = self.grads["W"].data.reshape(oc, -1)
        if self.per_example:  # eps stays NCHW: (B, OC, OH*OW)
            e = eps.data.reshape(b, oc, oh * ow)
            per = mgr.create(BP, (b, *gw.shape), dt, dev).data  # each example's weight gradient
            xp.matmul(e, cols.reshape(-1, b, oh * ow).transpose(1, 2, 0), out=per)
            xp.sum(per, axis=0, out=gw)
            channel_sums(eps.data, self.grads["b"].data, mgr, BP, dev)
        else:  # eps channel-major like the columns: (OC, B*OH*OW)
            e = mgr.create(BP, (oc, b, oh, ow), dt, dev).data
            xp.copyto(e, eps.data.transpose(1, 0, 2, 3))
            e = e.reshape(oc, -1)
            xp.sum(e, axis=1, out=self.grads["b"].data)
            xp.matmul(e, cols.T, out=gw)
        if self.skip_input_grad:
            return None
        dx = mgr.create(GRAD, x.shape, dt, dev)
        _c, h, w = self.input_shape  # type: ignore[misc]
        if self.stride == 1 and (h, w) == (oh, ow):
            self._input_grad_by_convolution(e, dx.data, mgr, dev)
        else:
            self._input_grad_by_col2im(e, dx.data, mgr, dev)
        return dx

    def _input_grad_by_convolution(self, e: Any, dx: Any, mgr: LayerWorkspaceMgr, dev: Any) -> None:
        """Stride 1, 'same' size: dx is eps (padded by k-1-p) convolved with the filters turned
        180 degrees and with in/out channels swapped -- one more im2col and one product, with no
        k*k read-modify-write passes over dx. e: (B, OC, OH*OW) per example, else (OC, B*OH*OW)."""
        xp, dt = dev.xp, e.dtype
        b = dx.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        oc = self.out_channels
        k, q = self.kernel, self.kernel - 1 - self.padding
        per_example = self.per_example
        flipped = mgr.create(BP, (c, oc, k, k), dt, dev).data
        xp.copyto(flipped, self.params["W"].data.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        flipped = flipped.reshape(c, -1)
        if k == 1:  # a 1x1 convolution's columns of eps are eps itself
            ecols = e if per_example else e.reshape(oc, -1)
        else:
            # eps as 4-D images, (B, OC, H, W) per example or (OC, B, H, W), padded by q
            img = e.reshape(b, oc, h, w) if per_example else e.reshape(oc, b, h, w)
            frame = (img.shape[0], img.shape[1], h + 2 * q, w + 2 * q)
            epad = pad_into(img, q, 0.0, mgr.create(BP, frame, dt, dev).data) if q else img
            buf = mgr.create(BP, (oc, k, k, b, h, w), dt, dev).data
            ecols = im2col_into(xp, epad, k, 1, h, w, buf, batch_axis=0 if per_example else 1)  # (OC*k*k, B*H*W)
            if per_example:
                ecols = ecols.reshape(-1, b, h * w).transpose(1, 0, 2)  # (B, OC*k*k, H*W)
        if per_example:
            xp.matmul(flipped, ecols, out=dx.reshape(b, c, -1))
            return
        dxt = mgr.create(BP, (c, b * h * w), dt, dev).data
        xp.matmul(flipped, ecols, out=dxt)
        xp.copyto(dx, dxt.reshape(c, b, h, w).transpose(1, 0, 2, 3))

    def _input_grad_by_col2im(self, e: Any, dx: Any, mgr: LayerWorkspaceMgr, dev: Any) -> None:
        """dcols = W^T eps, then each window's column added back to its pixels (col2im)."""
        xp, dt = dev.xp, e.dtype
        b = dx.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        k, s, p = self.kernel, self.stride, self.padding
        w2t = self.params["W"].data.reshape(oc, -1).T
        if self.per_example:  # (B, C, k, k, OH, OW) columns, added into (B, C, Hp, Wp)
            dcols = mgr.create(BP, (b, c, k, k, oh, ow), dt, dev).data
            xp.matmul(w2t, e, out=dcols.reshape(b, c * k * k, -1))
            dcols = dcols.transpose(1, 2, 3, 0, 4, 5)
            target = mgr.create(BP, (b, c, h + 2 * p, w + 2 * p), dt, dev).data if p else dx
            target.fill(0)
            col2im_add(dcols, s, target.transpose(1, 0, 2, 3))
            if p:
                xp.copyto(dx, target[:, :, p : p + h, p : p + w])
            return
        dcols = mgr.create(BP, (c, k, k, b, oh, ow), dt, dev).data  # channel-major
        xp.matmul(w2t, e, out=dcols.reshape(c * k * k, -1))
        target = mgr.create(BP, (c, b, h + 2 * p, w + 2 * p), dt, dev).data
        target.fill(0)
        col2im_add(dcols, s, target)
        xp.copyto(dx, target[:, :, p : p + h, p : p + w].transpose(1, 0, 2, 3))
