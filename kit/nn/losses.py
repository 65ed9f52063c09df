"""Losses: value and gradient with respect to the network's last output, side by side.

    SoftmaxCrossEntropy()   logits (B, C), one-hot labels (B, C) -> mean over the batch of
                            -sum(labels * log_softmax(logits)); DL4J's OutputLayer(MCXENT, SOFTMAX)
    MSE()                   outputs (B, n), targets (B, n) -> mean over all elements of (y - t)^2

`output()` of a network trained with SoftmaxCrossEntropy returns probabilities (`activate`).
The arithmetic is in kit.nn.kernels (cross_entropy_into, mse_into, softmax_into), the seam
kit.nn.replay records a step at: each kernel that returns a number returns the loss.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kit.arrays.ndarray import NDArray
from kit.core.shapes import accumulator
from kit.nn.kernels import copy_into, cross_entropy_into, mse_into, softmax_into
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["MSE", "Loss", "SoftmaxCrossEntropy", "loss_from_config", "rows_of_scores"]


class Loss:
    registry: ClassVar[dict[str, type[Loss]]] = {}
    classification = False
    # kit.nn.replay: activate and value_and_grad compute through kit.nn.kernels alone, and only the
    # kernels that compute the loss return a number
    replayable = True

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        Loss.registry[cls.__name__] = cls
        # a subclass's own activate or value_and_grad is not replayed on its parent's promise
        if ("activate" in cls.__dict__ or "value_and_grad" in cls.__dict__) and "replayable" not in cls.__dict__:
            cls.replayable = False

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__}

    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        raise NotImplementedError

    def value(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> float:
        return self.value_and_grad(out, labels, mgr)[0]

    def activate(self, out: NDArray, result: NDArray, mgr: LayerWorkspaceMgr) -> None:
        """Write the prediction for `out` into `result` (identity unless overridden)."""
        copy_into(out.device.xp, out.data, result.data)


def loss_from_config(cfg: dict[str, Any]) -> Loss:
    cls = Loss.registry.get(cfg.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown loss {cfg!r} in a saved configuration; known: {sorted(Loss.registry)}")
    return cls()


def rows_of_scores(shape: tuple[int, ...], loss: str) -> None:
    """A classification loss scores one row of class scores per example: (B, classes)."""
    if len(shape) != 2:
        raise ValueError(
            f"{loss} scores one row of class scores per example, but the network's output has shape "
            f"{tuple(shape)} (each example {tuple(shape[1:])}); end the layers with Flatten() and a Dense "
            "layer with one output per class"
        )


class SoftmaxCrossEntropy(Loss):
    classification = True
    replayable = True

    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        dev, z, t = out.device, out.data, labels.data
        if z.ndim != 2:
            rows_of_scores(z.shape, "SoftmaxCrossEntropy")
        grad = mgr.create(ArrayType.ACTIVATION_GRAD, z.shape, z.dtype, dev)  # becomes the gradient
        # fresh from mgr.create, like the working arrays below: no check needed
        row = mgr.create(ArrayType.BP_WORKING_MEM, (z.shape[0], 1), z.dtype, dev)._data
        logp = mgr.create(ArrayType.BP_WORKING_MEM, z.shape, z.dtype, dev)._data
        return cross_entropy_into(dev.xp, z, t, grad._data, logp, row), grad

    def activate(self, out: NDArray, result: NDArray, mgr: LayerWorkspaceMgr) -> None:
        if out.ndim != 2:
            rows_of_scores(out.shape, "SoftmaxCrossEntropy")
        row = mgr.create(ArrayType.FF_WORKING_MEM, (out.shape[0], 1), out.dtype, out.device).data
        softmax_into(out.device.xp, out.data, result.data, row)


class MSE(Loss):
    replayable = True

    def value_and_grad(self, out: NDArray, labels: NDArray, mgr: LayerWorkspaceMgr) -> tuple[float, NDArray]:
        dev, y, t = out.device, out.data, labels.data
        g = mgr.create(ArrayType.ACTIVATION_GRAD, y.shape, y.dtype, dev)
        squares = mgr.create(ArrayType.BP_WORKING_MEM, y.shape, accumulator(y.dtype), dev).data
        return mse_into(dev.xp, y, t, g.data, squares), g
