"""Batch normalisation, and the per-channel sums it (and Conv2D's bias gradient) takes.

BatchNorm()                   (B, F) or (B, C, H, W), batch statistics in training

>>> import numpy as np
>>> from kit.nn import BatchNorm, Dense, Network
>>> net = Network([Dense(4), BatchNorm()], input_shape=(3,))
>>> out = net.output(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> out.shape
(2, 4)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kit.arrays.checks import real
from kit.arrays.ndarray import NDArray
from kit.core.shapes import accumulator
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["BatchNorm", "channel_sums"]


def channel_sums(a: Any, out: Any, mgr: LayerWorkspaceMgr, kind: Any, device: Any, squares: bool = False) -> None:
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
    Training uses batch statistics and updates the running ones; evaluation uses the running ones.
    For backward it keeps its input and the per-channel [mean, 1/std]; the normalised input is
    made again in backward's working memory (one more pass over the input, and one array fewer
    kept per layer)."""

    output_read_by_backward = False

    def __init__(self, decay: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        self.decay = real("BatchNorm", "decay", decay, 0, 1, high_open=True)
        self.eps = real("BatchNorm", "eps", eps, low=0, low_open=True)

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

    def check_training_batch(self, batch: int, index: int) -> None:
        """Batch statistics need more than one value per channel (PyTorch: "Expected more than 1
        value per channel when training"): with one, the variance is 0, every gradient below is 0
        and the running variance decays towards 0."""
        per_channel = batch * math.prod(self.input_shape[1:])  # type: ignore[index]
        if per_channel < 2:
            raise ValueError(
                f"BatchNorm (layer {index}) trains on batch statistics, and a batch of {batch} example(s) gives it "
                f"{per_channel} value per channel (per-example shape {self.input_shape}): its variance would be 0 and "
                "every gradient below it 0. Train with batches of 2 or more examples; "
                "ArrayIterator(data, batch_size, drop_last=True) leaves out a last batch of one"
            )

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
        xhat = mgr.create(FF, d.shape, d.dtype, dev).data  # backward makes it again from x and the statistics
        if training:
            channel_sums(d, mean, mgr, FF, dev)
            mean *= 1.0 / n
            xp.subtract(d, mean.reshape(view), out=xhat)
            var = mgr.create(FF, (c,), acc, dev).data
            if acc == d.dtype:
                channel_sums(xhat, var, mgr, FF, dev, squares=True)
            else:  # the centred data in float32, so its squares neither overflow nor lose the small ones
                centred = mgr.create(FF, d.shape, acc, dev).data
                xp.subtract(d, mean.reshape(view), out=centred)
                channel_sums(centred, var, mgr, FF, dev, squares=True)
            var *= 1.0 / n  # biased batch variance, no hidden temporaries
            tmp = mgr.create(FF, (c,), acc, dev).data
            for running, batch in ((self.params["mean"].data, mean), (self.params["var"].data, var)):
                if mgr.recomputing:  # a recomputed block's second pass: moved once already
                    break
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
        # backward keeps the input (the previous layer's output, alive anyway) and the statistics,
        # not the normalised input nor the output: a ReLU after it may then run in place
        self._x, self._stat = (x, stat) if mgr.backward_follows else (None, None)
        y = mgr.create(ACT, d.shape, d.dtype, dev)
        xp.multiply(xhat, self.params["gamma"].data.reshape(view), out=y.data)
        y.data += self.params["beta"].data.reshape(view)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev, e = eps.device.xp, eps.device, eps.data
        _axes, view = self._axes_and_view(e.ndim)
        stat = self._stat
        mean, inv_std = stat[0], stat[1]
        xhat = mgr.create(BP, e.shape, e.dtype, dev).data  # made again: (x - mean) / std
        xp.subtract(self._x.data, mean.reshape(view), out=xhat)
        xhat *= inv_std.reshape(view)
        self._x = self._stat = None  # used up
        t = mgr.create(BP, e.shape, e.dtype, dev).data
        xp.multiply(e, xhat, out=t)
        d_gamma, d_beta = self.grads["gamma"].data, self.grads["beta"].data
        channel_sums(t, d_gamma, mgr, BP, dev)  # sum(eps * xhat)
        channel_sums(e, d_beta, mgr, BP, dev)  # sum(eps)
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
