"""Replay: a step recorded where the layers call kernels, and replayed there (tinygrad's TinyJit).

(A worked example of a recorded answer: kit.nn.replay_inference's docstring.)

A step of one batch size does the same arithmetic every time. So the second time a batch size
comes, kit runs the step as the book teaches it while kit.nn.kernels notes each kernel call
(`kernels.TAPE`: the function and its raw arrays). Later steps of that size call those functions
again on the same arrays, the new batch where the recorded one was, and skip the bookkeeping around
them. The updater runs live after the kernels. The workspaces read the same replayed or not
(`Workspace.replay_cycle`). `net.train_plans` and `net.output_plans` count replays (`used`), say why
a network is not replayed (`declined`), and drop a plan when what it fixed changed.

The switch: `switch.on = False` here, `with replay_off():`, or KIT_REPLAY=no (kit.settings), and
every step runs the layers' code: a breakpoint in `Dense.forward` stops at every iteration.
`kit.widgets.TrainingPanel` and the memory timeline say when a step was replayed.

Replayed only where the arithmetic is all kernel calls (`Layer.replayable`, `Loss.replayable`), and
not in mixed precision, on a GPU, for a batch that needs converting, or while a tool watches every
array. Recording is kit.nn.recording, the replayed `Network.output` kit.nn.replay_inference; here:
the switch, the tape, and the training step.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any

import numpy as np

from kit import settings
from kit.arrays.ndarray import NDArray, wrap
from kit.core.memory import count
from kit.nn.layers import HYPER_CHANGES, Layer
from kit.nn.recording import Recorder, record
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE
from kit.workspaces.workspace import DebugMode

__all__ = ["PlanCache", "PlanDeclinedError", "Tape", "TrainingPlans", "declined", "record", "replay_off", "switch"]


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
                "kit.nn.kernels, or recomputes in a workspace of its own (replayable = False): its steps run the layers"
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
        net, rec = self.net, Recorder(self.net.train_mgr)
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


class PlanCache:
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


class TrainingPlans(PlanCache):
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
        fixed += (net.loss_scaler, net.master_dtype, net.device, net.dtype, net.train_mgr, HYPER_CHANGES[0])
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
