"""Activations: ReLU, Tanh, Sigmoid and Softmax, each keeping its output y for its backward pass.

    >>> import numpy as np
    >>> from kit.nn import Dense, Network, ReLU, Softmax
    >>> net = Network([Dense(4), ReLU(), Dense(3), Softmax()], input_shape=(2,))
    >>> bool(np.allclose(net.output(np.ones((1, 2), np.float32), planned=False).numpy().sum(), 1))
    True

Each is a Layer (kit.nn.layers) with no parameters; its kernels are in kit.nn.kernels, and its
planned kernels (`plan_step`, `plan_train_forward`, `plan_backward`) sit beside its forward and
backward, as Dense's do.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kit.arrays.ndarray import NDArray
from kit.core.shapes import BOOL_DTYPE
from kit.nn.kernels import (
    relu_backward_into,
    relu_into,
    sigmoid_backward_into,
    sigmoid_into,
    softmax_backward_into,
    softmax_into,
    tanh_backward_into,
    tanh_into,
)
from kit.nn.layers import ACT, BP, FF, GRAD, Layer
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["ReLU", "Sigmoid", "Softmax", "Tanh", "relu_grad_into"]


class ReLU(Layer):
    """max(x, 0); backward reads the output (where it is positive). It runs in place, over its
    input, where the layer before it does not read its own output in backward (`in_place`, set
    when its container is built: kit.nn.layers.mark_in_place), as PyTorch's ReLU(inplace=True)."""

    forward_working_memory = False
    runs_in_place = True

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        raw, dev = x.data, x._device
        y = x if self.in_place else mgr.create(ACT, raw.shape, raw.dtype, dev)
        relu_into(dev.xp, raw, y._data)
        self._y = y if mgr.backward_follows else None
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        e = eps._data  # checked in relu_grad_into
        dx = mgr.create(GRAD, e.shape, e.dtype, eps._device)
        y, self._y = self._y, None  # used up, as Dense's input
        relu_grad_into(eps, y, dx, mgr)
        return dx

    plan_replay = True

    def plan_step(self, xp: Any, x: Any, y: Any, buffers: list[Any]) -> Callable[[], Any]:
        return partial(relu_into, xp, x, y)

    plan_train_forward = plan_step

    def plan_backward(self, xp: Any, x: Any, y: Any, e: Any, dx: Any, buffers: list[Any]) -> partial[Any]:
        return partial(relu_backward_into, xp, e, y, buffers[1], dx)  # buffers: dx, then the mask


def relu_grad_into(eps: NDArray, y: NDArray, out: NDArray, mgr: LayerWorkspaceMgr) -> None:
    """out = eps where the ReLU output y was positive, else 0 (the mask in BP working memory)."""
    e, dev = eps.data, eps._device
    mask = mgr.create(BP, e.shape, BOOL_DTYPE, dev)._data
    relu_backward_into(dev.xp, e, y.data, mask, out.data)


class _Elementwise(Layer):
    """An activation y = f(x) whose backward needs y and one array of BP working memory."""

    forward_working_memory = False
    plan_replay = True
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

    def plan_step(self, xp: Any, x: Any, y: Any, buffers: list[Any]) -> Callable[[], Any]:
        return partial(type(self).kernel, xp, x, y)

    plan_train_forward = plan_step

    def plan_backward(self, xp: Any, x: Any, y: Any, e: Any, dx: Any, buffers: list[Any]) -> partial[Any]:
        return partial(type(self).backward_kernel, xp, e, y, buffers[0], dx)  # buffers: scratch, dx


class Tanh(_Elementwise):
    kernel, backward_kernel = staticmethod(tanh_into), staticmethod(tanh_backward_into)


class Sigmoid(_Elementwise):
    kernel, backward_kernel = staticmethod(sigmoid_into), staticmethod(sigmoid_backward_into)


class Softmax(Layer):
    """Softmax over the last axis (numerically stable: the row maximum is subtracted)."""

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

    plan_replay = True

    def plan_step(self, xp: Any, x: Any, y: Any, buffers: list[Any]) -> Callable[[], Any]:
        return partial(softmax_into, xp, x, y, buffers[-1])  # the (B, 1) working array asked for after y

    plan_train_forward = plan_step

    def plan_backward(self, xp: Any, x: Any, y: Any, e: Any, dx: Any, buffers: list[Any]) -> partial[Any]:
        return partial(softmax_backward_into, xp, e, y, buffers[0], buffers[1], dx)  # scratch, row, dx
