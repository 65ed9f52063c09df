"""What planned training (kit.nn.train_plan) records an iteration with: the test of whether a
network's iterations can be planned, the recording manager that notes each array made and each
scope closed, and the manager that hands the updater (run live at each replay) the arrays it was
recorded with. The training counterpart of kit.nn.plan_recording."""

from __future__ import annotations

from typing import Any

from kit.arrays.ndarray import NDArray, wrap
from kit.nn.layers import Layer, Sequential
from kit.nn.losses import Loss
from kit.nn.workspace_mgr import WS_ACTIVATION_GRAD, LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE
from kit.workspaces.workspace import DebugMode, Workspace

__all__ = [
    "CALL",
    "EXIT",
    "FILL",
    "LIVE",
    "SCORE",
    "SCORE_FILL",
    "Recorder",
    "Slot",
    "SlotMgr",
    "training_declined",
    "watching",
]

# the kinds of step a plan replays
CALL, FILL, SCORE, SCORE_FILL, LIVE, EXIT = range(6)


class Slot:
    """A place in a step's arguments filled at each replay: the batch's features (0), its labels
    (1), or (in NONE mode) an array made for this iteration (2 on)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def training_declined(net: Any) -> str | None:
    """Why `net`'s iterations cannot be planned, or None when they can."""
    if net.device.kind != "cpu":
        return "planned training: on a GPU the iterations run unplanned (no GPU run has checked the plan yet)"
    if net.precision_managed:
        return "planned training: mixed precision and loss scaling run unplanned (an overflow skips the update)"
    if not _sequential(net.body):
        return "planned training: a composite layer other than Sequential runs unplanned"
    for i, layer in enumerate(net.layers):
        cls = type(layer)
        if cls.plan_train_forward is Layer.plan_train_forward or cls.plan_backward is Layer.plan_backward:
            return f"planned training: layer {i} ({cls.__name__}) has no planned training kernels; it trains unplanned"
    if type(net.loss).plan_value_and_grad is Loss.plan_value_and_grad:
        return f"planned training: the loss {type(net.loss).__name__} has no planned kernel; it trains unplanned"
    return None


def _sequential(layer: Layer) -> bool:
    if not layer.is_composite:
        return True
    return type(layer) is Sequential and all(_sequential(sub) for sub in layer.sublayers())


def watching() -> bool:
    """A tool that watches every array made is on: a plan would hide its arrays from it."""
    return (
        STATE.recorder is not None or STATE.track_sites or STATE.debug_mode is not DebugMode.DISABLED or STATE.cache.on
    )


class Recorder(LayerWorkspaceMgr):
    """The training manager of one recorded iteration: it hands out what the network's own manager
    does, and notes each array made and each scope closed, in order."""

    def __init__(self, real: LayerWorkspaceMgr) -> None:  # a view of `real`: no workspaces of its own
        self.real, self.mode, self.separate, self.device = real, real.mode, real.separate, real.device
        self.backward_follows = True
        self.made: list[Any] = []  # the raw array of each array made
        self.reentered = False  # a scope was entered while open already (the plan is not kept)
        self.events: list[tuple[int, Any, Any]] = []  # the steps and the scopes, in order
        self._lent: dict[int, tuple[int, ...]] = {}  # gradient slots lent in this iteration: their tally at opening

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        arr = self.real.create(array_type, shape, dtype, device)
        self.made.append(arr.data)
        slot = arr.workspace
        if slot is not None and slot.name.startswith(self.real.prefix + WS_ACTIVATION_GRAD):  # a slot lent now
            self._lent[id(slot)] = slot.lent_tally
        return arr

    def _scope(self, cm: Any) -> Any:
        return _RecordedScope(self, cm) if isinstance(cm, Workspace) else cm

    def release(self, grad: Any, keep: Any = None) -> None:
        """The real manager hands the gradient's slot back; the slot's cycle is noted as a scope's
        (a replay counts it whole, as it counts the scopes)."""
        slot = None if grad is None else grad.workspace
        before = self._lent.get(id(slot)) if slot is not None else None
        self.real.release(grad, keep)
        if before is not None and not slot.is_scope_active:
            self.events.append((EXIT, (slot, before, slot.tally()), None))
            del self._lent[id(slot)]

    def iteration(self) -> Any:
        return self._scope(self.real.iteration())

    def layer_call(self) -> Any:
        return self._scope(self.real.layer_call())

    def updater(self) -> Any:
        return self._scope(self.real.updater())


class _RecordedScope:
    """One scope of the recorded iteration: notes what it carved, where it closed among the steps."""

    def __init__(self, rec: Recorder, ws: Workspace) -> None:
        self.rec, self.ws = rec, ws

    def __enter__(self) -> Workspace:
        self.rec.reentered = self.rec.reentered or self.ws.is_scope_active  # a plan counts each scope as a whole cycle
        self.ws.__enter__()
        self.before = self.ws.tally()
        return self.ws

    def __exit__(self, *exc: Any) -> None:
        after = self.ws.tally()
        self.rec.events.append((EXIT, (self.ws, self.before, after), None))
        self.ws.__exit__(*exc)


class SlotMgr(LayerWorkspaceMgr):
    """What the updater (run live at each replay) asks for: the arrays the recorded update was
    given, in order (or, in NONE mode, the ones made for this iteration)."""

    def __init__(self, device: Any, sources: list[Any]) -> None:  # no workspaces of its own
        self.mode, self.separate, self.device, self.backward_follows = WorkspaceMode.NONE, False, device, True
        self.sources = sources
        self.slots: list[Any] = []
        self.position = 0

    def create(self, array_type: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> NDArray:
        position = self.position
        if position < len(self.sources):
            source = self.sources[position]
            raw = self.slots[source.index] if source.__class__ is Slot else source
            if raw.shape == tuple(shape):  # the updater asks for what it asked for when recorded
                self.position = position + 1
                return wrap(raw, device, None)
            recorded = f"recorded {raw.shape}"
        else:
            recorded = f"recorded {position} array(s) only"
        raise RuntimeError(
            f"planned training: the updater asked for array {position + 1}, of shape {tuple(shape)}, where the plan "
            f"{recorded}; clear the plans (net.train_plans.clear())"
        )

    def run(self, step: Any, net: Any, slots: list[Any]) -> tuple[float, bool]:
        """Run a live step (`step(net, mgr)`: the updater, L2) with this iteration's arrays `slots`:
        its value, and whether it asked for every array it was recorded with."""
        self.slots, self.position = slots, 0
        try:
            value = step(net, self)
        finally:
            self.slots = []
        return value or 0.0, self.position == len(self.sources)
