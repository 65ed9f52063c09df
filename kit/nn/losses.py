"""Losses: value and gradient with respect to the network's last output, side by side.

    SoftmaxCrossEntropy()   logits (B, C), one-hot labels (B, C) -> mean over the batch of
                            -sum(labels * log_softmax(logits)); DL4J's OutputLayer(MCXENT, SOFTMAX)
    MSE()                   outputs (B, n), targets (B, n) -> mean over all elements of (y - t)^2

`output()` of a network trained with SoftmaxCrossEntropy returns probabilities (`activate`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from kit.ndarray import NDArray
from kit.nn.layers import softmax_into
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from kit.shapes import accumulator

__all__ = ["MSE", "Loss", "SoftmaxCrossEntropy", "loss_from_config"]


class Loss:
    registry: ClassVar[dict[str, type[Loss]]] = {}
    classification = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        Loss.registry[cls.__name__] = cls

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__}

    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        raise NotImplementedError

    def value(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> float:
        return self.value_and_grad(out, labels, mgr)[0]

    def activate(self, out: NDArray, result: NDArray, mgr: LayerWorkspaceMgr) -> None:
        """Write the prediction for `out` into `result` (identity unless overridden)."""
        out.device.xp.copyto(result.data, out.data)


def loss_from_config(cfg: dict[str, Any]) -> Loss:
    cls = Loss.registry.get(cfg.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown loss {cfg!r} in a saved configuration; known: {sorted(Loss.registry)}")
    return cls()


class SoftmaxCrossEntropy(Loss):
    classification = True

    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        xp, dev, z, t = out.device.xp, out.device, out.data, labels.data
        b = z.shape[0]
        grad = mgr.create(ArrayType.ACTIVATION_GRAD, z.shape, z.dtype, dev)  # becomes the gradient
        p = grad._data  # fresh from mgr.create, like the working arrays below: no check needed
        row = mgr.create(ArrayType.BP_WORKING_MEM, (b, 1), z.dtype, dev)._data
        logp = mgr.create(ArrayType.BP_WORKING_MEM, z.shape, z.dtype, dev)._data
        # log_softmax = z - max - log(sum(exp(z - max))): stable for any logits
        z.max(axis=1, keepdims=True, out=row)
        xp.subtract(z, row, out=logp)
        xp.exp(logp, out=p)
        p.sum(axis=1, keepdims=True, out=row)
        xp.divide(p, row, out=p)  # softmax
        xp.log(row, out=row)
        logp -= row
        logp *= t
        loss = -float(logp.sum(dtype=accumulator(logp.dtype))) / b
        p -= t
        p *= 1.0 / b  # d loss / d logits = (softmax - labels) / B
        return loss, grad

    def activate(self, out: NDArray, result: NDArray, mgr: LayerWorkspaceMgr) -> None:
        row = mgr.create(ArrayType.FF_WORKING_MEM, (out.shape[0], 1), out.dtype, out.device).data
        softmax_into(out.device.xp, out.data, result.data, row)


class MSE(Loss):
    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        xp, dev, y, t = out.device.xp, out.device, out.data, labels.data
        g = mgr.create(ArrayType.ACTIVATION_GRAD, y.shape, y.dtype, dev)
        xp.subtract(y, t, out=g.data)
        acc = accumulator(y.dtype)  # squares of float16 differences above 255 overflow float16
        sq = mgr.create(ArrayType.BP_WORKING_MEM, y.shape, acc, dev).data
        xp.multiply(g.data, g.data, out=sq, dtype=acc)
        total = float(sq.sum())
        g.data *= 2.0 / y.size
        return total / y.size, g
