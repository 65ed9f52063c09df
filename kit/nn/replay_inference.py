"""Replayed inference: `Network.output` answered by a recorded forward pass (kit.nn.replay).

    >>> import numpy as np
    >>> from kit.nn import mlp
    >>> net = mlp(8, hidden=(16,), n_out=3)
    >>> x = np.random.default_rng(0).random((1, 8)).astype(np.float32)
    >>> _ = net.output(x), net.output(x)       # a batch size seen twice: its second pass is recorded
    >>> net.output_plans.used, net.output_plans.batch_sizes
    (1, [1])
    >>> plan = net.plan_inference(batch_size=1)
    >>> [func.__name__ for func, _ in plan.tape.calls]      # what Dense, ReLU, Dense, softmax called
    ['dense_into', 'relu_into', 'dense_into', 'softmax_into']

An `InferencePlan` runs the layers' forward once on buffers it keeps (kit.nn.recording's
KeepMgr), noting the kernels they call, and answers later batches of its size by calling those
kernels again on the same buffers, the new batch in the input's place; a NumPy batch of the
network's dtype is read where it lies. `OutputPlans` keeps one per batch size, within a count
and a byte budget; kit.nn.replay has the switch and says which networks are replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.arrays.checks import all_finite, check_cast, check_finite, narrow_remedy
from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray, heap_result
from kit.core.arguments import whole
from kit.core.context import scope_out_of_workspaces
from kit.nn.layers import HYPER_CHANGES, call_forward
from kit.nn.recording import KeepMgr, record
from kit.nn.replay import PlanCache, PlanDeclinedError, Tape, declined, switch
from kit.state import STATE

__all__ = ["InferencePlan", "OutputPlans"]


class InferencePlan:
    """`Network.plan_inference(batch_size)`: a forward pass for `batch_size` examples, recorded once
    on buffers it keeps, replayed. Parameters are read in place (training between calls is seen);
    the answer is a heap copy; a NumPy input of the network's dtype is read where it lies."""

    def __init__(self, net: Any, batch_size: int, first: Any = None, max_bytes: int | None = None) -> None:
        """`first`: the batch to record on (else zeros), whose answer `_answer()` gives; past
        `max_bytes` of buffers nothing is kept (`complete` False) but the answer still comes."""
        batch_size = whole("plan_inference", "batch_size", batch_size)
        reason = declined(net)
        if reason is not None:
            raise PlanDeclinedError(reason)
        self.net, self.batch_size, self._dtype = net, batch_size, net.dtype
        self.input_shape = (batch_size, *net.input_shape)
        self._cpu = net.device.kind == "cpu"
        with scope_out_of_workspaces():
            self._input = empty(self.input_shape, net.dtype, net.device)
            self._result = empty((batch_size, *net.output_shape), net.dtype, net.device)
        room = None if max_bytes is None else max_bytes - self._input.nbytes - self._result.nbytes
        mgr = KeepMgr(net.device, room)
        if first is None:
            self._input.data.fill(0)
        else:
            self._load(first)
        with net.lock:
            _, calls = record(lambda: self._pass(mgr))
        self.complete = not mgr.over
        self.tape = Tape(calls, [self._input._data])
        if not self.tape.complete:  # a kernel reads a view of the input: always copy into it
            self.tape = Tape(calls, [])
        self.buffer_bytes = mgr.recorded + self._input.nbytes + self._result.nbytes

    def _pass(self, mgr: KeepMgr) -> None:
        x = self._input
        for layer in self.net.body.layers:
            x = call_forward(layer, x, mgr, False)
        self.net.loss.activate(x, self._result, mgr)

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
        """The answer for `raw` (of the input shape); the caller holds the network's lock."""
        if raw.__class__ is np.ndarray and raw.dtype is self._dtype and self._cpu and self.tape.fills:
            if not all_finite(raw):
                check_finite(raw, "features")  # names the first bad value
            self.tape.run([raw])  # the kernels read the caller's array
        else:
            self._load(raw)
            self.tape.run([self._input._data])
        if STATE.recorder is not None:  # a memory timeline: this answer allocated none of the arrays it used
            STATE.recorder.replay(self.net.device, self.buffer_bytes)
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
            if isinstance(raw, np.ndarray):  # finite values the network's dtype cannot hold: said so
                check_cast(raw, target, "features", narrow_remedy(self._dtype))
            check_finite(target, "features")  # names the first bad value

    def _answer(self) -> NDArray:
        """The result as a heap copy: the next call overwrites the plan's own."""
        if self._cpu:  # NumPy's copy, counted like every heap result
            return heap_result(self._result._data.copy(), self._result._device)
        with scope_out_of_workspaces():
            return self._result.dup()


class OutputPlans(PlanCache):
    """`net.output_plans`: the plans `Network.output` answers with in inference, one per batch size
    (from a size's second call: that call records, and its pass is the answer), at most `limit`
    of at most `max_bytes` of buffers in all (`resize`). `used` counts planned answers."""

    def __init__(self, net: Any, limit: int = 8, max_bytes: int = 64 << 20) -> None:
        super().__init__(net, limit)
        self._example_shape = net.input_shape
        self.max_bytes = max_bytes
        self._too_big = 0  # batches of this many rows or more: over max_bytes (0: none yet)

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
        super()._trim()
        while self._plans and self.buffer_bytes > self.max_bytes:
            self._plans.popitem(last=False)

    @property
    def buffer_bytes(self) -> int:
        return sum(plan.buffer_bytes for plan in self._plans.values())

    def clear(self) -> None:
        super().clear()
        self._too_big = 0

    def answer(self, x: Any) -> NDArray | None:
        """The planned answer for x, or None where no plan applies (Network.output then runs the
        layers): the switch off, another device or dtype, a shape the network refuses, a batch size
        seen once, too many bytes, a network that declines. The caller holds the lock."""
        if not switch.on:
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
        if shape[1:] != self._example_shape or not shape[0]:
            return None
        batch = shape[0]
        if self._too_big and batch >= self._too_big:
            return None
        fixed = (net.loss, net.flat_params._data, net.device, net.dtype, HYPER_CHANGES[0], *net.body.layers)
        if not self._current(net, fixed, False):
            return None
        plan = self._plans.get(batch)
        if plan is None:
            return self._new(batch, raw)
        if len(self._plans) > 1:
            self._plans.move_to_end(batch)
        answer = plan._run(raw)
        self.used += 1
        return answer

    def _new(self, batch: int, raw: Any) -> NDArray | None:
        """Record a plan for `batch` on `raw` and give its answer, or None: a batch size seen once, no room."""
        if batch not in self._seen:  # a batch size asked for once (the last of an epoch) is not worth a plan
            self._seen[batch] = 0
            if len(self._seen) > 4 * max(self.limit, 1):
                self._seen.popitem(last=False)
            return None
        if self.limit < 1:
            return None
        plan = InferencePlan(self.net, batch, first=raw, max_bytes=self.max_bytes)
        self.recorded += 1
        if plan.complete:
            self._keep(batch, plan)
        else:
            self._too_big = batch if not self._too_big else min(batch, self._too_big)
        self.used += 1
        return plan._answer()
