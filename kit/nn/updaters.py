"""Updaters on the flat parameter vector: SGD, Nesterov momentum, Adam (DL4J's defaults).

    Sgd(lr=0.1)                       p -= lr * g
    Nesterovs(lr=0.1, momentum=0.9)   DL4J's form: v' = mu v - lr g;  p += -mu v + (1 + mu) v'
    Adam(lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8), with bias correction

State lives in flat buffers the size of the parameters (so ParallelWrapper can average it),
in float32 at least (`state_dtype`: float16 moments underflow, and Adam's epsilon is 0 in
float16); temporaries come from UPDATER_WORKING_MEM.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.arguments import real
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["Adam", "Nesterovs", "Sgd", "Updater", "state_dtype", "updater_from_config"]


def state_dtype(param_dtype: Any) -> np.dtype:
    """The dtype of an updater's state for parameters of `param_dtype`: float32 at least."""
    return np.promote_types(param_dtype, np.float32)


class Updater:
    registry: ClassVar[dict[str, type[Updater]]] = {}
    state_names: tuple[str, ...] = ()
    # apply(scratch=True) does the arithmetic of apply() bit for bit, with the gradient as its
    # working array: a Network then lends it flat_grads (backward writes them anew every iteration)
    # instead of a temporary in UPDATER_WORKING_MEM, as DL4J's updaters turn the gradient view into
    # the update in place. Adam's one-array form rounds differently, so it keeps its temporary.
    # A subclass with its own apply() is not lent the gradient unless it says so itself.
    exact_in_place = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        Updater.registry[cls.__name__] = cls
        if "apply" in cls.__dict__ and "exact_in_place" not in cls.__dict__:
            cls.exact_in_place = False  # its apply may read the gradient after super().apply()

    def __init__(self, lr: float) -> None:
        self.lr = real(type(self).__name__, "lr", lr, low=0, low_open=True, what=" (the learning rate)")

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "lr": self.lr}

    def apply(
        self,
        params: NDArray,
        grads: NDArray,
        state: dict[str, NDArray],
        step: int,
        mgr: LayerWorkspaceMgr,
        scratch: bool = False,
    ):
        """Update `params` in place from `grads` (step counts from 1). `scratch=True`: `grads` is a
        working array made for this one step (mixed precision's unscaled float32 gradient), which
        the update overwrites instead of carving a temporary of its own in UPDATER_WORKING_MEM."""
        raise NotImplementedError


def updater_from_config(cfg: dict[str, Any]) -> Updater:
    cfg = dict(cfg)
    kind = cfg.pop("type", "")
    cls = Updater.registry.get(kind)
    if cls is None:
        raise ValueError(f"unknown updater {kind!r} in a saved configuration; known: {sorted(Updater.registry)}")
    return cls(**cfg)


class Sgd(Updater):
    exact_in_place = True  # lr * g into g, then params -= g: the same two roundings

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__(lr)

    def apply(self, params, grads, state, step, mgr, scratch=False):
        xp = params.device.xp
        if scratch:
            tmp = grads.data
        else:
            tmp = mgr.create(ArrayType.UPDATER_WORKING_MEM, params.shape, params.dtype, params.device)._data
        xp.multiply(grads.data, self.lr, out=tmp)
        params.data -= tmp


class Nesterovs(Updater):
    state_names = ("v",)
    exact_in_place = True  # the gradient is read once, into the array that then holds lr * g

    def __init__(self, lr: float = 0.1, momentum: float = 0.9) -> None:
        super().__init__(lr)
        self.momentum = real("Nesterovs", "momentum", momentum, 0, 1, high_open=True)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "momentum": self.momentum}

    def apply(self, params, grads, state, step, mgr, scratch=False):
        xp, mu = params.device.xp, self.momentum
        v = state["v"].data
        prev = mgr.create(ArrayType.UPDATER_WORKING_MEM, params.shape, params.dtype, params.device).data
        if scratch:  # grads are read once, into tmp itself: the same arithmetic, one temporary fewer
            tmp = grads.data
        else:
            tmp = mgr.create(ArrayType.UPDATER_WORKING_MEM, params.shape, params.dtype, params.device).data
        xp.copyto(prev, v)
        v *= mu
        xp.multiply(grads.data, self.lr, out=tmp)
        v -= tmp  # v' = mu v - lr g
        xp.multiply(prev, -mu, out=prev)
        xp.multiply(v, 1 + mu, out=tmp)
        prev += tmp
        params.data += prev


class Adam(Updater):
    state_names = ("m", "v")

    def __init__(self, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8) -> None:
        super().__init__(lr)
        self.beta1 = real("Adam", "beta1", beta1, 0, 1, high_open=True)
        self.beta2 = real("Adam", "beta2", beta2, 0, 1, high_open=True)
        self.epsilon = real("Adam", "epsilon", epsilon, low=0, low_open=True)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon}

    def apply(self, params, grads, state, step, mgr, scratch=False):
        xp, g = params.device.xp, grads.data
        m, v = state["m"].data, state["v"].data
        if g.dtype != m.dtype:  # half-precision parameters: moments and their arithmetic in float32
            g32 = mgr.create(ArrayType.UPDATER_WORKING_MEM, params.shape, m.dtype, params.device).data
            xp.copyto(g32, g)  # (in float16, g * g underflows to 0 below |g| ~ 2e-4: then m / 0)
            g, scratch = g32, True  # a copy of its own: the update may overwrite it
        if scratch:
            self._apply_in(g, params, m, v, step)
            return
        tmp = mgr.create(ArrayType.UPDATER_WORKING_MEM, params.shape, m.dtype, params.device).data
        m *= self.beta1
        xp.multiply(g, 1 - self.beta1, out=tmp)
        m += tmp
        v *= self.beta2
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - self.beta2
        v += tmp
        alpha = self.lr * math.sqrt(1 - self.beta2**step) / (1 - self.beta1**step)
        xp.sqrt(v, out=tmp)
        tmp += self.epsilon * math.sqrt(1 - self.beta2**step)
        xp.divide(m, tmp, out=tmp)
        tmp *= alpha
        params.data -= tmp

    def _apply_in(self, g: Any, params: NDArray, m: Any, v: Any, step: int) -> None:
        """The same step with `g` as the only working array (it is overwritten): (1 - beta1) g is
        formed in place for m, and squared for v with the factor (1 - beta2) / (1 - beta1)^2, so
        nothing cancels; within float32 rounding of the two-array form above."""
        xp, b1, b2 = params.device.xp, self.beta1, self.beta2
        m *= b1
        g *= 1 - b1
        m += g  # m = b1 m + (1 - b1) g
        xp.multiply(g, g, out=g)
        g *= (1 - b2) / (1 - b1) ** 2
        v *= b2
        v += g  # v = b2 v + (1 - b2) g^2
        alpha = self.lr * math.sqrt(1 - b2**step) / (1 - b1**step)
        xp.sqrt(v, out=g)
        g += self.epsilon * math.sqrt(1 - b2**step)
        xp.divide(m, g, out=g)
        g *= alpha
        params.data -= g
