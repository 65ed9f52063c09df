"""d2l's residual block, ResNet-18's unit: two 3 x 3 convolutions with BatchNorm, and a shortcut.

Residual(128, use_1x1conv=True, stride=2)   (B, C, H, W) -> (B, 128, H/2, W/2)
Residual(128, recompute=True)               keeps its input and output only (kit.nn.recompute)
"""

from __future__ import annotations

from typing import Any

from kit.arrays.ndarray import NDArray
from kit.nn.activations import ReLU, relu_grad_into
from kit.nn.batchnorm import BatchNorm
from kit.nn.conv import Conv2D
from kit.nn.image_kernels import add_into, add_relu_into
from kit.nn.init import check_init
from kit.nn.layers import ACT, GRAD, Layer, call_backward, call_forward, mark_in_place
from kit.nn.recompute import RecomputeView
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["Residual"]


class Residual(Layer):
    """d2l's residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with a 1x1
    convolution on the shortcut when the shape changes (use_1x1conv). Replayed (kit.nn.replay)
    unless recomputed: a recomputed block's activations live in a workspace of its own, whose
    cycles a replay does not repeat."""

    replayable = True

    def __init__(
        self,
        channels: int,
        use_1x1conv: bool = False,
        stride: int = 1,
        weight_init: str = "he",
        recompute: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(recompute, bool):
            raise TypeError(f"Residual(recompute={recompute!r}): True or False")
        self.channels, self.use_1x1conv, self.stride = channels, use_1x1conv, stride
        self.weight_init, self.recompute = check_init("Residual", weight_init), recompute
        self.replayable = not recompute
        self._x: NDArray | None = None  # the input a recomputed block keeps
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
        if self.recompute:
            cfg["recompute"] = True
        return cfg

    def sublayers(self) -> list[Layer]:
        return self.main + self.shortcut

    def build(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        self.input_shape = tuple(input_shape)
        shape = self.input_shape
        for layer in self.main:
            shape = layer.build(shape)
        mark_in_place(self.main)  # the ReLU after the first BatchNorm runs in place
        short = self.shortcut[0].build(self.input_shape) if self.shortcut else self.input_shape
        if short != shape:
            raise ValueError(
                f"Residual({self.channels}, stride={self.stride}): the main path gives {shape} but the "
                f"shortcut gives {short}; use use_1x1conv=True when channels or stride change"
            )
        self.output_shape = shape
        return shape

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        xp = x.device.xp
        if self.recompute and training and mgr.backward_follows:  # keep x and y only
            self._x, self._training = x, training
            view = RecomputeView(mgr, backward_follows=False, recomputing=False)
            with view.scope():
                h, s = self._paths(x, view, training)
                y = mgr.create(ACT, h.shape, h.dtype, h.device)
                add_relu_into(xp, h.data, s.data, y.data)
            self._y = y
            return y
        self._x = None  # nothing to recompute
        h, s = self._paths(x, mgr, training)
        # the sum and its ReLU over the last BatchNorm's output, in place: its backward does not read it
        y = h if not self.main[-1].output_read_by_backward else mgr.create(ACT, h.shape, h.dtype, h.device)
        add_relu_into(xp, h.data, s.data, y.data)
        self._y = y if mgr.backward_follows else None
        return y

    def _paths(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> tuple[NDArray, NDArray]:
        """The main path's output and the shortcut's (x itself without a 1x1 convolution)."""
        h = x
        for layer in self.main:
            h = call_forward(layer, h, mgr, training)
        s = call_forward(self.shortcut[0], x, mgr, training) if self.shortcut else x
        return h, s

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """eps through the final ReLU (g), then both paths from g. Each gradient is handed back
        (mgr.release) after its last reader: eps once g is made, g (pinned meanwhile) after both
        paths, so at most three are held at once. A recomputed block first runs its forward
        again, into its own workspace, for as long as its backward runs."""
        if self._x is not None:  # a recomputed block
            x, self._x = self._x, None
            view = RecomputeView(mgr, backward_follows=True, recomputing=True)
            with view.scope():
                self._paths(x, view, self._training)
                return self._backward(eps, view)
        return self._backward(eps, mgr)

    def _backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev = eps.device.xp, eps.device
        g = mgr.create(GRAD, eps.shape, eps.dtype, dev)  # eps through the final ReLU
        with mgr.layer_call():  # a composite's own working memory gets its own scope
            relu_grad_into(eps, self._y, g, mgr)
        self._y = None  # used up
        if self.releases_given_gradient:  # its caller will not read eps again (kit.nn.layers.Sequential)
            mgr.release(eps)
        mgr.pin(g)  # the main path must not hand it back: the shortcut reads it after
        try:
            d = g
            for layer in reversed(self.main):
                dx = call_backward(layer, d, mgr)
                mgr.release(d, keep=dx)
                d = dx
            ds = call_backward(self.shortcut[0], g, mgr) if self.shortcut else g
        finally:
            mgr.unpin(g)
        add_into(xp, d.data, ds.data, d.data)  # d is this block's own: the sum goes in place
        mgr.release(ds)
        mgr.release(g)
        return d
