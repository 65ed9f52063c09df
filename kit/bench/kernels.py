"""The kernel alternatives behind kit's convolution and pooling, timed side by side (NumPy).

    rows = kernel_rows(quick=False)      # part of `python -m kit bench train`

For each shape (LeNet's and ResNet-18's), every variant computes the same thing into buffers made
beforehand, so only the kernel is timed; the variant kit uses is marked "(kit)" and the others
are given as a ratio to it:

- convolution forward: CNHW columns with one GEMM or a GEMM per example; NHWC rows; NCHW columns;
  sliding_window_view + tensordot; einsum with a fixed path;
- convolution input gradient: eps convolved with the turned filters, col2im slab additions,
  np.add.at on precomputed indices;
- pooling forward: k*k elementwise maxima; a max over the reshape's window axes; window copy + argmax;
- pooling backward: offsets into the reshape views; a mask x == max (double-counts ties, shown for
  its speed only); k*k scatter-adds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from kit.bench.common import side_by_side
from kit.nn.conv import PER_EXAMPLE_MAX_WEIGHTS
from kit.nn.im2col import col2im_add, im2col_into, pad_into, pool_max_into

__all__ = ["conv_forward_variants", "conv_input_grad_variants", "kernel_rows", "maxpool_variants"]

F32 = np.float32


def _nhwc_windows(xpad: np.ndarray, k: int, s: int, oh: int, ow: int) -> np.ndarray:
    """(B, OH, OW, C, k, k) view: the old kernels' row layout."""
    sb, sc, sh, sw = xpad.strides
    b, c = xpad.shape[:2]
    return as_strided(xpad, (b, oh, ow, c, k, k), (sb, sh * s, sw * s, sc, sh, sw))


Variants = tuple[dict[str, Callable[[], object]], np.ndarray]  # the functions, and the array each fills


def _mark(names: list[str], kit_name: str) -> list[str]:
    return [name + " (kit)" if name == kit_name else name for name in names]


def conv_forward_variants(b: int, c: int, h: int, oc: int, k: int, p: int) -> Variants:
    """Stride 1 convolution forward of (b, c, h, h) with oc filters of k x k, padding p -> y.
    kit multiplies per example for filter banks of up to PER_EXAMPLE_MAX_WEIGHTS weights."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, c, h, h), dtype=F32)
    w = rng.standard_normal((oc, c, k, k), dtype=F32)
    bias = rng.standard_normal((1, oc, 1, 1), dtype=F32)
    oh = h + 2 * p - k + 1
    xpad = np.zeros((b, c, h + 2 * p, h + 2 * p), F32)
    y = np.empty((b, oc, oh, oh), F32)
    variants = {**_gemm_forwards(x, w, bias, p, xpad, y), **_view_forwards(x, w, bias, p, xpad, y)}
    per_example = w.size <= PER_EXAMPLE_MAX_WEIGHTS
    kit_name = "CNHW columns, " + ("a GEMM per example" if per_example else "one GEMM")
    return dict(zip(_mark(list(variants), kit_name), variants.values())), y


def _gemm_forwards(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray, p: int, xpad: np.ndarray, y: np.ndarray
) -> dict[str, Callable[[], None]]:
    """The forward variants that copy windows into columns (or rows) and multiply."""
    (b, c, _, _), (oc, _, k, _), oh = x.shape, w.shape, y.shape[2]
    w2, y3 = w.reshape(oc, -1), y.reshape(b, oc, oh * oh)
    n, ckk = b * oh * oh, c * k * k
    cnhw, yt = np.empty((c, k, k, b, oh, oh), F32), np.empty((oc, n), F32)
    rows, yn, nchw = np.empty((b, oh, oh, c, k, k), F32), np.empty((n, oc), F32), np.empty((b, c, k, k, oh, oh), F32)
    swv = sliding_window_view(xpad, (k, k), axis=(2, 3))  # (B, C, OH, OW, k, k), a view

    def cnhw_one() -> None:
        pad_into(x, p, 0.0, xpad)
        np.matmul(w2, im2col_into(np, xpad, k, 1, oh, oh, cnhw), out=yt)
        np.add(yt.reshape(oc, b, oh, oh).transpose(1, 0, 2, 3), bias, out=y)

    def cnhw_per_example() -> None:
        pad_into(x, p, 0.0, xpad)
        cols = im2col_into(np, xpad, k, 1, oh, oh, cnhw)
        np.matmul(w2, cols.reshape(ckk, b, oh * oh).transpose(1, 0, 2), out=y3)
        y.__iadd__(bias)

    def old_rows() -> None:
        pad_into(x, p, 0.0, xpad)
        np.copyto(rows, _nhwc_windows(xpad, k, 1, oh, oh))
        np.matmul(rows.reshape(n, -1), w2.T, out=yn)
        np.add(yn.reshape(b, oh, oh, oc).transpose(0, 3, 1, 2), bias, out=y)

    def nchw_per_example() -> None:
        pad_into(x, p, 0.0, xpad)
        np.copyto(nchw, swv.transpose(0, 1, 4, 5, 2, 3))
        np.matmul(w2, nchw.reshape(b, ckk, oh * oh), out=y3)
        y.__iadd__(bias)

    return {
        "CNHW columns, one GEMM": cnhw_one,
        "CNHW columns, a GEMM per example": cnhw_per_example,
        "NHWC rows, one GEMM (old)": old_rows,
        "NCHW columns, a GEMM per example": nchw_per_example,
    }


def _view_forwards(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray, p: int, xpad: np.ndarray, y: np.ndarray
) -> dict[str, Callable[[], None]]:
    """The forward variants that contract a sliding-window view in place, copying nothing."""
    k = w.shape[2]
    swv = sliding_window_view(xpad, (k, k), axis=(2, 3))  # (B, C, OH, OW, k, k), a view
    path = np.einsum_path("bchwij,ocij->bohw", swv, w, optimize="optimal")[0]

    def tensordot() -> None:
        pad_into(x, p, 0.0, xpad)
        out = np.tensordot(swv, w, axes=([1, 4, 5], [1, 2, 3]))  # (B, OH, OW, OC)
        np.add(out.transpose(0, 3, 1, 2), bias, out=y)

    def einsum() -> None:
        pad_into(x, p, 0.0, xpad)
        np.add(np.einsum("bchwij,ocij->bohw", swv, w, optimize=path), bias, out=y)

    return {"sliding_window_view + tensordot": tensordot, "einsum, fixed path": einsum}


def conv_input_grad_variants(b: int, c: int, h: int, oc: int, k: int, p: int, add_at: bool) -> Variants:
    """Stride 1 input gradient -> dx, from eps as the layer holds it (NCHW when it multiplies per
    example, channel-major otherwise). kit convolves eps when the output has the input's size,
    else it uses col2im."""
    rng = np.random.default_rng(1)
    oh = h + 2 * p - k + 1
    w = rng.standard_normal((oc, c, k, k), dtype=F32)
    e = rng.standard_normal((b, oc, oh, oh), dtype=F32)  # eps, NCHW
    dx = np.empty((b, c, h, h), F32)
    variants = {**_convolved_grads(w, e, p, dx), **_col2im_grads(w, e, p, dx)}
    if add_at:
        variants["col2im by np.add.at on precomputed indices"] = _add_at_grad(w, e, p, dx)
    kit_name = ("eps convolved, " if oh == h else "col2im k*k slab adds, ") + (
        "a GEMM per example" if w.size <= PER_EXAMPLE_MAX_WEIGHTS else "one GEMM"
    )
    return dict(zip(_mark(list(variants), kit_name), variants.values())), dx


def _convolved_grads(w: np.ndarray, e: np.ndarray, p: int, dx: np.ndarray) -> dict[str, Callable[[], None]]:
    """dx as eps (padded by k - 1 - p) convolved with the turned filters: one GEMM, or one per example."""
    (oc, c, k, _), (b, _, oh, _), h = w.shape, e.shape, dx.shape[2]
    et = np.ascontiguousarray(e.transpose(1, 0, 2, 3))  # eps channel-major
    q = k - 1 - p
    epad, epad_b = np.zeros((oc, b, oh + 2 * q, oh + 2 * q), F32), np.zeros((b, oc, oh + 2 * q, oh + 2 * q), F32)
    ecols, flipped = np.empty((oc, k, k, b, h, h), F32), np.empty((c, oc, k, k), F32)
    dxt = np.empty((c, b * h * h), F32)

    def flip() -> np.ndarray:
        np.copyto(flipped, w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        return flipped.reshape(c, -1)

    def convolved_one() -> None:
        pad_into(et, q, 0.0, epad)
        np.matmul(flip(), im2col_into(np, epad, k, 1, h, h, ecols, batch_axis=1), out=dxt)
        np.copyto(dx, dxt.reshape(c, b, h, h).transpose(1, 0, 2, 3))

    def convolved_per_example() -> None:
        pad_into(e, q, 0.0, epad_b)
        cols = im2col_into(np, epad_b, k, 1, h, h, ecols)
        np.matmul(flip(), cols.reshape(-1, b, h * h).transpose(1, 0, 2), out=dx.reshape(b, c, -1))

    return {"eps convolved, one GEMM": convolved_one, "eps convolved, a GEMM per example": convolved_per_example}


def _col2im_grads(w: np.ndarray, e: np.ndarray, p: int, dx: np.ndarray) -> dict[str, Callable[[], None]]:
    """dx as the columns' gradient (one GEMM, one per example, or the old NHWC rows) added back by
    k*k slab additions."""
    (oc, c, k, _), (b, _, oh, _), h = w.shape, e.shape, dx.shape[2]
    n, hp, ckk = b * oh * oh, h + 2 * p, c * k * k
    w2 = w.reshape(oc, -1)
    e2, e3 = np.ascontiguousarray(e.transpose(1, 0, 2, 3)).reshape(oc, n), e.reshape(b, oc, oh * oh)
    dcols, target = np.empty((c, k, k, b, oh, oh), F32), np.empty((c, b, hp, hp), F32)
    dcols_b, target_b = np.empty((b, c, k, k, oh, oh), F32), np.empty((b, c, hp, hp), F32)
    rows_e = np.ascontiguousarray(e.transpose(0, 2, 3, 1)).reshape(n, oc)
    dc_rows = np.empty((n, ckk), F32)

    def col2im_one() -> None:
        np.matmul(w2.T, e2, out=dcols.reshape(ckk, n))
        target.fill(0)
        col2im_add(dcols, 1, target)
        np.copyto(dx, target[:, :, p : p + h, p : p + h].transpose(1, 0, 2, 3))

    def col2im_per_example() -> None:
        np.matmul(w2.T, e3, out=dcols_b.reshape(b, ckk, -1))
        target_b.fill(0)
        col2im_add(dcols_b.transpose(1, 2, 3, 0, 4, 5), 1, target_b.transpose(1, 0, 2, 3))
        np.copyto(dx, target_b[:, :, p : p + h, p : p + h])

    def col2im_rows() -> None:
        np.matmul(rows_e, w2, out=dc_rows)
        dc = dc_rows.reshape(b, oh, oh, c, k, k)
        target_b.fill(0)
        for i in range(k):
            for j in range(k):
                target_b[:, :, i : i + oh, j : j + oh] += dc[:, :, :, :, i, j].transpose(0, 3, 1, 2)
        np.copyto(dx, target_b[:, :, p : p + h, p : p + h])

    return {
        "col2im k*k slab adds, one GEMM": col2im_one,
        "col2im k*k slab adds, a GEMM per example": col2im_per_example,
        "col2im k*k slab adds, NHWC rows (old)": col2im_rows,
    }


def _add_at_grad(w: np.ndarray, e: np.ndarray, p: int, dx: np.ndarray) -> Callable[[], None]:
    """dx by one scatter-add (np.add.at) of the columns' gradient over precomputed flat indices."""
    (oc, c, k, _), (b, _, oh, _), h = w.shape, e.shape, dx.shape[2]
    n, hp, ckk = b * oh * oh, h + 2 * p, c * k * k
    w2, e2 = w.reshape(oc, -1), np.ascontiguousarray(e.transpose(1, 0, 2, 3)).reshape(oc, n)
    dcols, target = np.empty((c, k, k, b, oh, oh), F32), np.empty((c, b, hp, hp), F32)
    ci, ii, jj, bi, yi, xi = np.indices((c, k, k, b, oh, oh)).reshape(6, -1)
    flat_index = ((ci * b + bi) * hp + yi + ii) * hp + xi + jj

    def add_at_scatter() -> None:
        np.matmul(w2.T, e2, out=dcols.reshape(ckk, n))
        target.fill(0)
        np.add.at(target.reshape(-1), flat_index, dcols.reshape(-1))
        np.copyto(dx, target[:, :, p : p + h, p : p + h].transpose(1, 0, 2, 3))

    return add_at_scatter


def maxpool_variants(b: int, c: int, h: int, k: int) -> tuple[Variants, Variants]:
    """Non-overlapping k x k max pooling of a ReLU'd (b, c, h, h): (forward -> y, backward -> dx)."""
    rng = np.random.default_rng(2)
    x = np.maximum(rng.standard_normal((b, c, h, h), dtype=F32), 0)  # after a ReLU: ties
    oh = h // k
    y, idx, scratch = (
        np.empty((b, c, oh, oh), F32),
        np.empty((b, c, oh, oh), np.uint8),
        np.empty((b, c, oh, oh), np.uint8),
    )
    arg = np.empty((b, c, oh, oh), np.intp)
    eps = rng.standard_normal((b, c, oh, oh), dtype=F32)
    forward, old_forward = _pool_forwards(x, k, y, idx, scratch, arg)
    backward, dx = _pool_backwards(x, k, y, idx, arg, eps)
    pool_max_into(np, x, k, k, y, idx, scratch)  # the winners the backward variants read
    old_forward()
    return (forward, y), (backward, dx)


def _pool_forwards(
    x: np.ndarray, k: int, y: np.ndarray, idx: np.ndarray, scratch: np.ndarray, arg: np.ndarray
) -> tuple[dict[str, Callable[[], object]], Callable[[], None]]:
    """The forward variants (into y; kit's winners into idx, the old argmax into arg), and the old one."""
    b, c, oh, _ = y.shape
    xr = x.reshape(b, c, oh, k, oh, k)
    flat = np.empty((b, c, oh, oh, k * k), F32)

    def old_forward() -> None:
        np.copyto(flat.reshape(b, c, oh, oh, k, k), xr.transpose(0, 1, 2, 4, 3, 5))
        np.argmax(flat, axis=-1, out=arg)
        np.max(flat, axis=-1, out=y)

    forward = {
        "k*k elementwise maxima + winner offsets (kit)": lambda: pool_max_into(np, x, k, k, y, idx, scratch),
        "reshape + max over axes (3, 5), no argmax": lambda: np.max(xr, axis=(3, 5), out=y),
        "window copy + argmax + max (old)": old_forward,
    }
    return forward, old_forward


def _pool_backwards(
    x: np.ndarray, k: int, y: np.ndarray, idx: np.ndarray, arg: np.ndarray, eps: np.ndarray
) -> tuple[dict[str, Callable[[], object]], np.ndarray]:
    """The backward variants, each writing dx from the winners the forwards left in idx, y and arg."""
    b, c, oh, _ = y.shape
    won = np.empty((b, c, oh, oh), np.bool_)
    dx = np.empty_like(x)
    xr, dxr = x.reshape(b, c, oh, k, oh, k), dx.reshape(b, c, oh, k, oh, k)
    tmp = np.empty_like(eps)

    def kit_backward() -> None:
        for offset in range(k * k):
            np.equal(idx, offset, out=won)
            np.multiply(eps, won, out=dxr[:, :, :, offset // k, :, offset % k])

    def mask_backward() -> None:
        np.equal(xr, y[:, :, :, None, :, None], out=dxr)
        np.multiply(dxr, eps[:, :, :, None, :, None], out=dxr)

    def old_backward() -> None:
        dx.fill(0)
        for offset in range(k * k):
            np.equal(arg, offset, out=tmp, casting="unsafe")
            np.multiply(tmp, eps, out=tmp)
            dx[:, :, offset // k :: k, offset % k :: k] += tmp

    backward = {
        "offsets == o into the reshape views (kit)": kit_backward,
        "mask x == max, times eps (ties counted twice)": mask_backward,
        "k*k scatter-adds from argmax (old)": old_backward,
    }
    return backward, dx


def _rows(group: str, fns: dict[str, Callable[[], object]], number: int, repeats: int) -> list[dict[str, Any]]:
    times = side_by_side(fns, number, repeats)
    base = next(t for name, t in times.items() if name.endswith("(kit)"))
    return [
        {
            "case": f"{group}: {name}",
            "ms_per_step": statistics.median(ts) * 1e3,
            "min_max_ms": f"{min(ts) * 1e3:.3g}-{max(ts) * 1e3:.3g}",
            "ratio": statistics.median(t / k for t, k in zip(ts, base)),
            "ratio_to": "kit kernel",
        }
        for name, ts in times.items()
    ]


def kernel_rows(quick: bool = False) -> list[dict[str, Any]]:
    """Rows of (variant, ms per call, spread, ratio to kit's kernel) for LeNet's and ResNet-18's shapes."""
    repeats = 3 if quick else 7
    rb = 4 if quick else 32  # ResNet batch: the quick run keeps the shapes, not the batch
    rows = _rows("conv fwd LeNet 64x6x14x14 k5", conv_forward_variants(64, 6, 14, 16, 5, 0)[0], 5, repeats)
    rows += _rows(f"conv fwd ResNet {rb}x64x28x28 k3", conv_forward_variants(rb, 64, 28, 64, 3, 1)[0], 1, repeats)
    if not quick:
        rows += _rows("conv fwd ResNet 32x512x4x4 k3", conv_forward_variants(32, 512, 4, 512, 3, 1)[0], 1, repeats)
    lenet_dx = conv_input_grad_variants(64, 6, 14, 16, 5, 0, add_at=True)[0]
    rows += _rows("conv dx LeNet 64x6x14x14 k5", lenet_dx, 3, repeats)
    resnet_dx = conv_input_grad_variants(rb, 64, 28, 64, 3, 1, add_at=False)[0]
    rows += _rows(f"conv dx ResNet {rb}x64x28x28 k3", resnet_dx, 1, repeats)
    (forward, _), (backward, _) = maxpool_variants(64, 6, 28, 2)
    rows += _rows("maxpool fwd LeNet 64x6x28x28 k2", forward, 10, repeats)
    rows += _rows("maxpool bwd LeNet 64x6x28x28 k2", backward, 10, repeats)
    return rows
