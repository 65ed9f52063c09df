"""d2l's residual block, ResNet-18's unit: two 3 x 3 convolutions with BatchNorm, and a shortcut.

Residual(128, use_1x1conv=True, stride=2)   (B, C, H, W) -> (B, 128, H/2, W/2)
"""

from __future__ import annotations

from typing import Any

from kit.ndarray import NDArray
from kit.nn.activations import ReLU, relu_grad_into
from kit.nn.batchnorm import BatchNorm
from kit.nn.conv import Conv2D
from kit.nn.layers import ACT, GRAD, Layer, call_backward, call_forward
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["Residual"]


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
