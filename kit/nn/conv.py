"""Convolution, pooling, batch normalisation and the residual block (ResNet-18's parts).

    Conv2D(64, 3, padding=1)      (B, C, H, W) -> (B, 64, H, W)     im2col + one matmul
    MaxPool2D(2), AvgPool2D(2)    (B, C, H, W) -> (B, C, H/2, W/2)
    GlobalAvgPool()               (B, C, H, W) -> (B, C)
    BatchNorm()                   (B, F) or (B, C, H, W), batch statistics in training
    Residual(128, use_1x1conv=True, stride=2)   d2l's block: two 3x3 convs + shortcut

im2col: a strided *view* of the padded input presents every k x k window; one copy turns it
into a (B*OH*OW, C*k*k) matrix in working memory, and a single matmul does the convolution.
Backward recomputes that matrix in BP working memory instead of keeping it from forward:
it costs one more copy and is what lets WorkspaceMode.SEPARATE keep only one layer's columns
alive at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.ndarray import NDArray
from kit.nn.layers import ACT, BP, FF, GRAD, Layer, ParamSpec, ReLU, call_backward, call_forward, relu_grad_into
from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["AvgPool2D", "BatchNorm", "Conv2D", "GlobalAvgPool", "MaxPool2D", "Residual"]


def _as_strided(xp: Any, a: Any, shape: tuple, strides: tuple) -> Any:
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def _out_size(n: int, k: int, s: int, p: int, what: str) -> int:
    out = (n + 2 * p - k) // s + 1
    if out < 1:
        raise ValueError(f"{what}: kernel {k} with stride {s} and padding {p} does not fit an input of size {n}")
    return out


def _padded(x: Any, p: int, fill: float, mgr: LayerWorkspaceMgr, kind: Any, device: Any) -> Any:
    """x (B, C, H, W) with p pixels of `fill` around it, in working memory (x itself if p == 0)."""
    if p == 0:
        return x
    b, c, h, w = x.shape
    out = mgr.create(kind, (b, c, h + 2 * p, w + 2 * p), x.dtype, device).data
    out.fill(fill)
    out[:, :, p : p + h, p : p + w] = x
    return out


def _windows(xpad: Any, xp: Any, k: int, s: int, oh: int, ow: int) -> Any:
    """(B, OH, OW, C, k, k) view of every window of xpad (B, C, Hp, Wp)."""
    sb, sc, sh, sw = xpad.strides
    b, c = xpad.shape[:2]
    return _as_strided(xp, xpad, (b, oh, ow, c, k, k), (sb, sh * s, sw * s, sc, sh, sw))


class Conv2D(Layer):
    def __init__(self, out_channels: int, kernel: int, stride: int = 1, padding: int = 0, weight_init: str = "he"):
        super().__init__()
        for name, v, low in (("out_channels", out_channels, 1), ("kernel", kernel, 1), ("stride", stride, 1)):
            if not isinstance(v, int) or v < low:
                raise ValueError(f"Conv2D({name}={v!r}): must be an integer >= {low}")
        if not isinstance(padding, int) or padding < 0:
            raise ValueError(f"Conv2D(padding={padding!r}): must be an integer >= 0")
        self.out_channels, self.kernel, self.stride, self.padding = out_channels, kernel, stride, padding
        self.weight_init = weight_init

    def config(self) -> dict[str, Any]:
        return {
            "type": "Conv2D",
            "out_channels": self.out_channels,
            "kernel": self.kernel,
            "stride": self.stride,
            "padding": self.padding,
            "weight_init": self.weight_init,
        }

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(
                f"Conv2D needs (batch, channels, height, width) inputs, got per-example shape {input_shape}"
            )
        _c, h, w = input_shape
        k, s, p = self.kernel, self.stride, self.padding
        return (self.out_channels, _out_size(h, k, s, p, "Conv2D"), _out_size(w, k, s, p, "Conv2D"))

    def param_specs(self) -> list[ParamSpec]:
        c = self.input_shape[0]  # type: ignore[index]
        k, oc = self.kernel, self.out_channels
        return [
            ParamSpec("W", (oc, c, k, k), self.weight_init, c * k * k, oc * k * k, regularize=True),
            ParamSpec("b", (oc,), "zeros"),
        ]

    def _columns(self, x: Any, xp: Any, mgr: LayerWorkspaceMgr, kind: Any, device: Any) -> Any:
        b = x.shape[0]
        c, oh, ow = self.input_shape[0], self.output_shape[1], self.output_shape[2]  # type: ignore[index]
        k = self.kernel
        xpad = _padded(x, self.padding, 0.0, mgr, kind, device)
        cols = mgr.create(kind, (b, oh, ow, c, k, k), x.dtype, device).data
        xp.copyto(cols, _windows(xpad, xp, k, self.stride, oh, ow))
        return cols.reshape(b * oh * ow, c * k * k)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev = x.device.xp, x.device
        self._x = x
        b = x.shape[0]
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        cols = self._columns(x.data, xp, mgr, FF, dev)  # (B*OH*OW, C*k*k)
        w = self.params["W"].data.reshape(oc, -1)  # (OC, C*k*k)
        out = mgr.create(FF, (b * oh * ow, oc), x.dtype, dev).data
        xp.matmul(cols, w.T, out=out)
        y = mgr.create(ACT, (b, oc, oh, ow), x.dtype, dev)
        xp.copyto(y.data, out.reshape(b, oh, ow, oc).transpose(0, 3, 1, 2))
        y.data += self.params["b"].data.reshape(1, oc, 1, 1)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray | None:
        xp, dev = eps.device.xp, eps.device
        x = self._x.data
        b, c, h, w_in = x.shape
        oc, oh, ow = self.output_shape  # type: ignore[misc]
        k, s, p = self.kernel, self.stride, self.padding
        e = mgr.create(BP, (b, oh, ow, oc), eps.dtype, dev).data
        xp.copyto(e, eps.data.transpose(0, 2, 3, 1))
        e2 = e.reshape(b * oh * ow, oc)
        cols = self._columns(x, xp, mgr, BP, dev)
        xp.matmul(e2.T, cols, out=self.grads["W"].data.reshape(oc, -1))
        xp.sum(eps.data, axis=(0, 2, 3), out=self.grads["b"].data)
        if self.skip_input_grad:
            return None
        dcols = mgr.create(BP, (b * oh * ow, c * k * k), eps.dtype, dev).data
        xp.matmul(e2, self.params["W"].data.reshape(oc, -1), out=dcols)
        dc = dcols.reshape(b, oh, ow, c, k, k)
        dxpad = mgr.create(BP, (b, c, h + 2 * p, w_in + 2 * p), eps.dtype, dev).data if p else None
        dx = mgr.create(GRAD, x.shape, eps.dtype, dev)
        target = dxpad if p else dx.data
        target.fill(0)
        for i in range(k):  # col2im: each kernel offset adds its slice back
            for j in range(k):
                target[:, :, i : i + s * oh : s, j : j + s * ow : s] += dc[:, :, :, :, i, j].transpose(0, 3, 1, 2)
        if p:
            xp.copyto(dx.data, dxpad[:, :, p : p + h, p : p + w_in])
        return dx


class _Pool2D(Layer):
    def __init__(self, kernel: int = 2, stride: int | None = None, padding: int = 0) -> None:
        super().__init__()
        stride = kernel if stride is None else stride
        if not isinstance(kernel, int) or kernel < 1 or not isinstance(stride, int) or stride < 1:
            raise ValueError(f"{type(self).__name__}(kernel={kernel!r}, stride={stride!r}): positive integers")
        if not isinstance(padding, int) or padding < 0 or padding * 2 > kernel:
            raise ValueError(f"{type(self).__name__}(padding={padding!r}): an integer from 0 to kernel // 2")
        self.kernel, self.stride, self.padding = kernel, stride, padding

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "kernel": self.kernel, "stride": self.stride, "padding": self.padding}

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"{type(self).__name__} needs (batch, C, H, W) inputs, got per-example {input_shape}")
        c, h, w = input_shape
        k, s, p = self.kernel, self.stride, self.padding
        name = type(self).__name__
        return (c, _out_size(h, k, s, p, name), _out_size(w, k, s, p, name))

    def _window_matrix(self, x: NDArray, mgr: LayerWorkspaceMgr, fill: float) -> Any:
        """(B, C, OH, OW, k*k) copy of every window, in FF working memory."""
        xp, dev = x.device.xp, x.device
        b = x.shape[0]
        c, oh, ow = self.output_shape  # type: ignore[misc]
        k = self.kernel
        xpad = _padded(x.data, self.padding, fill, mgr, FF, dev)
        flat = mgr.create(FF, (b, oh, ow, c, k, k), x.dtype, dev).data
        xp.copyto(flat, _windows(xpad, xp, k, self.stride, oh, ow))
        return flat.transpose(0, 3, 1, 2, 4, 5).reshape(b, c, oh, ow, k * k)

    def _scatter(self, eps: NDArray, mgr: LayerWorkspaceMgr, weight: Any) -> NDArray:
        """dx = sum over kernel offsets (i, j) of eps * weight(i, j), placed at each window's pixel."""
        xp, dev = eps.device.xp, eps.device
        b = eps.shape[0]
        c, h, w = self.input_shape  # type: ignore[misc]
        _, oh, ow = self.output_shape  # type: ignore[misc]
        k, s, p = self.kernel, self.stride, self.padding
        dx = mgr.create(GRAD, (b, c, h, w), eps.dtype, dev)
        target = mgr.create(BP, (b, c, h + 2 * p, w + 2 * p), eps.dtype, dev).data if p else dx.data
        target.fill(0)
        tmp = mgr.create(BP, eps.shape, eps.dtype, dev).data
        for i in range(k):
            for j in range(k):
                weight(i * k + j, tmp)
                target[:, :, i : i + s * oh : s, j : j + s * ow : s] += tmp
        if p:
            xp.copyto(dx.data, target[:, :, p : p + h, p : p + w])
        return dx


class MaxPool2D(_Pool2D):
    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev = x.device.xp, x.device
        flat = self._window_matrix(x, mgr, -np.inf)  # (B, C, OH, OW, k*k)
        self._arg = mgr.create(ACT, flat.shape[:-1], np.intp, dev)  # which pixel won: kept for backward
        xp.argmax(flat, axis=-1, out=self._arg.data)
        y = mgr.create(ACT, flat.shape[:-1], x.dtype, dev)
        xp.max(flat, axis=-1, out=y.data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp = eps.device.xp
        arg, e = self._arg.data, eps.data

        def weight(offset: int, out: Any) -> None:
            xp.equal(arg, offset, out=out, casting="unsafe")  # 1.0 where this offset won
            xp.multiply(out, e, out=out)

        return self._scatter(eps, mgr, weight)


class AvgPool2D(_Pool2D):
    """Average over each window, padding counted as zeros (count_include_pad)."""

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        flat = self._window_matrix(x, mgr, 0.0)
        y = mgr.create(ACT, flat.shape[:-1], x.dtype, x.device)
        x.device.xp.mean(flat, axis=-1, out=y.data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, e, scale = eps.device.xp, eps.data, 1.0 / (self.kernel * self.kernel)

        def weight(offset: int, out: Any) -> None:
            xp.multiply(e, scale, out=out)

        return self._scatter(eps, mgr, weight)


class GlobalAvgPool(Layer):
    """(B, C, H, W) -> (B, C): the mean of each channel."""

    def _output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"GlobalAvgPool needs (batch, C, H, W) inputs, got per-example {input_shape}")
        return (input_shape[0],)

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        y = mgr.create(ACT, x.shape[:2], x.dtype, x.device)
        x.device.xp.mean(x.data, axis=(2, 3), out=y.data)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp = eps.device.xp
        c, h, w = self.input_shape  # type: ignore[misc]
        dx = mgr.create(GRAD, (eps.shape[0], c, h, w), eps.dtype, eps.device)
        xp.copyto(dx.data, eps.data[:, :, None, None])
        dx.data *= 1.0 / (h * w)
        return dx


class BatchNorm(Layer):
    """Batch normalisation over the batch (and spatial) axes; DL4J's defaults decay 0.9, eps 1e-5.
    Training uses batch statistics and updates the running ones; evaluation uses the running ones."""

    def __init__(self, decay: float = 0.9, eps: float = 1e-5) -> None:
        super().__init__()
        if not 0.0 <= decay < 1.0 or eps <= 0:
            raise ValueError(f"BatchNorm(decay={decay!r}, eps={eps!r}): decay in [0, 1), eps > 0")
        self.decay, self.eps = decay, eps

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

    def _axes_and_view(self, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        c = self.input_shape[0]  # type: ignore[index]
        return ((0,), (1, c)) if ndim == 2 else ((0, 2, 3), (1, c, 1, 1))

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        self._check_input(x)
        xp, dev, d = x.device.xp, x.device, x.data
        axes, view = self._axes_and_view(d.ndim)
        c = view[1]
        self._training = training
        stat = mgr.create(ACT, (2, c), d.dtype, dev).data  # [mean, 1/std] kept for backward
        mean, inv_std = stat[0], stat[1]
        xhat = mgr.create(ACT, d.shape, d.dtype, dev).data
        if training:
            xp.mean(d, axis=axes, out=mean)
            xp.subtract(d, mean.reshape(view), out=xhat)
            sq = mgr.create(FF, d.shape, d.dtype, dev).data
            xp.multiply(xhat, xhat, out=sq)
            var = mgr.create(FF, (c,), d.dtype, dev).data
            xp.mean(sq, axis=axes, out=var)  # biased batch variance, no hidden temporaries
            tmp = mgr.create(FF, (c,), d.dtype, dev).data
            for running, batch in ((self.params["mean"].data, mean), (self.params["var"].data, var)):
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
        self._xhat, self._stat = xhat, stat
        y = mgr.create(ACT, d.shape, d.dtype, dev)
        xp.multiply(xhat, self.params["gamma"].data.reshape(view), out=y.data)
        y.data += self.params["beta"].data.reshape(view)
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev, e = eps.device.xp, eps.device, eps.data
        axes, view = self._axes_and_view(e.ndim)
        xhat, inv_std = self._xhat, self._stat[1]
        t = mgr.create(BP, e.shape, e.dtype, dev).data
        xp.multiply(e, xhat, out=t)
        xp.sum(t, axis=axes, out=self.grads["gamma"].data)
        xp.sum(e, axis=axes, out=self.grads["beta"].data)
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
        # dx = gamma/std * (eps - mean(eps) - xhat * mean(eps * xhat))
        m1 = mgr.create(BP, view, e.dtype, dev).data
        m2 = mgr.create(BP, view, e.dtype, dev).data
        xp.sum(e, axis=axes, keepdims=True, out=m1)
        xp.sum(t, axis=axes, keepdims=True, out=m2)
        m1 *= 1.0 / n
        m2 *= 1.0 / n
        xp.multiply(xhat, m2, out=dx.data)
        xp.subtract(e, dx.data, out=dx.data)
        dx.data -= m1
        dx.data *= scale
        return dx


class Residual(Layer):
    """d2l's residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with a 1x1
    convolution on the shortcut when the shape changes (use_1x1conv)."""

    def __init__(self, channels: int, use_1x1conv: bool = False, stride: int = 1) -> None:
        super().__init__()
        self.channels, self.use_1x1conv, self.stride = channels, use_1x1conv, stride
        self.main = [
            Conv2D(channels, 3, stride=stride, padding=1),
            BatchNorm(),
            ReLU(),
            Conv2D(channels, 3, padding=1),
            BatchNorm(),
        ]
        self.shortcut = [Conv2D(channels, 1, stride=stride)] if use_1x1conv else []

    def config(self) -> dict[str, Any]:
        return {"type": "Residual", "channels": self.channels, "use_1x1conv": self.use_1x1conv, "stride": self.stride}

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

    def forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        xp = x.device.xp
        h = x
        for layer in self.main:
            h = call_forward(layer, h, mgr, training)
        s = call_forward(self.shortcut[0], x, mgr, training) if self.shortcut else x
        y = mgr.create(ACT, h.shape, h.dtype, h.device)
        xp.add(h.data, s.data, out=y.data)
        xp.maximum(y.data, 0, out=y.data)
        self._y = y
        return y

    def backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        xp, dev = eps.device.xp, eps.device
        g = mgr.create(GRAD, eps.shape, eps.dtype, dev)  # eps through the final ReLU
        with mgr.layer_call():  # a composite's own working memory gets its own scope
            relu_grad_into(eps, self._y, g, mgr)
        d = g
        for layer in reversed(self.main):
            d = call_backward(layer, d, mgr)
        ds = call_backward(self.shortcut[0], g, mgr) if self.shortcut else g
        dx = mgr.create(GRAD, d.shape, d.dtype, dev)
        xp.add(d.data, ds.data, out=dx.data)
        return dx
