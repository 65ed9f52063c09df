"""Planned training: one training iteration for one batch size, recorded once and replayed.

    >>> from kit.data import ArrayIterator, DataSet, load_digits
    >>> from kit.nn import Sgd, mlp
    >>> digits, _ = load_digits()                     # float64, as NumPy makes them
    >>> net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1))
    >>> _ = net.fit(ArrayIterator(digits, batch_size=100), epochs=2)
    >>> net.train_plans.used                          # each batch is cast to float32: unplanned
    0
    >>> train = DataSet(digits.features.numpy().astype(net.dtype), digits.labels.numpy())  # once
    >>> _ = net.fit(ArrayIterator(train, batch_size=100), epochs=2)
    >>> plans = net.train_plans   # a batch size's first batch runs unplanned, its second is recorded
    >>> plans.batch_sizes, plans.recorded, plans.used   # 1,438 digits: 14 batches of 100, one of 38
    ([100, 38], 2, 26)

The training half of what kit.nn.plan does for `output()`. An iteration of `fit` does the same
arithmetic every time on a batch of the same size: forward, loss, backward, the update. Run
through the layers, each array is asked of the LayerWorkspaceMgr, wrapped in an NDArray and
checked at every use: bookkeeping the arithmetic does not need once the iteration is known
(`python -m kit bench train` times the step against the same math written in NumPy).
A plan runs one ordinary iteration through a recording manager and keeps, for each layer, the
call of its kernel (kit.nn.kernels) over the raw arrays that iteration used: `plan_train_forward`
and `plan_backward` beside each layer's forward and backward, `plan_value_and_grad` beside the
loss's. Each later iteration of that batch size runs those calls, then the updater (live: it
reads its learning rate and the iteration number at every step).

The workspaces stay what the chapters measure. In SINGLE and SEPARATE the arrays are the arena
views the recorded iteration was given, at the same offsets, which is what a cyclic workspace
hands out anyway; after the arithmetic, each scope the recorded iteration closed counts one whole
cycle with the carves it made, in the order they closed (Workspace.replay_cycle), so allocations,
cycles, bytes and peaks read the same planned or not. (Nothing watches a scope open during a
replay: the kernels write raw arrays, and the watching tools below turn plans off.) In NONE every
array is a new one on the heap at every iteration, counted as it would be. A plan is checked at
each use against what it fixed (layers, loss, updater, parameter buffers, device, dtype, this
thread's workspaces and their arenas) and dropped when any of them changed.

A batch runs unplanned when its features or labels are not NDArrays of the network's dtype on its
device (float64 data for a float32 network, NumPy arrays): converting them is an allocation of the
iteration, carved in its workspace, which a plan does not repeat. Convert the data once, as above.

Declined (the iteration runs unplanned, always correct): a layer or loss without planned
kernels (Conv2D, BatchNorm, Dropout in training, Flatten, a subclass with its own forward or
backward), mixed precision or a loss scale, a composite other than Sequential, a GPU (until a GPU
run checks it), and while kit records a memory timeline, tracks allocation sites, runs a workspace
debug mode or the allocation cache (they watch every array made). `net.train_plans.enabled =
False` trains unplanned; `declined` says why a network is not planned.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from functools import partial
from threading import get_ident
from typing import Any

import numpy as np

from kit.arrays.ndarray import NDArray
from kit.core.memory import count
from kit.nn.layers import call_backward, call_forward
from kit.nn.train_recording import (
    CALL,
    EXIT,
    FILL,
    LIVE,
    SCORE,
    SCORE_FILL,
    Recorder,
    Slot,
    SlotMgr,
    training_declined,
    watching,
)
from kit.nn.workspace_mgr import WorkspaceMode
from kit.workspaces.workspace import Workspace

__all__ = ["TrainingPlan", "TrainingPlans", "training_declined"]


class TrainingPlan:
    """One iteration for batches of `batch_size`, recorded from one ordinary iteration."""

    def __init__(self, net: Any, batch_size: int) -> None:
        self.net, self.batch_size = net, batch_size
        self.steps: list[tuple[int, Any, Any]] = []  # the calls, in order
        self.scopes: list[tuple[Workspace, int, int, int]] = []  # (ws, allocations, bytes, end) as they closed
        self.heap: list[tuple[tuple[int, ...], np.dtype]] = []  # NONE mode: the arrays made per iteration
        self.heap_bytes = 0
        self.thread = 0
        self.arenas: list[tuple[Workspace, int]] = []
        self.complete = False  # the recording found nothing that forbids replaying it

    # ---- recording -----------------------------------------------------------------
    def record(self, x: NDArray, y: NDArray) -> float:
        """Run one ordinary iteration on (x, y), the network's own features and labels, noting its
        steps; returns its score. The caller holds the network's lock."""
        net = self.net
        real = net.train_mgr
        rec = Recorder(real)
        self.thread = get_ident()
        xp = net.device.xp
        self._found = {id(x.data): Slot(0), id(y.data): Slot(1)}
        self._heap_mode, self._ok = real.mode is WorkspaceMode.NONE, True
        with rec.iteration():
            ins, outs, h = [], [], x
            for layer in net.layers:
                start = len(rec.made)
                out = call_forward(layer, h, rec, True)
                made = self._made(rec, start)
                self._note(rec, CALL, layer.plan_train_forward(xp, h.data, out.data, made))
                ins.append(h)
                outs.append(out)
                h = out
            with rec.layer_call():
                start = len(rec.made)
                score, eps = net.loss.value_and_grad(h, y, rec)
                made = self._made(rec, start)
                self._note(rec, SCORE, net.loss.plan_value_and_grad(xp, h.data, y.data, eps.data, made))
            for layer, inp, out in zip(reversed(net.layers), reversed(ins), reversed(outs), strict=True):
                start = len(rec.made)
                dx = call_backward(layer, eps, rec)
                made = self._made(rec, start)
                raw_dx = None if dx is None else dx.data
                self._note(rec, CALL, layer.plan_backward(xp, inp.data, out.data, eps.data, raw_dx, made))
                rec.release(eps, keep=dx)  # as Sequential.backward hands each gradient back
                eps = dx
            rec.release(eps)
            if net.l2:
                with rec.updater():
                    start = len(rec.made)
                    score += net._apply_l2(rec)
                    rec.events.append((LIVE, _apply_l2, self._sources(rec, start)))
            with rec.updater():
                start = len(rec.made)
                net._update(rec)
                rec.events.append((LIVE, _update, self._sources(rec, start)))
        self.complete = self._ok and not rec.reentered and self._steps(rec.events)
        del self._found
        return score

    def _made(self, rec: Recorder, start: int) -> list[Any]:
        """The raw arrays made since `start`; in NONE mode each becomes a slot made anew per replay."""
        made = rec.made[start:]
        if self._heap_mode:
            for raw in made:
                self._found[id(raw)] = Slot(2 + len(self.heap))
                self.heap.append((raw.shape, raw.dtype))
                self.heap_bytes += raw.nbytes
        return made

    def _note(self, rec: Recorder, kind: int, fast: Any) -> None:
        if not isinstance(fast, partial) or fast.keywords:  # a kernel the plan cannot put the batch in
            self._ok = False
            return
        args = list(fast.args)
        holes = [(i, self._found[id(a)].index) for i, a in enumerate(args) if id(a) in self._found]
        if not holes:
            rec.events.append((kind, fast, None))
            return
        for i, _ in holes:
            args[i] = None  # the recorded batch is not kept
        rec.events.append((FILL if kind == CALL else SCORE_FILL, (fast.func, args), holes))

    def _sources(self, rec: Recorder, start: int) -> SlotMgr:
        """The manager a live step (the updater, L2) gets at each replay: the arrays it was given."""
        made = self._made(rec, start)
        sources = [self._found[id(raw)] for raw in made] if self._heap_mode else made
        return SlotMgr(self.net.device, sources)

    def _steps(self, events: list[tuple[int, Any, Any]]) -> bool:
        """Keep the recorded steps, and apart from them the scopes in the order they closed;
        False when the iteration spilled or grew an arena (the workspaces were still
        learning their sizes: record later)."""
        steps, scopes = [], []
        for kind, what, holes in events:
            if kind == EXIT:  # (a scope's cycle is counted whole: nothing watches it open)
                ws, before, after = what  # (allocations, bytes, offset, spills, arenas) at open and close
                if after[3] != before[3] or after[4] != before[4]:
                    return False
                self.arenas.append((ws, after[4]))
                scopes.append((ws, after[0] - before[0], after[1] - before[1], after[2]))
            else:
                steps.append((kind, what, holes))
        self.steps, self.scopes = steps, scopes
        return True

    # ---- replaying -----------------------------------------------------------------
    def valid(self) -> bool:
        """Replayed on the thread it was recorded on (workspaces belong to threads), whose
        workspaces are the ones recorded, with the same arenas, and closed: with `watching` (no
        debug mode), the checks entering each scope makes, made once for the iteration, whose
        scopes' cycles are counted by `Workspace.replay_cycle`."""
        if get_ident() != self.thread or not self.complete:
            return False
        for ws, arenas in self.arenas:
            if ws.destroyed or ws.arena_allocations != arenas or ws.is_scope_active:
                return False
        return True

    def replay(self, x: Any, y: Any) -> float:
        """One iteration on the raw features `x` and labels `y` (the network's dtype, device and
        shapes: Network.checked_batch made them so); returns its score. The caller holds the lock."""
        slots = [x, y]
        if self.heap:  # NONE: every array new on the heap, counted as mgr.create counts them
            empty = np.empty
            for shape, dtype in self.heap:
                slots.append(empty(shape, dtype))
            count(self.net.device, self.heap_bytes, len(self.heap))
        net, score = self.net, 0.0
        try:
            for kind, a, b in self.steps:
                if kind == CALL:
                    a()
                elif kind == FILL or kind == SCORE_FILL:
                    value = _filled(a, b, slots)
                    if kind == SCORE_FILL:
                        score += value
                elif kind == SCORE:
                    score += a()
                else:  # LIVE: the updater or L2, with the arrays recorded for it
                    if a is _update and not math.isfinite(score):  # a non-finite loss moves nothing, as unplanned
                        continue
                    value, asked_all = b.run(a, net, slots)
                    score += value
                    if not asked_all:  # it asked for fewer arrays than recorded (this iteration
                        self.complete = False  # counts the recorded carves): record again
        finally:  # the scopes' cycles, each with the carves its recorded scope made, in the order they closed
            for ws, allocations, nbytes, end in self.scopes:
                ws.replay_cycle(allocations, nbytes, end)
        return score


def _filled(call: tuple[Any, list[Any]], holes: list[tuple[int, int]], slots: list[Any]) -> Any:
    """Run a recorded kernel with this iteration's arrays put in its holes (the batch, NONE's
    heap arrays); it keeps none of them between iterations."""
    func, args = call
    for i, slot in holes:
        args[i] = slots[slot]
    try:
        return func(*args)
    finally:
        for i, _ in holes:
            args[i] = None


def _update(net: Any, mgr: Any) -> float:
    net._update(mgr)
    return 0.0


def _apply_l2(net: Any, mgr: Any) -> float:
    return net._apply_l2(mgr)


class TrainingPlans:
    """The plans a network's iterations are replayed from (`net.train_plans`): one per batch size.

    A batch size's first iteration runs unplanned (the workspaces learn their sizes), its second
    is recorded (or the next one after the workspaces have learned: a recording in which an arena
    spilled or grew is not kept), later ones are replayed. `used` counts replayed iterations, `recorded` the plans
    made; `declined` says why this network is not planned (None when it is). `enabled = False`
    trains unplanned; `clear()` drops every plan."""

    def __init__(self, net: Any, limit: int = 4) -> None:
        self._net = weakref.ref(net)  # no cycle through the network (see OutputPlans)
        self.enabled = True
        self.limit = limit
        self.used = 0
        self.recorded = 0
        self.declined: str | None = None
        self._plans: OrderedDict[int, TrainingPlan] = OrderedDict()
        self._seen: dict[int, int] = {}  # batch size -> recordings that could not be kept
        self._fixed: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def batch_sizes(self) -> list[int]:
        return list(self._plans)

    def clear(self) -> None:
        self._plans.clear()
        self._seen.clear()
        self._fixed = None

    def _refit(self, net: Any) -> None:
        """What the plans fixed changed (or nothing is fixed yet): forget them, note what is fixed now."""
        self.clear()
        self._fixed = (
            net.loss,
            net.updater,
            net.flat_params.data,
            net.flat_grads.data,
            list(net.body.layers),
            net.l2,
            net.loss_scaler,
            net.master_dtype,
            net.device,
            net.dtype,
            net.train_mgr,
        )
        self.declined = training_declined(net)

    def step(self, ds: Any) -> float | None:
        """The score of one iteration on the DataSet `ds`, planned; or None: run it unplanned (also
        when its features or labels are not NDArrays of the network's dtype and device: their
        conversion is carved in the iteration's workspace, which the plan does not open first).
        The caller holds the network's lock."""
        if not self.enabled or watching():
            return None
        net = self._net()
        if not _ready(ds, net):
            return None
        if not self._still_fixed(net):
            self._refit(net)
        if self.declined is not None:
            return None
        x, y = net.checked_batch(ds)  # the checks of an unplanned iteration; nothing to convert
        batch = x.shape[0]
        plan = self._plans.get(batch)
        if plan is not None:
            if plan.valid():
                if len(self._plans) > 1:
                    self._plans.move_to_end(batch)
                score = plan.replay(x.data, y.data)  # .data: a stale batch raises here, as unplanned
                self.used += 1
                return score
            del self._plans[batch]  # the workspaces changed under it: record again
        return self._record(net, x, y, batch)

    def _still_fixed(self, net: Any) -> bool:
        """What the plans were made for is still the network's: identity, but the layers item by
        item and l2 by value."""
        fixed = self._fixed
        return (
            fixed is not None
            and fixed[0] is net.loss
            and fixed[1] is net.updater
            and fixed[2] is net.flat_params.data
            and fixed[3] is net.flat_grads.data
            and fixed[4] == net.body.layers
            and fixed[5] == net.l2
            and fixed[6] is net.loss_scaler
            and fixed[7] is net.master_dtype
            and fixed[8] is net.device
            and fixed[9] is net.dtype
            and fixed[10] is net.train_mgr
        )

    def _record(self, net: Any, x: NDArray, y: NDArray, batch: int) -> float | None:
        """Record a plan for `batch` on (x, y) and give the recorded iteration's score; or None:
        a batch size seen for the first time, or recorded too often while the workspaces were still
        learning their sizes (SEPARATE's working memory learns over 2 cycles per layer call)."""
        tries = self._seen.get(batch)
        if tries is None or tries > 4 * (len(net.layers) + 1) or self.limit < 1:
            self._seen[batch] = 0 if tries is None else tries
            return None
        plan = TrainingPlan(net, batch)
        score = plan.record(x, y)
        self.recorded += 1
        if plan.complete:
            self._plans[batch] = plan
            while len(self._plans) > self.limit:
                self._plans.popitem(last=False)
        else:
            self._seen[batch] = tries + 1
        return score


def _ready(ds: Any, net: Any) -> bool:
    """The batch's features and labels are NDArrays of the network's device and dtype: nothing to
    convert (a conversion is an allocation of the iteration, which a plan does not repeat)."""
    features, labels = getattr(ds, "features", None), getattr(ds, "labels", None)
    return (
        features.__class__ is NDArray
        and labels.__class__ is NDArray
        and features.device is net.device
        and labels.device is net.device
        and features.dtype is net.dtype
        and labels.dtype is net.dtype
    )
