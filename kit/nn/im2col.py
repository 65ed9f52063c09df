"""Convolution and pooling kernels on raw NumPy/CuPy arrays (written once against `xp`).

    cols = im2col_into(xp, xpad, k, s, oh, ow, out)    # (C, k, k, B, OH, OW): one strided copy
    col2im_add(dcols, s, target)                       # target (C, B, Hp, Wp) += every window
    pool_max_into(xp, xpad, k, s, y, idx, scratch)     # k*k elementwise maxima, first winner kept
    pool_scatter(xp, pieces, k, s, target, tiles)      # backward of any pooling

The layers (kit/nn/conv.py, kit/nn/pooling.py) own the memory; these functions only fill it. The
`kernel`-wrapped ones at the end are where kit.nn.replay records a step.

Why this layout (CNHW: channels, kernel offsets, then batch and pixels): the columns become one
(C*k*k, B*OH*OW) matrix, so forward, the weight gradient and the input gradient are each a single
large matrix product, and the copy that builds the columns moves whole output rows (OW pixels)
at a time. `python -m kit bench train` times it against the other layouts (NHWC rows, NCHW
batched products, sliding_window_view + tensordot/einsum) on LeNet and ResNet-18 shapes.

Pooling is k*k elementwise passes over strided views of the input, never a reduction over small
window axes (one short NumPy inner loop per window).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kit.core.backend import RawArray, Xp
from kit.nn.kernels import kernel

__all__ = [
    "avg_pool_backward_into",
    "avg_pool_into",
    "col2im_add",
    "global_avg_pool_backward_into",
    "global_avg_pool_into",
    "im2col_into",
    "max_pool_backward_into",
    "max_pool_into",
    "offset_views",
    "out_size",
    "pad_into",
    "pool_max_into",
    "pool_scatter",
    "pool_sum_into",
    "tiles_exactly",
    "window_view",
]


def out_size(n: int, k: int, s: int, p: int, what: str) -> int:
    """Output length of a window of k with stride s over n inputs padded by p on both sides."""
    out = (n + 2 * p - k) // s + 1
    if out < 1:
        raise ValueError(f"{what}: kernel {k} with stride {s} and padding {p} does not fit an input of size {n}")
    return out


def pad_into(x: Any, p: int, fill: float, out: Any) -> Any:
    """out (A, B, H+2p, W+2p) = x (A, B, H, W) framed by p pixels of `fill`; only the frame is filled."""
    h, w = x.shape[2], x.shape[3]
    out[:, :, :p, :] = fill
    out[:, :, p + h :, :] = fill
    out[:, :, p : p + h, :p] = fill
    out[:, :, p : p + h, p + w :] = fill
    out[:, :, p : p + h, p : p + w] = x
    return out


def window_view(xp: Any, a: Any, k: int, s: int, oh: int, ow: int, batch_axis: int = 0) -> Any:
    """(C, k, k, B, OH, OW) strided view of every k x k window of a (B, C, Hp, Wp) array
    (or of a (C, B, Hp, Wp) one with batch_axis=1). No copy."""
    strides = a.strides
    sb, sc = (strides[0], strides[1]) if batch_axis == 0 else (strides[1], strides[0])
    b, c = (a.shape[0], a.shape[1]) if batch_axis == 0 else (a.shape[1], a.shape[0])
    sh, sw = strides[2], strides[3]
    return xp.lib.stride_tricks.as_strided(a, shape=(c, k, k, b, oh, ow), strides=(sc, sh, sw, sb, sh * s, sw * s))


def im2col_into(xp: Any, xpad: Any, k: int, s: int, oh: int, ow: int, out: Any, batch_axis: int = 0) -> Any:
    """out (C, k, k, B, OH, OW) = every window of xpad; returned as the (C*k*k, B*OH*OW) matrix."""
    xp.copyto(out, window_view(xp, xpad, k, s, oh, ow, batch_axis))
    c, b = out.shape[0], out.shape[3]
    return out.reshape(c * k * k, b * oh * ow)


def col2im_add(dcols: Any, s: int, target: Any) -> Any:
    """target (C, B, Hp, Wp) += each window's column values dcols (C, k, k, B, OH, OW): k*k slab
    additions. The caller zeroes target; the convolution uses this only where windows overlap
    in a way a convolution of the gradient cannot replace (stride > 1, or unequal padding)."""
    k, oh, ow = dcols.shape[1], dcols.shape[4], dcols.shape[5]
    for i in range(k):
        for j in range(k):
            target[:, :, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s] += dcols[:, i, j]
    return target


# ---- pooling --------------------------------------------------------------------------


def tiles_exactly(h: int, w: int, k: int, s: int, p: int) -> bool:
    """Windows that tile the input (stride == kernel, no padding, sizes divisible): every input
    pixel is in exactly one window, so backward writes instead of accumulating."""
    return s == k and p == 0 and h % k == 0 and w % k == 0


def offset_views(xpad: Any, k: int, s: int, oh: int, ow: int) -> Iterator[tuple[int, Any]]:
    """(offset i*k+j, (B, C, OH, OW) view of the pixel at (i, j) in every window). For tiling
    windows these are the views xpad.reshape(B, C, OH, k, OW, k)[:, :, :, i, :, j]."""
    for i in range(k):
        for j in range(k):
            yield i * k + j, xpad[:, :, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s]


def pool_max_into(xp: Any, xpad: Any, k: int, s: int, y: Any, idx: Any | None, scratch: Any | None) -> None:
    """y = max over each window; idx (when given) = offset of the window's first maximum, the
    pixel argmax over the flattened window would pick. scratch: like idx (B, C, OH, OW)."""
    oh, ow = y.shape[2], y.shape[3]
    views = offset_views(xpad, k, s, oh, ow)
    _, first = next(views)
    xp.copyto(y, first)
    if idx is not None:
        idx.fill(0)
    for offset, v in views:
        if idx is not None:  # a strictly larger value moves the winner to this (later) offset
            xp.greater(v, y, out=scratch)  # 0/1
            xp.multiply(scratch, offset, out=scratch)
            xp.maximum(idx, scratch, out=idx)
        xp.maximum(y, v, out=y)


def pool_sum_into(xp: Any, xpad: Any, k: int, s: int, y: Any) -> None:
    """y = sum over each window (k*k additions of strided views)."""
    views = offset_views(xpad, k, s, y.shape[2], y.shape[3])
    _, first = next(views)
    xp.copyto(y, first)
    for _, v in views:
        xp.add(y, v, out=y)


def pool_scatter(
    xp: Any, piece: Callable[[int, Any], None], k: int, s: int, target: Any, tiles: bool, tmp: Any
) -> None:
    """Backward of a pooling: piece(offset, out) writes each window's share for the pixel at that
    offset (B, C, OH, OW). Tiling windows write it straight into target's view; otherwise target
    is zeroed and the shares are added (windows overlap or leave pixels out)."""
    oh, ow = tmp.shape[2], tmp.shape[3]
    if not tiles:
        target.fill(0)
    for offset, view in offset_views(target, k, s, oh, ow):
        if tiles:
            piece(offset, view)
        else:
            piece(offset, tmp)
            xp.add(view, tmp, out=view)


# ---- pooling: k, s, p are the window, its stride and padding; xpad the padded frame (p > 0) -----
@kernel
def max_pool_into(
    xp: Xp, x: RawArray, k: int, s: int, p: int, y: RawArray, xpad: RawArray | None, idx: RawArray | None,
    scratch: RawArray | None,
) -> None:  # fmt: skip
    """y = the maximum of each window of x (padded with -inf); idx, when given, the offset of each
    window's first maximum (scratch: like idx)."""
    pool_max_into(xp, pad_into(x, p, -np.inf, xpad) if p else x, k, s, y, idx, scratch)


def _scatter(
    xp: Xp, piece: Callable[[int, RawArray], None], k: int, s: int, p: int, tiles: bool, dx: RawArray,
    target: RawArray | None, tmp: RawArray,
) -> None:  # fmt: skip
    """dx from each offset's share (im2col.pool_scatter), through the padded `target` if p."""
    h, w = dx.shape[2], dx.shape[3]
    pool_scatter(xp, piece, k, s, target if p else dx, tiles, tmp)
    if p:
        xp.copyto(dx, target[:, :, p : p + h, p : p + w])


@kernel
def max_pool_backward_into(
    xp: Xp, e: RawArray, idx: RawArray, won: RawArray, k: int, s: int, p: int, tiles: bool, dx: RawArray,
    target: RawArray | None, tmp: RawArray,
) -> None:  # fmt: skip
    """dx = each window's eps at its first maximum (offset idx), 0 elsewhere; won: boolean scratch."""

    def piece(offset: int, out: RawArray) -> None:
        xp.equal(idx, offset, out=won)  # where this offset won its window
        xp.multiply(e, won, out=out)

    _scatter(xp, piece, k, s, p, tiles, dx, target, tmp)


@kernel
def avg_pool_into(xp: Xp, x: RawArray, k: int, s: int, p: int, y: RawArray, xpad: RawArray | None) -> None:
    """y = the mean of each window, padding counted as zeros (count_include_pad)."""
    pool_sum_into(xp, pad_into(x, p, 0.0, xpad) if p else x, k, s, y)
    y *= 1.0 / (k * k)


@kernel
def avg_pool_backward_into(
    xp: Xp, e: RawArray, share: RawArray, k: int, s: int, p: int, tiles: bool, dx: RawArray,
    target: RawArray | None, tmp: RawArray,
) -> None:  # fmt: skip
    """dx = eps / k^2 at every pixel of each window (added where windows overlap)."""
    xp.multiply(e, 1.0 / (k * k), out=share)  # the same for every pixel

    def piece(offset: int, out: RawArray) -> None:
        xp.copyto(out, share)

    _scatter(xp, piece, k, s, p, tiles, dx, target, tmp)


@kernel
def global_avg_pool_into(xp: Xp, x: RawArray, y: RawArray) -> None:
    """y (B, C) = the mean of each channel of x (B, C, H, W)."""
    xp.mean(x, axis=(2, 3), out=y)


@kernel
def global_avg_pool_backward_into(xp: Xp, e: RawArray, dx: RawArray) -> None:
    """dx (B, C, H, W) = e (B, C) / (H * W) at every pixel."""
    xp.copyto(dx, e[:, :, None, None])
    dx *= 1.0 / (dx.shape[2] * dx.shape[3])
