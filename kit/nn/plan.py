"""Planned inference: a network's forward pass for one batch size, captured once and replayed.

    >>> import numpy as np
    >>> from kit.nn import mlp
    >>> net = mlp(8, hidden=(16,), n_out=3)
    >>> plan = net.plan_inference(batch_size=1)        # buffers fixed now, once
    >>> x = np.random.default_rng(0).random((1, 8))
    >>> bool(np.allclose(plan.output(x).numpy(), net.output(x, planned=False).numpy()))
    True
    >>> plan.buffer_bytes > 0
    True
    >>> _ = net.output(x), net.output(x)               # output() plans by itself: a batch size seen twice
    >>> net.output_plans.used, len(net.output_plans)
    (1, 1)

The CPU analogue of a captured CUDA graph. The first pass records every array the layers ask
their LayerWorkspaceMgr for (activations, working memory) and keeps them. Each later call is a
fixed list of steps over those buffers: each layer names its step beside its forward
(`Layer.plan_step`: Dense, the activations and Dropout call their kernel from kit.nn.kernels with
`out=` on the raw arrays; `Loss.plan_step`: the softmax); a layer without one that says its forward
can be replayed (`plan_replay`) runs that forward again and receives the same buffers in the
same order. A network with a layer that is neither is declined (PlanDeclinedError). A call
allocates nothing but its answer, opens no workspace, and skips the per-call checks
`Network.output` makes (conversion of the input, device and dtype checks, scopes, one NDArray per
op). The input still gets one finiteness check (kit.checks): NaN data is refused. On the CPU a
first step built as partial(kernel, xp, x, ...) reads a NumPy input of the network's dtype where
it lies, without copying it into the plan first.

A plan serves one batch size (a request of another size is an error naming both); parameters are
read in place, so training between calls is seen; the answer is a copy, safe to keep.

`Network.output` uses plans by itself (`OutputPlans`, `net.output_plans`): in inference, for a
NumPy array or an NDArray of the network's device and dtype, from the second call with a batch
size on (that call records the plan, and the recording pass is its answer), at most `limit` plans
(the least recently used is dropped) of at most `max_bytes` of buffers in all. They are dropped
when what a plan fixed changes: the loss object, the layer list, the parameter buffer, the device
or the dtype (parameter values are read in place: set_params, fit, copy_state_from and
ParallelInference's updates need no new plan).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from kit.arrays.checks import all_finite, check_finite
from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray, heap_result
from kit.core.context import scope_out_of_workspaces
from kit.nn.layers import call_forward
from kit.nn.plan_recording import PlanDeclinedError, PlanMismatchError, ReplayMgr, declined

__all__ = ["InferencePlan", "OutputPlans", "PlanDeclinedError", "PlanMismatchError"]


class InferencePlan:
    """`Network.plan_inference(batch_size)`: forward passes for `batch_size` examples, replayed."""

    def __init__(self, net: Any, batch_size: int, first: Any = None, max_bytes: int | None = None) -> None:
        """`first`: a batch to record the plan with (checked and loaded as `output` does), whose
        answer `_answer()` then gives; without it the plan is recorded on zeros. `max_bytes`: give
        up keeping buffers past that many bytes (`complete` is then False: the plan cannot be
        replayed, but `_answer()` still gives the recording pass's answer)."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"plan_inference(batch_size={batch_size!r}): must be a positive integer")
        reason = declined(net)
        if reason is not None:
            raise PlanDeclinedError(reason)
        self.net, self.batch_size = net, batch_size
        self.input_shape = (batch_size, *net.input_shape)
        self._cpu = net.device.kind == "cpu"
        with scope_out_of_workspaces():
            self._input = empty(self.input_shape, net.dtype, net.device)
            self._result = empty((batch_size, *net.output_shape), net.dtype, net.device)
        room = None if max_bytes is None else max_bytes - self._input.nbytes - self._result.nbytes
        self._mgr = ReplayMgr(net.device, room)
        self._dtype = net.dtype
        if first is None:
            self._input.data.fill(0)
        else:
            self._load(first)
        with net.lock:
            steps = self._capture()  # every buffer the layers ask for is made and kept
        self._mgr.capturing = False
        self.complete = not self._mgr.over
        self._calls = [step for _, step in steps]
        self._head = self._head_kernel(steps[0]) if self._cpu and steps else None
        self._tail = self._calls[1:]
        self.direct_steps = sum(1 for kind, _ in steps if kind == "direct")
        self.replayed_steps = len(steps) - self.direct_steps
        self.buffer_bytes = self._mgr.recorded + self._input.nbytes + self._result.nbytes

    def _capture(self) -> list[tuple[str, Callable[[], Any]]]:
        net, mgr, xp = self.net, self._mgr, self.net.device.xp
        steps = []
        x = self._input
        for layer in net.body.layers:
            start = len(mgr.buffers)
            y = call_forward(layer, x, mgr, False)
            if mgr.over:  # over max_bytes: the pass finishes for its answer, nothing is planned
                x = y
                continue
            fast = layer.plan_step(xp, x.data, y.data, [b.data for b in mgr.buffers[start:]])
            if fast is None and not layer.plan_replay:
                raise PlanDeclinedError(f"planned inference: {type(layer).__name__}.plan_step gave no kernel")
            steps.append(("direct", fast) if fast is not None else ("replay", self._replay(layer, x, start)))
            x = y
        start = len(mgr.buffers)
        net.loss.activate(x, self._result, mgr)
        if mgr.over:
            return []
        fast = net.loss.plan_step(xp, x.data, self._result.data, [b.data for b in mgr.buffers[start:]])
        steps.append(("direct", fast) if fast is not None else ("replay", self._replay_loss(x, start)))
        return steps

    def _head_kernel(self, first: tuple[str, Callable[[], Any]]) -> tuple[Any, ...] | None:
        """The first step as (kernel, xp, the arguments after x) when it is
        partial(kernel, xp, x, ...) on the plan's input: a NumPy input of the network's dtype is
        then passed to the kernel as it is, not copied into the plan first."""
        kind, step = first
        if kind == "direct" and isinstance(step, partial) and len(step.args) > 1 and step.args[1] is self._input._data:
            if not step.keywords:
                return step.func, step.args[0], step.args[2:]
        return None

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
        with self.net.lock:
            return self._run(raw)

    def _run(self, raw: Any) -> NDArray:
        """The answer for `raw` (a NumPy array of the input shape, or an array of the network's
        device); the caller holds the network's lock."""
        head = self._head
        if head is not None and raw.__class__ is np.ndarray and raw.dtype is self._dtype:
            if not all_finite(raw):
                check_finite(raw, "features")  # names the first bad value
            kernel, xp, rest = head
            kernel(xp, raw, *rest)  # the first layer reads the caller's array
            for step in self._tail:
                step()
            return self._answer()
        self._load(raw)
        for step in self._calls:
            step()
        return self._answer()

    def _load(self, raw: Any) -> None:
        """Copy `raw` into the plan's input (cast to the network's dtype) and check it there."""
        if self._cpu:
            target = self._input._data
            target[...] = raw  # casts as copyto(casting="unsafe") does, without its Python wrapper
        else:
            target = self._input.data
            if isinstance(raw, np.ndarray):
                self._input.assign(raw.astype(self._dtype, copy=False))
            else:
                self.net.device.xp.copyto(target, raw, casting="unsafe")
        if not all_finite(target):
            check_finite(target, "features")  # names the first bad value

    def _answer(self) -> NDArray:
        """The result as a heap copy: the next call overwrites the plan's own."""
        if self._cpu:  # NumPy's copy, counted like every heap result
            return heap_result(self._result._data.copy(), self._result._device)
        with scope_out_of_workspaces():
            return self._result.dup()


class OutputPlans:
    """The plans `Network.output` answers with (`net.output_plans`): one per batch size.

    `used` counts the answers a plan gave, `captured` the plans made; `declined` says why this
    network is not planned (None when it is). Set `enabled = False` to answer every call
    unplanned; `clear()` drops every plan; `resize()` sets the bounds."""

    def __init__(self, net: Any, limit: int = 8, max_bytes: int = 64 << 20) -> None:
        # the network holds these plans: a weak way back, so that dropping the last reference to a
        # network frees it (and its workspaces) at once, not at the next cyclic garbage collection
        self.net = weakref.proxy(net)
        self._net = weakref.ref(net)  # the hot path: one call, then plain attribute reads
        self._example_shape = net.input_shape
        self.enabled = True
        self._plans: OrderedDict[int, InferencePlan] = OrderedDict()
        self.limit, self.max_bytes = limit, max_bytes  # the bounds: change them with resize()
        self.used = 0
        self.captured = 0
        self.declined: str | None = None
        self._seen: OrderedDict[int, None] = OrderedDict()  # batch sizes asked for once
        self._too_big = 0  # batches of this many rows or more: over max_bytes (0: none yet)
        self._fixed: tuple[Any, ...] | None = None  # what the plans were made for

    def __len__(self) -> int:
        return len(self._plans)

    def resize(self, limit: int | None = None, max_bytes: int | None = None) -> None:
        """New bounds: at most `limit` plans (0 plans nothing), at most `max_bytes` of buffers in all
        (a batch whose plan alone needs more runs unplanned). Plans over them are dropped now."""
        with self.net.lock:
            if limit is not None:
                self.limit = limit
            if max_bytes is not None:
                self.max_bytes, self._too_big = max_bytes, 0
            self._trim()

    def _trim(self) -> None:
        """Drop the least recently used plans until both bounds hold."""
        plans = self._plans
        while plans and (len(plans) > self.limit or self.buffer_bytes > self.max_bytes):
            plans.popitem(last=False)

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes planned now, the least recently used first."""
        return list(self._plans)

    @property
    def buffer_bytes(self) -> int:
        return sum(plan.buffer_bytes for plan in self._plans.values())

    def clear(self) -> None:
        with self.net.lock:
            self._plans.clear()
            self._seen.clear()
            self._too_big = 0
            self._fixed = None

    def _refit(self, net: Any) -> bool:
        """What the plans fixed changed (or nothing is fixed yet): forget them, and say whether
        the network as it is now can be planned."""
        self.clear()
        self._fixed = (net.loss, net.flat_params._data, list(net.body.layers), net.device, net.dtype)
        self.declined = declined(net)
        return self.declined is None

    def answer(self, x: Any) -> NDArray | None:
        """The planned answer for x, or None where no plan applies (Network.output then runs
        unplanned): another device or dtype, a shape the network refuses, a batch size seen for
        the first time, too many bytes, a network that declines. The caller holds the lock."""
        if not self.enabled:
            return None
        net = self._net()
        if type(x) is np.ndarray:  # NumPy numbers, or an NDArray of the network's device and dtype
            raw = x
            if raw.dtype.kind not in "fiu":
                return None
        elif isinstance(x, NDArray) and x._device is net.device and x.dtype == net.dtype:
            raw = x.data
        else:
            return None
        shape = raw.shape
        if shape[1:] != self._example_shape or not shape[0]:  # a 0-d array fails the first test
            return None
        batch = shape[0]
        if self._too_big and batch >= self._too_big:
            return None
        if not self._still_fixed(net):
            if not self._refit(net):
                return None
        elif self.declined is not None:
            return None
        plans = self._plans
        plan = plans.get(batch)
        if plan is None:
            return self._new(batch, raw)
        if len(plans) > 1:
            plans.move_to_end(batch)
        answer = plan._run(raw)
        self.used += 1
        return answer

    def _still_fixed(self, net: Any) -> bool:
        """What the plans were made for is still the network's (the layers compared item by item)."""
        fixed = self._fixed
        return (
            fixed is not None
            and fixed[0] is net.loss
            and fixed[1] is net.flat_params._data
            and fixed[2] == net.body.layers
            and fixed[3] is net.device
            and fixed[4] is net.dtype
        )

    def _new(self, batch: int, raw: Any) -> NDArray | None:
        """Record a plan for `batch` on `raw` and give its answer (the recording pass computes it),
        or None: a batch size seen for the first time, no room."""
        seen = self._seen
        if batch not in seen:  # a batch size asked for once (the last of an epoch) is not worth a plan
            seen[batch] = None
            if len(seen) > 4 * max(self.limit, 1):
                seen.popitem(last=False)
            return None
        if self.limit < 1:
            return None
        # holds the proxy: no cycle through the network; stops keeping buffers past max_bytes
        plan = InferencePlan(self.net, batch, first=raw, max_bytes=self.max_bytes)
        self.captured += 1
        if plan.complete:
            self._plans[batch] = plan
            self._trim()  # the least recently used go first; the new plan fits on its own
        else:
            self._too_big = batch if not self._too_big else min(batch, self._too_big)
        self.used += 1
        return plan._answer()
