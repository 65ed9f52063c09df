"""Kernels: the array code of kit.nn's dense layers, activations and losses, written once against `xp`.

    >>> import numpy as np
    >>> from kit.nn.kernels import softmax_into
    >>> x = np.array([[1.0, 2.0, 3.0]])
    >>> out, row = np.empty_like(x), np.empty((1, 1))      # the caller owns every array
    >>> softmax_into(np, x, out, row)
    >>> out.round(3)
    array([[0.09 , 0.245, 0.665]])

Thinc's Ops habit: each kernel takes the array module `xp` (NumPy or CuPy) and raw arrays, writes
its result with out= into arrays its caller made and allocates nothing. A layer's forward and
backward (kit.nn.layers, kit.nn.losses) make the arrays with their workspace manager and call
these. Each forward kernel has its backward beside it.

This is the seam kit.nn.replay records at (tinygrad's TinyJit): each kernel is wrapped by
`kernel`, which, while a step is recorded on this thread (`TAPE.calls` is a list), notes the
function and the arguments it was called with. A replayed step calls the same functions on the
same arrays again; the layers' code stays the code that ran when it was recorded.

NumPy is specialised in one place only: the softmax's row reductions call the ufuncs' own `reduce`,
positionally (np.max and np.sum's Python wrappers cost more than the arithmetic on a (1, 10)
batch). Convolution and pooling kernels live in kit/nn/im2col.py.

Shapes are written with the batch: B examples, n_in -> n_out features, C classes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "TAPE",
    "copy_into",
    "cross_entropy_into",
    "dense_backward_into",
    "dense_into",
    "dropout_backward_into",
    "dropout_into",
    "kernel",
    "l2_into",
    "mse_into",
    "relu_backward_into",
    "relu_into",
    "sigmoid_backward_into",
    "sigmoid_into",
    "softmax_backward_into",
    "softmax_into",
    "tanh_backward_into",
    "tanh_into",
    "uniform_into",
]


class _Tape(threading.local):
    """The kernel calls of the step recorded on this thread now: None when none is."""

    calls: list[tuple[Callable[..., Any], tuple[Any, ...], Any]] | None = None


TAPE = _Tape()


def kernel(func: Callable[..., Any]) -> Callable[..., Any]:
    """The seam: `func` runs as written, and while kit.nn.replay records a step on this thread each
    call is noted as (func, its positional arguments, what it returned). A kernel called by another
    (cross_entropy_into's softmax) is not noted: replaying the outer one runs it."""

    @functools.wraps(func)
    def seam(*args: Any, **keywords: Any) -> Any:
        calls = TAPE.calls
        if calls is None:
            return func(*args, **keywords)
        TAPE.calls = None
        try:
            result = func(*args, **keywords)
        finally:
            TAPE.calls = calls
        calls.append((functools.partial(func, **keywords) if keywords else func, args, result))
        return result

    return seam


_np_max, _np_sum = np.maximum.reduce, np.add.reduce
_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


def _row_sum(xp: Any, x: Any, row: Any) -> None:
    """row = the sum over x's last axis, kept as (..., 1)."""
    if xp is np:
        _np_sum(x, -1, None, row, True)
    else:
        xp.sum(x, axis=-1, keepdims=True, out=row)


# ---- dense -------------------------------------------------------------------------------------
@kernel
def dense_into(xp: Any, x: Any, w: Any, b: Any, out: Any) -> None:
    """out = x @ w + b.   x (B, n_in), w (n_in, n_out), b (n_out,) -> out (B, n_out)."""
    xp.matmul(x, w, out=out)
    xp.add(out, b, out=out)


@kernel
def dense_backward_into(xp: Any, x: Any, e: Any, w: Any, dw: Any, db: Any, dx: Any | None) -> None:
    """dw = x.T @ e (n_in, n_out); db = sum of e over the batch (n_out,); dx = e @ w.T (B, n_in),
    skipped when dx is None (a network's first layer: nobody needs d loss / d input)."""
    xp.matmul(x.T, e, out=dw)
    if xp is np:
        _np_sum(e, 0, None, db)  # without ndarray.sum's Python wrapper
    else:
        e.sum(axis=0, out=db)
    if dx is not None:
        xp.matmul(e, w.T, out=dx)


# ---- activations: each backward reads the forward's output y -----------------------------------
@kernel
def relu_into(xp: Any, x: Any, out: Any) -> None:
    xp.maximum(x, 0, out=out)


@kernel
def relu_backward_into(xp: Any, e: Any, y: Any, mask: Any, out: Any) -> None:
    """out = e where y > 0, else 0; `mask` is boolean scratch of e's shape."""
    xp.greater(y, 0, out=mask)
    xp.multiply(e, mask, out=out)


@kernel
def tanh_into(xp: Any, x: Any, out: Any) -> None:
    xp.tanh(x, out=out)


@kernel
def tanh_backward_into(xp: Any, e: Any, y: Any, scratch: Any, out: Any) -> None:
    """out = e * (1 - y^2)."""
    xp.multiply(y, y, out=scratch)
    xp.subtract(1, scratch, out=scratch)
    xp.multiply(e, scratch, out=out)


@kernel
def sigmoid_into(xp: Any, x: Any, out: Any) -> None:
    """1 / (1 + exp(-x)) computed as 0.5 * (1 + tanh(x / 2)): no overflow for large |x|."""
    xp.multiply(x, 0.5, out=out)
    xp.tanh(out, out=out)
    xp.add(out, 1, out=out)
    xp.multiply(out, 0.5, out=out)


@kernel
def sigmoid_backward_into(xp: Any, e: Any, y: Any, scratch: Any, out: Any) -> None:
    """out = e * y (1 - y)."""
    xp.subtract(1, y, out=scratch)
    xp.multiply(scratch, y, out=scratch)
    xp.multiply(e, scratch, out=out)


@kernel
def softmax_into(xp: Any, x: Any, out: Any, row: Any, log_out: Any | None = None) -> None:
    """out = softmax(x) over the last axis, stable for any x (the row maximum is subtracted);
    `row` is scratch of shape (..., 1). With `log_out`, log_softmax(x) = x - max - log(sum exp)
    goes there too, without the log of a probability that underflowed to 0."""
    numpy = xp is np  # the row reductions written out here: this runs on every planned answer
    if numpy:
        _np_max(x, -1, None, row, True)  # (array, axis, dtype, out, keepdims)
    else:
        xp.max(x, axis=-1, keepdims=True, out=row)
    shifted = out if log_out is None else log_out
    xp.subtract(x, row, out=shifted)
    xp.exp(shifted, out=out)
    if numpy:
        _np_sum(out, -1, None, row, True)
    else:
        xp.sum(out, axis=-1, keepdims=True, out=row)
    xp.divide(out, row, out=out)
    if log_out is not None:
        xp.log(row, out=row)
        xp.subtract(log_out, row, out=log_out)


@kernel
def softmax_backward_into(xp: Any, e: Any, y: Any, scratch: Any, row: Any, out: Any) -> None:
    """out = y * (e - sum_j e_j y_j); `scratch` of e's shape and `row` (..., 1) are working memory."""
    xp.multiply(e, y, out=scratch)
    _row_sum(xp, scratch, row)
    xp.subtract(e, row, out=out)
    xp.multiply(out, y, out=out)


@kernel
def copy_into(xp: Any, x: Any, out: Any) -> None:
    """out = x (Dropout at inference, a loss's identity activation)."""
    xp.copyto(out, x)


@kernel
def dropout_into(xp: Any, x: Any, draws: Any, retain: float, mask: Any, out: Any) -> None:
    """Inverted dropout: mask = (draws < retain) / retain, out = x * mask. The backward is
    out = e * mask (one multiply)."""
    xp.less(draws, retain, out=mask, casting="unsafe")
    xp.multiply(mask, 1.0 / retain, out=mask)
    xp.multiply(x, mask, out=out)


@kernel
def dropout_backward_into(xp: Any, e: Any, mask: Any, out: Any) -> None:
    """out = e * mask, the mask dropout_into kept (None at inference: out = e)."""
    if mask is None:
        xp.copyto(out, e)
    else:
        xp.multiply(e, mask, out=out)


@kernel
def uniform_into(device: Any, out: Any) -> None:
    """out = uniform draws in [0, 1) from `device`'s generator (float32 or float64 `out`): a
    replay draws anew, from the generator the device has then."""
    device.rng().random(out=out, dtype=out.dtype)


# ---- losses: the value, and the gradient with respect to the network's last output -------------
@kernel
def cross_entropy_into(xp: Any, z: Any, t: Any, grad: Any, logp: Any, row: Any) -> float:
    """Mean over the batch of -sum(t * log_softmax(z)), for logits z (B, C) and label rows t (B, C).
    Writes d loss / d z = (softmax(z) - t) / B into `grad`; `logp` (B, C) and `row` (B, 1) are
    working memory."""
    b = z.shape[0]
    softmax_into(xp, z, grad, row, log_out=logp)
    logp *= t
    acc = _F32 if logp.dtype == _F16 else logp.dtype  # kit.core.shapes.accumulator, written out: run every step
    loss = -float(_np_sum(logp, None, acc) if xp is np else logp.sum(dtype=acc)) / b
    grad -= t
    grad *= 1.0 / b
    return loss


@kernel
def l2_into(xp: Any, p: Any, g: Any, tmp: Any, l2: float) -> float:
    """g += l2 * p (the gradient of L2 regularisation); returns its penalty 0.5 * l2 * sum(p^2).
    `tmp` is working memory of p's shape."""
    flat = p.reshape(-1)
    penalty = 0.5 * l2 * float(xp.dot(flat, flat))
    xp.multiply(p, l2, out=tmp)
    g += tmp
    return penalty


@kernel
def mse_into(xp: Any, y: Any, t: Any, grad: Any, squares: Any) -> float:
    """Mean over all elements of (y - t)^2; writes its gradient 2 (y - t) / n into `grad`.
    `squares` is working memory of y's shape in the accumulating dtype (float32 for float16:
    squares of float16 differences above 255 overflow float16)."""
    xp.subtract(y, t, out=grad)
    xp.multiply(grad, grad, out=squares, dtype=squares.dtype)
    total = float(squares.sum())
    grad *= 2.0 / y.size
    return total / y.size
