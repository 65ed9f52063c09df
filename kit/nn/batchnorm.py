"""Batch normalisation (its kernels, and the per-channel sums it takes, are in kit.nn.image_kernels).

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

from kit.arrays.ndarray import NDArray
from kit.core.arguments import real
from kit.core.backend import RawArray
from kit.core.shapes import accumulator
from kit.nn.image_kernels import (
    batchnorm_backward_into,
    batchnorm_eval_into,
    batchnorm_train_into,
    channel_scratch_size,
)
from kit.nn.layers import ACT, BP, FF, GRAD, Hyper, Layer, ParamSpec
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["BatchNorm"]


class BatchNorm(Layer):
    """Batch normalisation over the batch (and spatial) axes; DL4J's defaults decay 0.9, eps 1e-5.
    Training uses batch statistics and updates the running ones; evaluation uses the running ones.
    For backward it keeps its input and the per-channel [mean, 1/std]; the normalised input is
    made again in backward's working memory (one more pass over the input, and one array fewer
    kept per layer)."""

    output_read_by_backward = False
    replayable = True  # its arithmetic is kit.nn.image_kernels'
    decay = Hyper(lambda v: real("BatchNorm", "decay", v, 0, 1, high_open=True))
    eps = Hyper(lambda v: real("BatchNorm", "eps", v, low=0, low_open=True))

    def __init__(self, decay: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        self.decay, self.eps = decay, eps  # checked by their Hyper

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

    def _sums_scratch(self, d: RawArray, acc: np.dtype, mgr: LayerWorkspaceMgr, kind: ArrayType) -> RawArray | None:
        """Working memory for the per-channel sums of d (plain and squared), or None where they need none."""
        size = max(channel_scratch_size(d.shape, d.dtype, acc, squares) for squares in (False, True))
        return mgr.create(kind, (size,), acc, self.params["gamma"].device).data if size else None

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        dev, d, p = x.device, x.data, self.params
        c = self.input_shape[0]  # type: ignore[index]
        self._training = training
        acc = accumulator(d.dtype)  # statistics of float16 data in float32
        kept = ACT if mgr.backward_follows else FF  # what only a backward reads: working memory in inference
        stat = mgr.create(kept, (2, c), acc, dev).data  # [mean, 1/std] kept for backward
        xhat = mgr.create(FF, d.shape, d.dtype, dev).data  # backward makes it again from x and the statistics
        if training:
            var, tmp = mgr.create(FF, (c,), acc, dev).data, mgr.create(FF, (c,), acc, dev).data
            centred = None if acc == d.dtype else mgr.create(FF, d.shape, acc, dev).data
            scratch = self._sums_scratch(d, acc, mgr, FF)
            y = mgr.create(ACT, d.shape, d.dtype, dev)
            batchnorm_train_into(
                dev.xp, d, p["gamma"].data, p["beta"].data, p["mean"].data, p["var"].data, stat, xhat, var, tmp,
                centred, y.data, scratch, self.decay, self.eps, not mgr.recomputing,
            )  # fmt: skip
        else:
            y = mgr.create(ACT, d.shape, d.dtype, dev)
            gamma, beta = p["gamma"].data, p["beta"].data
            batchnorm_eval_into(dev.xp, d, gamma, beta, p["mean"].data, p["var"].data, stat, xhat, y.data, self.eps)
        # backward keeps the input (the previous layer's output, alive anyway) and the statistics,
        # not the normalised input nor the output: a ReLU after it may then run in place
        self._x, self._stat = (x, stat) if mgr.backward_follows else (None, None)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        dev, e = eps.device, eps.data
        view = (1, e.shape[1]) if e.ndim == 2 else (1, e.shape[1], 1, 1)
        xhat = mgr.create(BP, e.shape, e.dtype, dev).data  # made again: (x - mean) / std
        t = mgr.create(BP, e.shape, e.dtype, dev).data
        g = self.grads
        scratch = self._sums_scratch(e, g["gamma"].dtype, mgr, BP)
        dx = mgr.create(GRAD, e.shape, e.dtype, dev)
        scale = mgr.create(BP, view, e.dtype, dev).data
        m1, m2 = (mgr.create(BP, view, e.dtype, dev).data for _ in "12") if self._training else (None, None)
        batchnorm_backward_into(
            dev.xp, self._x.data, e, self._stat, self.params["gamma"].data, g["gamma"].data, g["beta"].data,
            (g["mean"].data, g["var"].data), xhat, t, scale, m1, m2, dx.data, scratch,
        )  # fmt: skip
        self._x = self._stat = None  # used up
        return dx
