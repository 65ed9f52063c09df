"""Replay: a step recorded where the layers call kernels, and replayed there (tinygrad's TinyJit).

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

A step of one batch size does the same arithmetic every time. So, the second time a batch size
comes, kit runs the step as the book teaches it (`Network.output`'s forward, or `fit`'s iteration:
every layer's `forward` and `backward`, the loss, L2) while kit.nn.kernels notes each kernel call
(`kernels.TAPE`): the function and the raw arrays it was given. Later steps of that size call
those functions again on the same arrays, with the new batch where the recorded one was, and skip
the rest: the workspace manager's bookkeeping, the NDArray wrappers, the checks made at every
use. The updater runs live after the kernels (it reads its learning rate and the iteration).

The workspaces read the same replayed or not: the arrays are the arena views the recorded step
was given, and each scope it closed counts one whole cycle with its carves
(`Workspace.replay_cycle`). In NONE mode each array is made anew on the heap at every replay.
`net.train_plans` and `net.output_plans` count the replayed steps (`used`), say why a network is
not replayed (`declined`), and are checked at each use against what a plan fixed (layers, loss,
updater, buffers, device, dtype, the thread's workspaces), dropping it when any changed.

The switch: `switch.on = False` here, `with replay_off():`, or KIT_REPLAY=no in the environment
(kit.settings), and every step runs the layers' code: a breakpoint in `Dense.forward` stops at
every iteration. `kit.widgets.TrainingPanel` says how many of the steps it saw were replayed; a
memory timeline marks each replayed answer ("replay" events) and holds training replays off.

Replayed only where the arithmetic is all kernel calls (`Layer.replayable`, `Loss.replayable`:
Dense, the activations, Dropout, Flatten, Sequential, the losses; not Conv2D, pooling, BatchNorm,
Residual, a subclass with its own forward or backward), and not: mixed precision (the loss scale
moves), training on a GPU (unchecked there), a batch that needs converting (convert the data
once), a view of the batch handed to a kernel, or while a tool watches every array.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any, TypeVar

import numpy as np

from kit import settings
from kit.arrays.checks import all_finite, check_finite
from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray, heap_result, wrap
from kit.core.context import scope_out_of_workspaces
from kit.core.memory import count
from kit.nn.kernels import TAPE
from kit.nn.layers import Layer, call_forward
from kit.nn.workspace_mgr import WS_ACTIVATION_GRAD, LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE
from kit.workspaces.workspace import DebugMode, Workspace

__all__ = [
    "InferencePlan",
    "OutputPlans",
    "PlanDeclinedError",
    "Tape",
    "TrainingPlans",
    "declined",
    "record",
    "replay_off",
    "switch",
]

T = TypeVar("T")


class _Switch:
    """Whether recorded steps are replayed (KIT_REPLAY, yes by default)."""

    on: bool = settings.replay()


switch = _Switch()


@contextlib.contextmanager
def replay_off() -> Iterator[None]:
    """`with replay_off():` every step inside runs the layers' code (the switch, restored after)."""
    before, switch.on = switch.on, False
    try:
        yield
    finally:
        switch.on = before


class PlanDeclinedError(ValueError):
    """The network computes outside the kernel seam somewhere: its steps cannot be replayed."""


def _replayable(layer: Layer) -> bool:
    return layer.replayable and all(_replayable(sub) for sub in layer.sublayers())


def declined(net: Any, training: bool = False) -> str | None:
    """Why `net`'s steps are not replayed (the first reason found), or None when they are."""
    what = "training" if training else "inference"
    for i, layer in enumerate(net.body.layers):
        if not _replayable(layer):
            return (
                f"replayed {what}: layer {i} ({type(layer).__name__}, or a layer inside it) computes outside "
                "kit.nn.kernels (replayable = False): its steps run the layers"
            )
    if not net.loss.replayable:
        return f"replayed {what}: the loss {type(net.loss).__name__} computes outside kit.nn.kernels"
    if training and net.device.kind != "cpu":
        return "replayed training: on a GPU every iteration runs the layers (no GPU run has checked a replay yet)"
    if training and net.precision_managed:
        return "replayed training: mixed precision and loss scaling run the layers (the loss scale moves)"
    return None


def watching() -> bool:
    """A tool that watches every array made is on: a replay would hide its arrays from it."""
    return (
        STATE.recorder is not None or STATE.track_sites or STATE.debug_mode is not DebugMode.DISABLED or STATE.cache.on
    )


def record(run: Callable[[], T]) -> tuple[T, list[tuple[Any, tuple[Any, ...], Any]]]:
    """Run `run()` with kit.nn.kernels noting every kernel called on this thread: its result, the
    calls (a recording inside another notes its calls in its own list only)."""
    before, TAPE.calls = TAPE.calls, []
    calls = TAPE.calls
    try:
        return run(), calls
    finally:
        TAPE.calls = before


class Tape:
    """The kernel calls of one recorded step, with holes: the arrays given anew at each replay
    (the batch; in NONE mode, each array the step made on the heap), which the tape does not keep.
    `complete` is False where a kernel was handed a view of a hole (Flatten over the batch), which
    a replay could not fill; `value` is the sum of what the kernels returned (the loss)."""

    def __init__(self, calls: list[tuple[Any, tuple[Any, ...], Any]], holes: list[Any]) -> None:
        slot = {id(a): i for i, a in enumerate(holes)}
        self.calls: list[tuple[Callable[..., Any], Any]] = []
        self.fills: list[tuple[list[Any], int, int]] = []  # (arguments, position, slot)
        self.value, self.complete = 0.0, True
        for func, args, result in calls:
            if result is not None:
                self.value += result
            places = [(j, slot[id(a)]) for j, a in enumerate(args) if id(a) in slot]
            if places:
                args = list(args)
                for j, i in places:
                    args[j] = None
                    self.fills.append((args, j, i))
            self.complete = self.complete and not any(
                isinstance(a, np.ndarray) and id(a) not in slot and np.may_share_memory(a, h)
                for a in args
                for h in holes
            )
            self.calls.append((func, args))

    def run(self, slots: list[Any]) -> float:
        """Call every kernel again, `slots` in the holes; the sum of what they returned."""
        fills = self.fills
        for args, j, i in fills:
            args[j] = slots[i]
        total = 0.0
        try:
            for func, args in self.calls:
                value = func(*args)
                if value is not None:
                    total += value
        finally:
            for args, j, _ in fills:
                args[j] = None
        return total


# ---- the managers a step is recorded (and its update replayed) with -----------------------------
_NO_SCOPE = contextlib.nullcontext()


class _KeepMgr(LayerWorkspaceMgr):
    """Inference: every array on the heap, kept by the plan (up to `max_bytes`: past them the
    pass finishes on the heap as an unplanned one would, and nothing is kept)."""

    def __init__(self, device: Any, max_bytes: int | None) -> None:
        super().__init__(WorkspaceMode.NONE, "plan/", device, backward_follows=False)
        self.max_bytes, self.recorded, self.over = max_bytes, 0, False

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        with scope_out_of_workspaces():
            buffer = empty(shape, dtype, device)
        self.recorded += buffer.nbytes
        if not self.over and self.max_bytes is not None and self.recorded > self.max_bytes:
            self.over = True
            if TAPE.calls is not None:  # keep none of the pass's arrays alive through its calls
                TAPE.calls.clear()
                TAPE.calls = None
        return buffer

    def iteration(self) -> Any:
        return _NO_SCOPE

    layer_call = updater = iteration


class _Recorder(LayerWorkspaceMgr):
    """Training: hands out what the network's own manager does, noting each array made and each
    scope closed (allocations, bytes, offset, spills, arenas at open and close), in order."""

    def __init__(self, real: LayerWorkspaceMgr) -> None:  # a view of `real`: no workspaces of its own
        self.real, self.mode, self.separate, self.device = real, real.mode, real.separate, real.device
        self.backward_follows = True
        self.made: list[Any] = []
        self.scopes: list[tuple[Workspace, tuple[int, ...], tuple[int, ...]]] = []
        self.reentered = False  # a scope was entered while open already (the plan is not kept)
        self._lent: dict[int, tuple[int, ...]] = {}  # gradient slots lent now: their tally at lending

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        arr = self.real.create(array_type, shape, dtype, device)
        self.made.append(arr.data)
        slot = arr.workspace
        if slot is not None and slot.name.startswith(self.real.prefix + WS_ACTIVATION_GRAD):
            self._lent[id(slot)] = slot.lent_tally
        return arr

    def release(self, grad: Any, keep: Any = None) -> None:
        slot = None if grad is None else grad.workspace
        before = self._lent.get(id(slot)) if slot is not None else None
        self.real.release(grad, keep)
        if before is not None and not slot.is_scope_active:  # the slot's cycle ended: a scope's
            self.scopes.append((slot, before, slot.tally()))
            del self._lent[id(slot)]

    def pin(self, grad: NDArray) -> None:
        self.real.pin(grad)

    def unpin(self, grad: NDArray) -> None:
        self.real.unpin(grad)

    @contextlib.contextmanager
    def _scope(self, ws: Any) -> Iterator[Any]:
        if not isinstance(ws, Workspace):
            yield ws
            return
        self.reentered = self.reentered or ws.is_scope_active
        with ws:
            before = ws.tally()
            try:
                yield ws
            finally:
                self.scopes.append((ws, before, ws.tally()))

    def iteration(self) -> Any:
        return self._scope(self.real.iteration())

    def layer_call(self) -> Any:
        return self._scope(self.real.layer_call())

    def updater(self) -> Any:
        return self._scope(self.real.updater())


class _UpdateMgr(LayerWorkspaceMgr):
    """The live update's manager at each replay: the arrays the recorded update was given, in
    order (an int: a slot of this iteration's heap arrays, NONE mode)."""

    def __init__(self, device: Any, sources: list[Any]) -> None:
        self.mode, self.separate, self.device, self.backward_follows = WorkspaceMode.NONE, False, device, True
        self.sources, self.slots, self.position = sources, [], 0

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        position = self.position
        if position < len(self.sources):
            source = self.sources[position]
            raw = self.slots[source] if isinstance(source, int) else source
            if raw.shape == tuple(shape):
                self.position = position + 1
                return wrap(raw, device, None)
            recorded = f"recorded {raw.shape}"
        else:
            recorded = f"recorded {position} array(s) only"
        raise RuntimeError(
            f"replayed training: the updater asked for array {position + 1}, of shape {tuple(shape)}, where the "
            f"plan {recorded}; clear the plans (net.train_plans.clear())"
        )

    def run(self, net: Any, slots: list[Any]) -> bool:
        """The updater's step with this iteration's arrays: whether it asked for every one recorded."""
        self.slots, self.position = slots, 0
        try:
            net._update(self)
        finally:
            self.slots = []
        return self.position == len(self.sources)


# ---- training -------------------------------------------------------------------------------------
class TrainingPlan:
    """One iteration for one batch size: recorded by running it as written (`record`), replayed as
    its kernel calls, the live update and its scopes' cycles (`replay`)."""

    def __init__(self, net: Any) -> None:
        self.net, self.thread, self.complete = net, get_ident(), False

    def record(self, x: NDArray, y: NDArray) -> float:
        """One ordinary iteration on the network's own features and labels, noted; its score."""
        net, rec = self.net, _Recorder(self.net.train_mgr)
        with rec.iteration():
            score, calls = record(lambda: net._forward_backward(x, y, rec))
            in_step = len(rec.made)
            with rec.updater():
                if math.isfinite(score):
                    net._update(rec)
        heap = rec.mode is WorkspaceMode.NONE
        made = rec.made if heap else []
        self.tape = Tape(calls, [x.data, y.data, *made])
        self.heap = [(a.shape, a.dtype) for a in made]
        self.heap_bytes = sum(a.nbytes for a in made)
        sources = list(range(2 + in_step, 2 + len(made))) if heap else rec.made[in_step:]
        self.update = _UpdateMgr(net.device, sources)
        self.complete = self.tape.complete and self.tape.value == score and not rec.reentered
        self.scopes, self.arenas = [], []
        for ws, before, after in rec.scopes:  # (allocations, bytes, offset, spills, arenas)
            if after[3] != before[3] or after[4] != before[4]:  # spilled or grew: still learning
                self.complete = False
            self.arenas.append((ws, after[4]))
            self.scopes.append((ws, after[0] - before[0], after[1] - before[1], after[2]))
        return score

    def valid(self) -> bool:
        """On the thread it was recorded on, whose workspaces are the ones recorded, with the same
        arenas, and closed."""
        if get_ident() != self.thread or not self.complete:
            return False
        for ws, arenas in self.arenas:
            if ws.destroyed or ws.arena_allocations != arenas or ws.is_scope_active:
                return False
        return True

    def replay(self, x: Any, y: Any) -> float:
        """One iteration on the raw features `x` and labels `y`; its score."""
        slots = [x, y]
        if self.heap:  # NONE: every array new on the heap, counted as mgr.create counts them
            slots += [np.empty(shape, dtype) for shape, dtype in self.heap]
            count(self.net.device, self.heap_bytes, len(self.heap))
        try:
            score = self.tape.run(slots)
            if math.isfinite(score) and not self.update.run(self.net, slots):
                self.complete = False  # the updater asked for fewer arrays: record again
        finally:
            for ws, allocations, nbytes, end in self.scopes:
                ws.replay_cycle(allocations, nbytes, end)
        return score


class _Plans:
    """Plans by batch size, the least recently used dropped first, for what they were made for."""

    def __init__(self, net: Any, limit: int) -> None:
        # a weak way back: dropping the last reference to a network frees it at once
        self.net = weakref.proxy(net)
        self._net = weakref.ref(net)
        self.limit, self.used, self.recorded = limit, 0, 0
        self.declined: str | None = None
        self._plans: OrderedDict[int, Any] = OrderedDict()
        self._seen: OrderedDict[int, int] = OrderedDict()  # batch sizes met, and failed recordings
        self._fixed: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes planned now, the least recently used first."""
        return list(self._plans)

    def clear(self) -> None:
        self._plans.clear()
        self._seen.clear()
        self._fixed = None

    def _current(self, net: Any, fixed: tuple[Any, ...], training: bool) -> bool:
        """Forget the plans when what they fixed changed (each item by identity); whether `net` replays."""
        old = self._fixed
        if old is not None and len(old) == len(fixed):
            for a, b in zip(old, fixed):  # a loop, not any(): this runs on every planned answer
                if a is not b:
                    break
            else:
                return self.declined is None
        self.clear()
        self._fixed = fixed
        self.declined = declined(net, training)
        return self.declined is None

    def _keep(self, batch: int, plan: Any) -> None:
        self._plans[batch] = plan
        self._trim()

    def _trim(self) -> None:
        while self._plans and len(self._plans) > self.limit:
            self._plans.popitem(last=False)


class TrainingPlans(_Plans):
    """`net.train_plans`: a batch size's first iteration runs the layers (the workspaces learn
    their sizes), its second is recorded (again later while an arena still spills or grows), later
    ones are replayed. `used` counts replays, `recorded` recordings; `clear()` drops every plan."""

    def __init__(self, net: Any, limit: int = 4) -> None:
        super().__init__(net, limit)

    def step(self, ds: Any) -> float | None:
        """The score of one replayed (or recorded) iteration on the DataSet `ds`, or None: run it
        as written. The caller holds the network's lock."""
        if not switch.on or watching():
            return None
        net = self._net()
        if not _ready(ds, net):
            return None
        fixed = (net.loss, net.updater, net.flat_params.data, net.flat_grads.data, *net.body.layers, net.l2)
        fixed += (net.loss_scaler, net.master_dtype, net.device, net.dtype, net.train_mgr)
        if not self._current(net, fixed, training=True):
            return None
        x, y = net.checked_batch(ds)  # the checks of an unplanned iteration; nothing to convert
        batch = x.shape[0]
        plan = self._plans.get(batch)
        if plan is not None:
            if plan.valid():
                self._plans.move_to_end(batch)
                score = plan.replay(x.data, y.data)  # .data: a stale batch raises here, as unplanned
                self.used += 1
                return score
            del self._plans[batch]  # the workspaces changed under it: record again
        tries = self._seen.get(batch)
        if tries is None or tries > 4 * (len(net.layers) + 1) or self.limit < 1:
            self._seen[batch] = 0 if tries is None else tries
            return None
        plan = TrainingPlan(self.net)  # the proxy: no cycle through the network
        score = plan.record(x, y)
        self.recorded += 1
        if plan.complete:
            self._keep(batch, plan)
        else:
            self._seen[batch] = tries + 1
        return score


def _ready(ds: Any, net: Any) -> bool:
    """Features and labels are NDArrays of the network's device and dtype: nothing to convert
    (a conversion is an allocation of the iteration, which a replay does not repeat)."""
    features, labels = getattr(ds, "features", None), getattr(ds, "labels", None)
    return all(a.__class__ is NDArray and a.device is net.device and a.dtype is net.dtype for a in (features, labels))


# ---- inference ------------------------------------------------------------------------------------
class InferencePlan:
    """`Network.plan_inference(batch_size)`: a forward pass for `batch_size` examples, recorded once
    on buffers it keeps, replayed. Parameters are read in place (training between calls is seen);
    the answer is a heap copy; a NumPy input of the network's dtype is read where it lies."""

    def __init__(self, net: Any, batch_size: int, first: Any = None, max_bytes: int | None = None) -> None:
        """`first`: the batch to record on (else zeros), whose answer `_answer()` gives; past
        `max_bytes` of buffers nothing is kept (`complete` False) but the answer still comes."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"plan_inference(batch_size={batch_size!r}): must be a positive integer")
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
        mgr = _KeepMgr(net.device, room)
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

    def _pass(self, mgr: _KeepMgr) -> None:
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
            check_finite(target, "features")  # names the first bad value

    def _answer(self) -> NDArray:
        """The result as a heap copy: the next call overwrites the plan's own."""
        if self._cpu:  # NumPy's copy, counted like every heap result
            return heap_result(self._result._data.copy(), self._result._device)
        with scope_out_of_workspaces():
            return self._result.dup()


class OutputPlans(_Plans):
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
        if not self._current(net, (net.loss, net.flat_params._data, net.device, net.dtype, *net.body.layers), False):
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
