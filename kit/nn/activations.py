"""Activations: ReLU, Tanh, Sigmoid and Softmax, each keeping its output y for its backward pass.

    >>> import numpy as np
    >>> from kit.nn import Dense, Network, ReLU, Softmax
    >>> net = Network([Dense(4), ReLU(), Dense(3), Softmax()], input_shape=(2,))
    >>> bool(np.allclose(net.output(np.ones((1, 2), np.float32), planned=False).numpy().sum(), 1))
    True

Each is a Layer (kit.nn.layers) with no parameters; its kernels are in kit.nn.kernels, where a
step kit.nn.replay records is replayed. ReLU is written in kit.nn.layers, beside Dense and
`mark_in_place` (which decides when it runs in place, over its input) and re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kit.arrays.ndarray import NDArray
from kit.nn.kernels import (
    sigmoid_backward_into,
    sigmoid_into,
    softmax_backward_into,
    softmax_into,
    tanh_backward_into,
    tanh_into,
)
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ReLU, relu_grad_into
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["ReLU", "Sigmoid", "Softmax", "Tanh", "relu_grad_into"]


class _Elementwise(Layer):
    """An activation y = f(x) whose backward needs y and one array of BP working memory."""

    forward_working_memory = False
    replayable = True
    kernel: Callable[[Any, Any, Any], None]
    backward_kernel: Callable[[Any, Any, Any, Any, Any], None]

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        y = mgr.create(ACT, x.shape, x.dtype, x.device)
        type(self).kernel(x.device.xp, x.data, y.data)
        self._y = y if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        dev = eps.device
        scratch = mgr.create(BP, eps.shape, eps.dtype, dev).data
        dx = mgr.create(GRAD, eps.shape, eps.dtype, dev)
        type(self).backward_kernel(dev.xp, eps.data, self._y.data, scratch, dx.data)
        self._y = None  # used up
        return dx


class Tanh(_Elementwise):
    kernel, backward_kernel = staticmethod(tanh_into), staticmethod(tanh_backward_into)


class Sigmoid(_Elementwise):
    kernel, backward_kernel = staticmethod(sigmoid_into), staticmethod(sigmoid_backward_into)


class Softmax(Layer):
    """Softmax over the last axis (numerically stable: the row maximum is subtracted)."""

    replayable = True

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        y = mgr.create(ACT, x.shape, x.dtype, x.device)
        softmax_into(x.device.xp, x.data, y.data, mgr.create(FF, (*x.shape[:-1], 1), x.dtype, x.device).data)
        self._y = y if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        dev, e = eps.device, eps.data
        scratch = mgr.create(BP, e.shape, e.dtype, dev).data
        row = mgr.create(BP, (*e.shape[:-1], 1), e.dtype, dev).data
        dx = mgr.create(GRAD, e.shape, e.dtype, dev)
        softmax_backward_into(dev.xp, e, self._y.data, scratch, row, dx.data)
        self._y = None  # used up
        return dx
