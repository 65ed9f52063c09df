"""Planned inference: a network's forward pass for one batch size, captured once and replayed.

    >>> import numpy as np
    >>> from kit.nn import mlp
    >>> net = mlp(8, hidden=(16,), n_out=3)
    >>> plan = net.plan_inference(batch_size=1)        # buffers fixed now, once
    >>> x = np.random.default_rng(0).random((1, 8))
    >>> bool(np.allclose(plan.output(x).numpy(), net.output(x).numpy()))
    True
    >>> plan.buffer_bytes > 0
    True

The CPU analogue of a captured CUDA graph. The first pass records every array the layers ask
their LayerWorkspaceMgr for (activations, working memory) and keeps them. Each later call is a
fixed list of steps over those buffers: the common layers (Dense, ReLU, Tanh, Dropout) and the
softmax become direct kernel calls with `out=` on the raw arrays; any other layer runs its own
forward again and receives the same buffers in the same order. A call allocates nothing but its
answer, opens no workspace, and skips the per-call checks `Network.output` makes (conversion of
the input, device and dtype checks, scopes, one NDArray per op). The input still gets one
finiteness check: NaN data is refused.

A plan serves one batch size (a request of another size is an error naming both); parameters are
read in place, so training between calls is seen; the answer is a copy, safe to keep.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.context import scope_out_of_workspaces
from kit.creation import empty
from kit.ndarray import NDArray, heap_result
from kit.nn.layers import call_forward, softmax_into
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode

__all__ = ["InferencePlan", "PlanMismatchError"]


class PlanMismatchError(ValueError):
    """A layer asked for a different array on replay than when the plan was captured."""


_NO_SCOPE = contextlib.nullcontext()


class _ReplayMgr(LayerWorkspaceMgr):
    """Hands out the arrays recorded in the capture pass, in the same order."""

    def __init__(self, device: Any) -> None:
        super().__init__(WorkspaceMode.NONE, "plan/", device)
        self.buffers: list[NDArray] = []
        self.capturing = True
        self.position = 0

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        if self.capturing:
            with scope_out_of_workspaces():
                buffer = empty(shape, dtype, device)
            self.buffers.append(buffer)
            return buffer
        buffer = self.buffers[self.position]
        if buffer.shape != tuple(shape):
            raise PlanMismatchError(
                f"planned inference: a layer asked for an array of shape {tuple(shape)} where the plan recorded "
                f"{buffer.shape} (array {self.position}); the network changed shape since it was planned: plan again"
            )
        self.position += 1
        return buffer

    def iteration(self) -> Any:
        return _NO_SCOPE

    def layer_call(self) -> Any:
        return _NO_SCOPE

    def updater(self) -> Any:
        return _NO_SCOPE


def _fast_step(layer: Any, x: Any, y: Any, xp: Any) -> Callable[[], Any] | None:
    """A direct kernel call for the common layers (raw arrays, out=), or None: replay the layer."""
    kind = type(layer).__name__
    if kind == "Dense":
        w, b, mm, add = layer.params["W"].data, layer.params["b"].data, xp.matmul, xp.add
        return lambda: add(mm(x, w, out=y), b, out=y)
    if kind == "ReLU":
        mx = xp.maximum
        return lambda: mx(x, 0, out=y)
    if kind == "Tanh":
        th = xp.tanh
        return lambda: th(x, out=y)
    if kind == "Dropout":  # identity at inference
        cp = xp.copyto
        return lambda: cp(y, x)
    return None


def _softmax_step(xp: Any, z: Any, out: Any, row: Any) -> Callable[[], Any]:
    if xp is not np:
        return lambda: softmax_into(xp, z, out, row)
    # NumPy: the ufuncs' own reduce, without np.max/np.sum's Python wrappers (3 us each on a
    # (1, 10) array, more than the arithmetic)
    mx, sub, ex, add, div = np.maximum.reduce, np.subtract, np.exp, np.add.reduce, np.divide

    def step() -> None:
        mx(z, axis=-1, keepdims=True, out=row)
        sub(z, row, out=out)
        ex(out, out=out)
        add(out, axis=-1, keepdims=True, out=row)
        div(out, row, out=out)

    return step


class InferencePlan:
    """`Network.plan_inference(batch_size)`: forward passes for `batch_size` examples, replayed."""

    def __init__(self, net: Any, batch_size: int) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"plan_inference(batch_size={batch_size!r}): must be a positive integer")
        self.net, self.batch_size = net, batch_size
        self.input_shape = (batch_size, *net.input_shape)
        self._mgr = _ReplayMgr(net.device)
        with scope_out_of_workspaces():
            self._input = empty(self.input_shape, net.dtype, net.device)
            self._result = empty((batch_size, *net.output_shape), net.dtype, net.device)
        self._input.data.fill(0)
        with net._lock:
            self._steps = self._capture()  # every buffer the layers ask for is made and kept
        self._mgr.capturing = False
        self.direct_steps = sum(1 for kind, _ in self._steps if kind == "direct")
        self.replayed_steps = len(self._steps) - self.direct_steps
        self.buffer_bytes = sum(b.nbytes for b in self._mgr.buffers) + self._input.nbytes + self._result.nbytes

    def _capture(self) -> list[tuple[str, Callable[[], Any]]]:
        net, mgr, xp = self.net, self._mgr, self.net.device.xp
        steps = []
        x = self._input
        for layer in net.body.layers:
            start = len(mgr.buffers)
            y = call_forward(layer, x, mgr, False)
            fast = _fast_step(layer, x.data, y.data, xp)
            steps.append(("direct", fast) if fast is not None else ("replay", self._replay(layer, x, start)))
            x = y
        start = len(mgr.buffers)
        net.loss.activate(x, self._result, mgr)
        if type(net.loss).__name__ == "SoftmaxCrossEntropy":
            row, z, out = mgr.buffers[start].data, x.data, self._result.data
            steps.append(("direct", _softmax_step(xp, z, out, row)))
        else:
            steps.append(("replay", self._replay_loss(x, start)))
        return steps

    def _replay(self, layer: Any, x: NDArray, start: int) -> Callable[[], Any]:
        mgr = self._mgr

        def step() -> None:
            mgr.position = start
            layer.forward(x, mgr, False)

        return step

    def _replay_loss(self, x: NDArray, start: int) -> Callable[[], Any]:
        mgr, loss, result = self._mgr, self.net.loss, self._result

        def step() -> None:
            mgr.position = start
            loss.activate(x, result, mgr)

        return step

    def output(self, x: Any) -> NDArray:
        """Predictions for a batch of exactly `batch_size` examples (a heap copy of the answer)."""
        raw = x.numpy() if isinstance(x, NDArray) else np.asarray(x)
        if raw.shape != self.input_shape:
            raise ValueError(f"this plan serves batches of shape {self.input_shape}, got {raw.shape}: plan another")
        if raw.dtype.kind not in "fiu":
            raise TypeError(f"features must be real numbers, got dtype {raw.dtype}")
        net = self.net
        with net._lock:
            target = self._input.data
            cpu = net.device.kind == "cpu"
            if cpu:
                target[...] = raw  # casts as copyto(casting="unsafe") does, without its Python wrapper
                total = np.add.reduce(target, axis=None)  # a finiteness probe without np.sum's wrapper
            else:
                self._input.assign(raw.astype(net.dtype, copy=False))
                total = float(target.sum())
            if not math.isfinite(total):
                net._check_finite(self._input, "features")  # names the first bad value
            for _, step in self._steps:
                step()
            if cpu:  # the answer as a heap copy: NumPy's copy, counted like every heap result
                return heap_result(self._result._data.copy(), self._result._device)
            with scope_out_of_workspaces():
                return self._result.dup()
