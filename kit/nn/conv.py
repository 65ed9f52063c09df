"""Convolution, pooling, batch normalisation and the residual block (ResNet-18's parts).

    Conv2D(64, 3, padding=1)      (B, C, H, W) -> (B, 64, H, W)     im2col + matrix products
    MaxPool2D(2), AvgPool2D(2)    (B, C, H, W) -> (B, C, H/2, W/2)
    GlobalAvgPool()               (B, C, H, W) -> (B, C)
    BatchNorm()                   (B, F) or (B, C, H, W), batch statistics in training
    Residual(128, use_1x1conv=True, stride=2)   d2l's block: two 3x3 convs + shortcut

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

import numpy as np

from kit.ndarray import NDArray
from kit.nn.activations import ReLU, relu_grad_into
from kit.nn.im2col import col2im_add, im2col_into, out_size, pad_into
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec, call_backward, call_forward
from kit.nn.pooling import AvgPool2D, GlobalAvgPool, MaxPool2D
from kit.nn.workspace_mgr import LayerWorkspaceMgr
from kit.shapes import accumulator

__all__ = ["AvgPool2D", "BatchNorm", "Conv2D", "GlobalAvgPool", "MaxPool2D", "Residual"]

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
            _channel_sums(eps.data, self.grads["b"].data, mgr, BP, dev)
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


def _channel_sums(a: Any, out: Any, mgr: LayerWorkspaceMgr, kind: Any, device: Any, squares: bool = False) -> None:
    """out (C,) = the sum of a (B, C[, H, W]) over everything but the channel axis (of a*a
    with squares=True), added in `out`'s dtype (float32 for float16 data: a float16 sum of
    squares overflowed and BatchNorm's variance became inf). For images: one matrix-vector
    product per channel row, which runs at memory speed, where a reduction over the axes
    (0, 2, 3) does not."""
    xp = device.xp
    if a.dtype != out.dtype:  # float16 data, float32 statistics: work on a float32 copy
        wide = mgr.create(kind, a.shape, out.dtype, device).data
        xp.copyto(wide, a)
        a = wide
    if a.ndim == 2:
        if squares:
            sq = mgr.create(kind, a.shape, a.dtype, device).data
            xp.multiply(a, a, out=sq)
            a = sq
        if xp is np:
            xp.sum(a, axis=0, out=out)
        else:  # CuPy: reduce into its pool, then copy (see NDArray._reduce)
            out[...] = a.sum(axis=0)
        return
    b, c = a.shape[:2]
    rows = a.reshape(b * c, -1)  # (B*C, H*W)
    per_row = mgr.create(kind, (b * c,), a.dtype, device).data
    if squares:  # row . row for every row, as a batch of (1, HW) @ (HW, 1) products
        xp.matmul(rows[:, None, :], rows[:, :, None], out=per_row.reshape(b * c, 1, 1))
    else:
        ones = mgr.create(kind, (rows.shape[1],), a.dtype, device).data
        ones.fill(1)
        xp.matmul(rows, ones, out=per_row)
    if xp is np:
        xp.sum(per_row.reshape(b, c), axis=0, out=out)
    else:
        out[...] = per_row.reshape(b, c).sum(axis=0)


class BatchNorm(Layer):
    """Batch normalisation over the batch (and spatial) axes; DL4J's defaults decay 0.9, eps 1e-5.
    Training uses batch statistics and updates the running ones; evaluation uses the running ones."""

    def __init__(self, decay: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        if not 0.0 <= decay < 1.0 or eps <= 0:
            raise ValueError(f"BatchNorm(decay={decay!r}, eps={eps!r}): decay in [0, 1), eps > 0")
        self.decay, self.eps = decay, eps

    def config(self) -> dict[str, Any]:
        return {"type": "BatchNorm", "decay": self.decay, "eps": self.eps}

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) not in (1, 3):
            raise ValueError(f"BatchNorm needs (batch, F) or (batch, C, H, W) inputs, got per-example {input_shape}")
        return input_shape

    def param_specs(self) -> list[ParamSpec]:
        c = self.input_shape[0]  # type: ignore[index]
        return [
            ParamSpec("gamma", (c,), "ones"),
            ParamSpec("beta", (c,), "zeros"),
            ParamSpec("mean", (c,), "zeros", trainable=False),
            ParamSpec("var", (c,), "ones", trainable=False),
        ]

    def _axes_and_view(self, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        c = self.input_shape[0]  # type: ignore[index]
        return ((0,), (1, c)) if ndim == 2 else ((0, 2, 3), (1, c, 1, 1))

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev, d = x.device.xp, x.device, x.data
        _axes, view = self._axes_and_view(d.ndim)
        c = view[1]
        n = d.size // c
        self._training = training
        acc = accumulator(d.dtype)  # statistics of float16 data in float32
        kept = ACT if mgr.backward_follows else FF  # what only a backward reads: working memory in inference
        stat = mgr.create(kept, (2, c), acc, dev).data  # [mean, 1/std] kept for backward
        mean, inv_std = stat[0], stat[1]
        xhat = mgr.create(kept, d.shape, d.dtype, dev).data
        if training:
            _channel_sums(d, mean, mgr, FF, dev)
            mean *= 1.0 / n
            xp.subtract(d, mean.reshape(view), out=xhat)
            var = mgr.create(FF, (c,), acc, dev).data
            if acc == d.dtype:
                _channel_sums(xhat, var, mgr, FF, dev, squares=True)
            else:  # the centred data in float32, so its squares neither overflow nor lose the small ones
                centred = mgr.create(FF, d.shape, acc, dev).data
                xp.subtract(d, mean.reshape(view), out=centred)
                _channel_sums(centred, var, mgr, FF, dev, squares=True)
            var *= 1.0 / n  # biased batch variance, no hidden temporaries
            tmp = mgr.create(FF, (c,), acc, dev).data
            for running, batch in ((self.params["mean"].data, mean), (self.params["var"].data, var)):
                running *= self.decay
                xp.multiply(batch, 1 - self.decay, out=tmp)
                running += tmp
        else:
            xp.copyto(mean, self.params["mean"].data)
            xp.subtract(d, mean.reshape(view), out=xhat)
            var = self.params["var"].data
        xp.add(var, self.eps, out=inv_std)
        xp.sqrt(inv_std, out=inv_std)
        xp.divide(1, inv_std, out=inv_std)
        xhat *= inv_std.reshape(view)
        self._xhat, self._stat = (xhat, stat) if mgr.backward_follows else (None, None)
        y = mgr.create(ACT, d.shape, d.dtype, dev)
        xp.multiply(xhat, self.params["gamma"].data.reshape(view), out=y.data)
        y.data += self.params["beta"].data.reshape(view)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev, e = eps.device.xp, eps.device, eps.data
        _axes, view = self._axes_and_view(e.ndim)
        xhat, inv_std = self._xhat, self._stat[1]
        self._xhat = self._stat = None  # used up
        t = mgr.create(BP, e.shape, e.dtype, dev).data
        xp.multiply(e, xhat, out=t)
        d_gamma, d_beta = self.grads["gamma"].data, self.grads["beta"].data
        _channel_sums(t, d_gamma, mgr, BP, dev)  # sum(eps * xhat)
        _channel_sums(e, d_beta, mgr, BP, dev)  # sum(eps)
        self.grads["mean"].data.fill(0)
        self.grads["var"].data.fill(0)
        dx = mgr.create(GRAD, e.shape, e.dtype, dev)
        g = self.params["gamma"].data.reshape(view)
        scale = mgr.create(BP, view, e.dtype, dev).data
        xp.multiply(g, inv_std.reshape(view), out=scale)  # gamma / std
        if not self._training:  # statistics are constants: dx = eps * gamma / std
            xp.multiply(e, scale, out=dx.data)
            return dx
        n = e.size // view[1]
        # dx = gamma/std * (eps - mean(eps) - xhat * mean(eps * xhat)); the two sums are the
        # parameter gradients just computed
        m1 = mgr.create(BP, view, e.dtype, dev).data
        m2 = mgr.create(BP, view, e.dtype, dev).data
        xp.multiply(d_beta.reshape(view), 1.0 / n, out=m1)
        xp.multiply(d_gamma.reshape(view), 1.0 / n, out=m2)
        xp.multiply(xhat, m2, out=dx.data)
        xp.subtract(e, dx.data, out=dx.data)
        dx.data -= m1
        dx.data *= scale
        return dx


class Residual(Layer):
    """d2l's residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with a 1x1
    convolution on the shortcut when the shape changes (use_1x1conv)."""

    def __init__(self, channels: int, use_1x1conv: bool = False, stride: int = 1, weight_init: str = "he") -> None:
        super().__init__()
        self.channels, self.use_1x1conv, self.stride = channels, use_1x1conv, stride
        self.weight_init = weight_init
        self.main = [
            Conv2D(channels, 3, stride=stride, padding=1, weight_init=weight_init),
            BatchNorm(),
            ReLU(),
            Conv2D(channels, 3, padding=1, weight_init=weight_init),
            BatchNorm(),
        ]
        self.shortcut = [Conv2D(channels, 1, stride=stride, weight_init=weight_init)] if use_1x1conv else []

    def config(self) -> dict[str, Any]:
        cfg = {"type": "Residual", "channels": self.channels, "use_1x1conv": self.use_1x1conv, "stride": self.stride}
        if self.weight_init != "he":  # files written before the argument existed stay readable
            cfg["weight_init"] = self.weight_init
        return cfg

    def sublayers(self) -> list[Layer]:
        return self.main + self.shortcut

    def build(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        self.input_shape = tuple(input_shape)
        shape = self.input_shape
        for layer in self.main:
            shape = layer.build(shape)
        short = self.shortcut[0].build(self.input_shape) if self.shortcut else self.input_shape
        if short != shape:
            raise ValueError(
                f"Residual({self.channels}, stride={self.stride}): the main path gives {shape} but the "
                f"shortcut gives {short}; use use_1x1conv=True when channels or stride change"
            )
        self.output_shape = shape
        return shape

    plan_replay = True  # forward takes every array from mgr: a plan may replay it (kit.nn.plan)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        xp = x.device.xp
        h = x
        for layer in self.main:
            h = call_forward(layer, h, mgr, training)
        s = call_forward(self.shortcut[0], x, mgr, training) if self.shortcut else x
        y = mgr.create(ACT, h.shape, h.dtype, h.device)
        xp.add(h.data, s.data, out=y.data)
        xp.maximum(y.data, 0, out=y.data)
        self._y = y if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev = eps.device.xp, eps.device
        g = mgr.create(GRAD, eps.shape, eps.dtype, dev)  # eps through the final ReLU
        with mgr.layer_call():  # a composite's own working memory gets its own scope
            relu_grad_into(eps, self._y, g, mgr)
        self._y = None  # used up
        d = g
        for layer in reversed(self.main):
            d = call_backward(layer, d, mgr)
        ds = call_backward(self.shortcut[0], g, mgr) if self.shortcut else g
        dx = mgr.create(GRAD, d.shape, d.dtype, dev)
        xp.add(d.data, ds.data, out=dx.data)
        return dx
