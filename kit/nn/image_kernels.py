"""Kernels of the image layers: Conv2D, BatchNorm and the residual block's add.

    >>> import numpy as np
    >>> from kit.nn.image_kernels import add_relu_into
    >>> h, shortcut = np.array([1.0, -3.0]), np.array([0.5, 1.0])
    >>> y = np.empty(2)                            # the caller owns every array
    >>> add_relu_into(np, h, shortcut, y)
    >>> y
    array([1.5, 0. ])

The habit of kit.nn.kernels, whose `kernel` decorator is the seam kit.nn.replay records at: each
function takes the array module `xp` and raw arrays its layer made with its workspace manager,
writes with out= and allocates nothing. The layers (kit.nn.conv, kit.nn.pooling,
kit.nn.batchnorm, kit.nn.residual) work out the shapes and make the arrays; every number is
computed here, so a replayed step computes it too.

One rule keeps a step replayable: a kernel is handed each array whole, as its layer made it, and
cuts chunks, padded frames and views inside, because a replay swaps arrays by identity and a view
made outside would go on reading the recorded step's array. Working arrays are flat; each chunk
takes the prefix it needs (`_take`). The im2col layout and the pooling kernels are kit/nn/im2col.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.core.backend import RawArray, Xp
from kit.nn.im2col import col2im_add, im2col_into, pad_into
from kit.nn.kernels import kernel

__all__ = [
    "ConvShape",
    "add_into",
    "add_relu_into",
    "batchnorm_backward_into",
    "batchnorm_eval_into",
    "batchnorm_train_into",
    "channel_scratch_size",
    "channel_sums_into",
    "conv2d_backward_into",
    "conv2d_into",
]


@dataclass(frozen=True)
class ConvShape:
    """A convolution's geometry: k x k filters, stride, padding, the examples per chunk (`step`)
    and whether it multiplies per example (small filter banks) or once per chunk."""

    kernel: int
    stride: int
    padding: int
    step: int
    per_example: bool


def _take(flat: RawArray, shape: tuple[int, ...]) -> RawArray:
    """The first prod(shape) elements of a flat working array, as `shape`."""
    return flat[: math.prod(shape)].reshape(shape)


def _view(ndim: int) -> tuple[int, ...]:
    """The shape a per-channel vector broadcasts in over (B, C) or (B, C, H, W)."""
    return (1, -1) if ndim == 2 else (1, -1, 1, 1)


# ---- per-channel sums (BatchNorm's statistics, Conv2D's bias gradient) ---------------------------
def channel_scratch_size(shape: tuple[int, ...], dtype: np.dtype, out_dtype: np.dtype, squares: bool) -> int:
    """Elements (of out_dtype) of working memory channel_sums_into needs for an array of `shape`."""
    size = math.prod(shape) if dtype != out_dtype else 0
    if len(shape) == 2:
        return size + (math.prod(shape) if squares else 0)
    return size + shape[0] * shape[1] + (0 if squares else math.prod(shape[2:]))


@kernel
def channel_sums_into(xp: Xp, a: RawArray, out: RawArray, scratch: RawArray | None, squares: bool) -> None:
    """out (C,) = the sum of a (B, C[, H, W]) over everything but the channel axis (of a*a with
    squares), added in out's dtype (float32 for float16 data: a float16 sum of squares overflowed
    and BatchNorm's variance became inf). For images: one matrix-vector product per channel row,
    which runs at memory speed where a reduction over the axes (0, 2, 3) does not. `scratch` is
    flat, of out's dtype, channel_scratch_size(...) elements (None where that is 0)."""
    if a.dtype != out.dtype:  # float16 data, float32 statistics: work on a float32 copy
        wide = _take(scratch, a.shape)
        xp.copyto(wide, a)
        a, scratch = wide, scratch[a.size :]
    if a.ndim == 2:
        if squares:
            sq = _take(scratch, a.shape)
            xp.multiply(a, a, out=sq)
            a = sq
        if xp is np:
            xp.sum(a, axis=0, out=out)
        else:  # CuPy: reduce into its pool, then copy (see NDArray._reduce)
            out[...] = a.sum(axis=0)
        return
    b, c = a.shape[:2]
    rows, per_row = a.reshape(b * c, -1), scratch[: b * c]  # (B*C, H*W), (B*C,)
    if squares:  # row . row for every row, as a batch of (1, HW) @ (HW, 1) products
        xp.matmul(rows[:, None, :], rows[:, :, None], out=per_row.reshape(b * c, 1, 1))
    else:
        ones = scratch[b * c : b * c + rows.shape[1]]
        ones.fill(1)
        xp.matmul(rows, ones, out=per_row)
    if xp is np:
        xp.sum(per_row.reshape(b, c), axis=0, out=out)
    else:
        out[...] = per_row.reshape(b, c).sum(axis=0)


# ---- convolution ---------------------------------------------------------------------------------
def _columns(xp: Xp, x: RawArray, g: ConvShape, xpad: RawArray | None, cols: RawArray, oh: int, ow: int) -> RawArray:
    """The (C*k*k, n*OH*OW) im2col matrix of x (n, C, H, W); `cols` is either 6-D, the columns
    kept for backward, or flat working memory."""
    n, c, h, w = x.shape
    k, p = g.kernel, g.padding
    if p:
        x = pad_into(x, p, 0.0, _take(xpad, (n, c, h + 2 * p, w + 2 * p)))
    out = cols if cols.ndim == 6 else _take(cols, (c, k, k, n, oh, ow))
    return im2col_into(xp, x, k, g.stride, oh, ow, out)


@kernel
def conv2d_into(
    xp: Xp,
    x: RawArray,
    w: RawArray,
    b: RawArray,
    y: RawArray,
    g: ConvShape,
    xpad: RawArray | None,
    cols: RawArray,
    yt: RawArray | None,
) -> None:
    """y (B, OC, OH, OW) = x (B, C, H, W) cross-correlated with w (OC, C, k, k), plus b (OC,),
    g.step examples at a time. cols: the whole batch's (C, k, k, B, OH, OW) columns, kept for
    backward, or flat working memory; xpad (padding) and yt (one product per chunk) flat too."""
    batch, oc, oh, ow = y.shape
    w2, bias = w.reshape(oc, -1), b.reshape(1, oc, 1, 1)
    for s0 in range(0, batch, g.step):
        n = min(g.step, batch - s0)
        c = _columns(xp, x[s0 : s0 + n], g, xpad, cols, oh, ow)  # (C*k*k, n*OH*OW)
        out = y[s0 : s0 + n]
        if g.per_example:  # (OC, Ckk) @ (Ckk, OH*OW) for each example, straight into y
            xp.matmul(w2, c.reshape(-1, n, oh * ow).transpose(1, 0, 2), out=out.reshape(n, oc, -1))
            out += bias
        else:
            t = _take(yt, (oc, n * oh * ow))
            xp.matmul(w2, c, out=t)  # one product for the chunk
            xp.add(t.reshape(oc, n, oh, ow).transpose(1, 0, 2, 3), bias, out=out)  # back to NCHW, + bias


@kernel
def conv2d_backward_into(
    xp: Xp,
    x: RawArray,
    e: RawArray,
    w: RawArray,
    gw: RawArray,
    dx: RawArray | None,
    g: ConvShape,
    cols: RawArray,
    xpad: RawArray | None,
    work: RawArray,
    more: RawArray | None,
    flipped: RawArray | None,
    frame: RawArray | None,
    gcols: RawArray | None,
    dxt: RawArray | None,
) -> None:
    """gw = d loss / d w from x and eps `e` (B, OC, OH, OW); dx (None for a network's first layer)
    = d loss / d x: eps convolved with the turned filters `flipped` (stride 1, 'same' size), else
    each window's column added back (col2im). cols as conv2d_into's; `work` holds each example's
    weight gradient (per example) or eps channel-major; `more` a later chunk's weight gradient;
    frame, gcols and dxt the input gradient's padded eps (or col2im target), columns and product."""
    batch, oc, oh, ow = e.shape
    c, h, wd = x.shape[1:]
    gw2 = gw.reshape(oc, -1)
    by_convolution = g.stride == 1 and (h, wd) == (oh, ow)
    if dx is not None and by_convolution:
        xp.copyto(flipped, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    step = batch if cols.ndim == 6 else g.step
    for s0 in range(0, batch, step):
        n = min(step, batch - s0)
        cn = cols.reshape(gw2.shape[1], -1) if cols.ndim == 6 else _columns(xp, x[s0 : s0 + n], g, xpad, cols, oh, ow)
        into = gw2 if s0 == 0 else _take(more, gw2.shape)  # later chunks add their share
        if g.per_example:  # eps stays NCHW: (n, OC, OH*OW)
            en = e[s0 : s0 + n].reshape(n, oc, oh * ow)
            per = _take(work, (n, *gw2.shape))  # each example's weight gradient
            xp.matmul(en, cn.reshape(-1, n, oh * ow).transpose(1, 2, 0), out=per)
            xp.sum(per, axis=0, out=into)
        else:  # eps channel-major like the columns: (OC, n*OH*OW)
            en = _take(work, (oc, n, oh, ow))
            xp.copyto(en, e[s0 : s0 + n].transpose(1, 0, 2, 3))
            en = en.reshape(oc, -1)
            xp.matmul(en, cn.T, out=into)
        if s0:
            gw2 += into
        if dx is None:
            continue
        if by_convolution:
            _input_grad_by_convolution(xp, en, dx[s0 : s0 + n], flipped.reshape(c, -1), g, frame, gcols, dxt)
        else:
            _input_grad_by_col2im(xp, en, dx[s0 : s0 + n], w, g, (oh, ow), gcols, frame)


def _input_grad_by_convolution(
    xp: Xp, e: RawArray, dx: RawArray, turned: RawArray, g: ConvShape, epad: RawArray | None, ecols: RawArray | None,
    dxt: RawArray | None,
) -> None:  # fmt: skip
    """Stride 1, 'same' size: dx is eps (padded by k-1-p) convolved with the filters turned 180
    degrees, in/out channels swapped: one more im2col and one product, no k*k read-modify-write
    passes over dx. e: (n, OC, OH*OW) per example, else (OC, n*OH*OW)."""
    b, c, h, w = dx.shape
    k, q = g.kernel, g.kernel - 1 - g.padding
    oc = turned.shape[1] // (k * k)
    if k == 1:  # a 1x1 convolution's columns of eps are eps itself
        cols = e
    else:  # eps as 4-D images, (B, OC, H, W) per example or (OC, B, H, W), padded by q
        img = e.reshape(b, oc, h, w) if g.per_example else e.reshape(oc, b, h, w)
        if q:
            img = pad_into(img, q, 0.0, _take(epad, (img.shape[0], img.shape[1], h + 2 * q, w + 2 * q)))
        out = _take(ecols, (oc, k, k, b, h, w))
        cols = im2col_into(xp, img, k, 1, h, w, out, batch_axis=0 if g.per_example else 1)  # (OC*k*k, B*H*W)
        if g.per_example:
            cols = cols.reshape(-1, b, h * w).transpose(1, 0, 2)  # (B, OC*k*k, H*W)
    if g.per_example:
        xp.matmul(turned, cols, out=dx.reshape(b, c, -1))
        return
    t = _take(dxt, (c, b * h * w))
    xp.matmul(turned, cols, out=t)
    xp.copyto(dx, t.reshape(c, b, h, w).transpose(1, 0, 2, 3))


def _input_grad_by_col2im(
    xp: Xp, e: RawArray, dx: RawArray, w: RawArray, g: ConvShape, out_hw: tuple[int, int], dcols: RawArray,
    target: RawArray | None,
) -> None:  # fmt: skip
    """dcols = W^T eps, then each window's column added back to its pixels (col2im)."""
    b, c, h, wd = dx.shape
    (oh, ow), k, s, p = out_hw, g.kernel, g.stride, g.padding
    w2t = w.reshape(w.shape[0], -1).T
    if g.per_example:  # (B, C, k, k, OH, OW) columns, added into (B, C, Hp, Wp)
        cols = _take(dcols, (b, c, k, k, oh, ow))
        xp.matmul(w2t, e, out=cols.reshape(b, c * k * k, -1))
        into = _take(target, (b, c, h + 2 * p, wd + 2 * p)) if p else dx
        into.fill(0)
        col2im_add(cols.transpose(1, 2, 3, 0, 4, 5), s, into.transpose(1, 0, 2, 3))
        if p:
            xp.copyto(dx, into[:, :, p : p + h, p : p + wd])
        return
    cols = _take(dcols, (c, k, k, b, oh, ow))  # channel-major
    xp.matmul(w2t, e, out=cols.reshape(c * k * k, -1))
    into = _take(target, (c, b, h + 2 * p, wd + 2 * p))
    into.fill(0)
    col2im_add(cols, s, into)
    xp.copyto(dx, into[:, :, p : p + h, p : p + wd].transpose(1, 0, 2, 3))


# ---- BatchNorm: stat (2, C) = [mean, 1/std], kept for backward -----------------------------------
def _normalise(
    xp: Xp, var: RawArray, eps: float, stat: RawArray, xhat: RawArray, gamma: RawArray, beta: RawArray, y: RawArray
) -> None:
    """1/std into stat[1], xhat (x - mean, given) scaled by it, y = gamma * xhat + beta."""
    inv_std, view = stat[1], _view(xhat.ndim)
    xp.add(var, eps, out=inv_std)
    xp.sqrt(inv_std, out=inv_std)
    xp.divide(1, inv_std, out=inv_std)
    xhat *= inv_std.reshape(view)
    xp.multiply(xhat, gamma.reshape(view), out=y)
    y += beta.reshape(view)


@kernel
def batchnorm_train_into(
    xp: Xp, x: RawArray, gamma: RawArray, beta: RawArray, running_mean: RawArray, running_var: RawArray,
    stat: RawArray, xhat: RawArray, var: RawArray, tmp: RawArray, centred: RawArray | None, y: RawArray,
    scratch: RawArray | None, decay: float, eps: float, moving: bool,
) -> None:  # fmt: skip
    """y = gamma * (x - mean) / std + beta with the batch's mean and (biased) variance; the running
    statistics move by `decay` when `moving` (not in a recomputed block's second pass). var, tmp:
    (C,) working memory; centred: x - mean in float32 for float16 data (else None); scratch: the
    per-channel sums'."""
    mean, view = stat[0], _view(x.ndim)
    n = x.size // mean.size
    channel_sums_into(xp, x, mean, scratch, False)
    mean *= 1.0 / n
    xp.subtract(x, mean.reshape(view), out=xhat)
    if centred is not None:  # the centred data in float32: its squares neither overflow nor lose the small ones
        xp.subtract(x, mean.reshape(view), out=centred)
    channel_sums_into(xp, xhat if centred is None else centred, var, scratch, True)
    var *= 1.0 / n  # biased batch variance, no hidden temporaries
    if moving:  # a channel whose batch statistics overflowed (inf, NaN) keeps its running ones
        for running, batch in ((running_mean, mean), (running_var, var)):
            xp.multiply(batch, 1 - decay, out=tmp)
            tmp += running * decay  # (C,): the same sum as before, in the other order
            xp.copyto(running, tmp, where=xp.isfinite(tmp))
    _normalise(xp, var, eps, stat, xhat, gamma, beta, y)


@kernel
def batchnorm_eval_into(
    xp: Xp, x: RawArray, gamma: RawArray, beta: RawArray, running_mean: RawArray, running_var: RawArray,
    stat: RawArray, xhat: RawArray, y: RawArray, eps: float,
) -> None:  # fmt: skip
    """y = gamma * (x - mean) / std + beta with the running statistics."""
    xp.copyto(stat[0], running_mean)
    xp.subtract(x, stat[0].reshape(_view(x.ndim)), out=xhat)
    _normalise(xp, running_var, eps, stat, xhat, gamma, beta, y)


@kernel
def batchnorm_backward_into(
    xp: Xp, x: RawArray, e: RawArray, stat: RawArray, gamma: RawArray, d_gamma: RawArray, d_beta: RawArray,
    d_stats: tuple[RawArray, RawArray], xhat: RawArray, t: RawArray, scale: RawArray, m1: RawArray | None,
    m2: RawArray | None, dx: RawArray, scratch: RawArray | None,
) -> None:  # fmt: skip
    """d_gamma = sum(eps * xhat), d_beta = sum(eps) per channel, the running statistics' gradients
    (d_stats) 0, and dx: eps * gamma / std where the statistics were constants (m1 None: an
    evaluation forward), else gamma/std * (eps - mean(eps) - xhat * mean(eps * xhat))."""
    view = _view(e.ndim)
    xp.subtract(x, stat[0].reshape(view), out=xhat)  # made again: (x - mean) / std
    xhat *= stat[1].reshape(view)
    xp.multiply(e, xhat, out=t)
    channel_sums_into(xp, t, d_gamma, scratch, False)
    channel_sums_into(xp, e, d_beta, scratch, False)
    for d in d_stats:
        d.fill(0)
    xp.multiply(gamma.reshape(view), stat[1].reshape(view), out=scale)  # gamma / std
    if m1 is None:
        xp.multiply(e, scale, out=dx)
        return
    n = e.size // d_beta.size  # the two sums are the parameter gradients just computed
    xp.multiply(d_beta.reshape(view), 1.0 / n, out=m1)
    xp.multiply(d_gamma.reshape(view), 1.0 / n, out=m2)
    xp.multiply(xhat, m2, out=dx)
    xp.subtract(e, dx, out=dx)
    dx -= m1
    dx *= scale


# ---- the residual block ---------------------------------------------------------------------------
@kernel
def add_relu_into(xp: Xp, a: RawArray, b: RawArray, out: RawArray) -> None:
    """out = max(a + b, 0): the residual block's sum and its ReLU (out may be a)."""
    xp.add(a, b, out=out)
    xp.maximum(out, 0, out=out)


@kernel
def add_into(xp: Xp, a: RawArray, b: RawArray, out: RawArray) -> None:
    """out = a + b (the residual block's two input gradients)."""
    xp.add(a, b, out=out)
