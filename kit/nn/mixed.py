"""Mixed precision: compute in float16, keep float32 master weights, scale the loss (dynamically).

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.nn import Adam, Dense, Network, ReLU
    >>> train, test = load_digits()
    >>> net = Network([Dense(64), ReLU(), Dense(10)], input_shape=(64,), updater=Adam(1e-2),
    ...               dtype="float16", master_dtype="float32", loss_scale="dynamic")
    >>> net.fit(ArrayIterator(train, 64, shuffle=True), epochs=3)
    <kit.nn.network.Network object at 0x...>
    >>> net.loss_scaler
    LossScaler(scale=65536.0, dynamic, growth_interval=2000, clean_steps=69, skipped_steps=0)
    >>> net.flat_params.dtype, net.flat_master.dtype    # what forward/backward use, what the updater keeps
    (dtype('float16'), dtype('float32'))

What PyTorch spreads over autocast, GradScaler and an fp32 optimizer is one recipe here, and
each of its bytes has a place (n parameters):

    flat_params   n x 2 bytes   float16: the copy forward and backward compute with
    flat_grads    n x 2 bytes   float16: backward writes the gradient *times the scale* here
    flat_master   n x 4 bytes   float32: the weights the updater changes (master weights)
    updater state n x 4 bytes   float32 per state buffer (Adam: m and v)
    activations   half of float32's: they are float16 (the training workspaces' cycle bytes)

One step: the loss's gradient seed is multiplied by `scale`, backward runs in float16, the
gradient is unscaled into a float32 working array and checked for inf/NaN, the updater moves the
master weights and the float16 copy is written from them. Without scaling, small gradients flush
to 0 in float16; without master weights, small updates round away and the parameters stop moving.

Dynamic scaling is GradScaler's: a step whose gradient holds inf or NaN is *skipped* (no update,
Adam's t does not advance, the iteration counter still counts it) and the scale is multiplied by
`backoff_factor`; after `growth_interval` clean steps by `growth_factor`. A scale below
`min_scale` raises LossScaleError. A fixed `loss_scale` (a number) skips non-finite steps too, but
never changes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kit.arrays.checks import all_finite
from kit.core.arguments import real, whole
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["DYNAMIC", "LossScaleError", "LossScaler", "master_dtype_for", "precision_step", "scale_seed"]

DYNAMIC = "dynamic"
_SPEC = "give None (no scaling), a positive finite number (a fixed scale), 'dynamic' or a LossScaler(...)"


class LossScaleError(FloatingPointError):
    """Dynamic loss scaling gave up: the scale fell below its floor."""


# a scale multiplies the loss in float32 (kit.shapes.accumulator): a larger one is infinity there, and
# a fixed scale whose every step overflows this many times in a row can never train (LossScaler.update)
SCALE_MAX = float(np.finfo(np.float32).max)
FIXED_GIVE_UP = 20


class LossScaler:
    """The loss scale and its bookkeeping (GradScaler's `scale`, `growth_interval` ...)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        *,
        dynamic: bool = True,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        min_scale: float = 2.0**-14,
    ) -> None:
        where = "LossScaler"
        self.init_scale = real(where, "init_scale", init_scale, 0, SCALE_MAX, low_open=True)
        self.growth_factor = real(where, "growth_factor", growth_factor, 1, 2.0**16, low_open=True)
        self.backoff_factor = real(where, "backoff_factor", backoff_factor, 0, 1, low_open=True, high_open=True)
        self.growth_interval = whole(
            where, "growth_interval", growth_interval, what=" (clean steps before the scale grows; GradScaler's: 2000)"
        )
        self.min_scale = real(where, "min_scale", min_scale, 0, SCALE_MAX, low_open=True)
        if not isinstance(dynamic, bool):
            raise ValueError(f"{where}(dynamic={dynamic!r}): must be True or False")
        self.dynamic = dynamic
        if dynamic and self.init_scale < self.min_scale:
            raise ValueError(
                f"{where}(init_scale={init_scale!r}, min_scale={min_scale!r}): the initial scale is below the floor; "
                "raise init_scale or lower min_scale"
            )
        self.scale = self.init_scale
        self.skipped_steps = 0  # steps whose gradient held inf or NaN (no update)
        self.clean_steps = 0  # consecutive finite steps since the scale last changed
        self.skipped_in_a_row = 0  # not saved: a fixed scale gives up after FIXED_GIVE_UP of them

    @classmethod
    def from_spec(cls, spec: Any, where: str = "Network") -> LossScaler | None:
        """None, a number (fixed), 'dynamic', a LossScaler or a saved config() -> a fresh scaler."""
        if spec is None:
            return None
        if isinstance(spec, LossScaler):
            return cls.from_spec(spec.config(), where)
        if isinstance(spec, str):
            if spec == DYNAMIC:
                return cls()
            hint = " (did you mean 'dynamic'?)" if spec.strip().lower() == DYNAMIC else ""
            raise ValueError(f"{where}(loss_scale={spec!r}): unknown loss scale{hint}; {_SPEC}")
        if isinstance(spec, dict):
            known = {"type", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "min_scale"}
            if spec.get("type") != DYNAMIC or not set(spec) <= known:
                raise ValueError(f"{where}(loss_scale={spec!r}): a saved loss scale is {{'type': 'dynamic', ...}}")
            return cls(**{k: v for k, v in spec.items() if k != "type"})
        ok = isinstance(spec, (int, float, np.integer, np.floating)) and not isinstance(spec, bool)
        if not ok or not math.isfinite(float(spec)) or not 0 < float(spec) <= SCALE_MAX:
            raise ValueError(f"{where}(loss_scale={spec!r}): {_SPEC} (at most {SCALE_MAX:.6g}, float32's largest)")
        return cls(float(spec), dynamic=False)

    def config(self) -> float | dict[str, Any]:
        """What NetworkConfig keeps: the fixed scale, or the dynamic scaler's settings."""
        if not self.dynamic:
            return self.init_scale
        return {
            "type": DYNAMIC,
            "init_scale": self.init_scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "min_scale": self.min_scale,
        }

    # ---- state (saved with the model, copied with its state) -----------------------------
    def state(self) -> np.ndarray:
        """[scale, skipped_steps, clean_steps] as float64 (exact: scales are powers of two, counts < 2**53)."""
        return np.array([self.scale, self.skipped_steps, self.clean_steps], dtype=np.float64)

    def load_state(self, state: Any) -> None:
        values = np.asarray(state, dtype=np.float64).reshape(-1)
        if values.shape != (3,) or not np.all(np.isfinite(values)) or values[0] <= 0 or np.any(values[1:] < 0):
            raise ValueError(
                f"loss scaler state {values!r}: expected [scale > 0, skipped steps >= 0, clean steps >= 0]"
            )
        self.scale, self.skipped_steps, self.clean_steps = float(values[0]), int(values[1]), int(values[2])
        self.skipped_in_a_row = 0

    @staticmethod
    def merged(scalers: list[LossScaler]) -> np.ndarray:
        """One state for replicas that are averaged: the most careful scale (the smallest), the
        fewest clean steps, the most skipped steps."""
        return LossScaler.merge_states([s.state() for s in scalers])

    @staticmethod
    def merge_states(states: list[Any]) -> np.ndarray:
        """merged() for states as state() returns them (what Spark's executors send back)."""
        table = np.asarray(states, dtype=np.float64).reshape(len(states), 3)
        return np.array([table[:, 0].min(), table[:, 1].max(), table[:, 2].min()])

    # ---- the decision ------------------------------------------------------------------
    def update(self, finite: bool) -> bool:
        """After a backward pass: True to apply the step. A non-finite gradient skips it and
        backs off; `growth_interval` clean steps in a row grow the scale."""
        if finite:
            self.skipped_in_a_row = 0
            self.clean_steps += 1
            if self.dynamic and self.clean_steps >= self.growth_interval:
                self.scale *= self.growth_factor
                self.clean_steps = 0
            return True
        if self.dynamic and self.scale * self.backoff_factor < self.min_scale:  # nothing changes: the error says why
            raise LossScaleError(
                f"dynamic loss scaling gave up: the scale would fall to {self.scale * self.backoff_factor:g}, below "
                f"min_scale {self.min_scale:g}, after {self.skipped_in_a_row + 1} skipped steps in a row (inf/NaN "
                "gradients). At such a scale float16 is not what overflows in backward: the training itself "
                "diverges. Lower the learning rate, check the data for extreme values, or train in float32 "
                "(dtype='float32') to see where it blows up"
            )
        if not self.dynamic and self.skipped_in_a_row + 1 >= FIXED_GIVE_UP:
            raise LossScaleError(
                f"the fixed loss scale {self.scale:g} overflowed the gradients {FIXED_GIVE_UP} steps in a row: with it "
                "no step can be taken. Use loss_scale='dynamic', which finds a scale that fits (or, far smaller, a "
                f"fixed one: loss_scale={min(self.scale / 2**8, 2.0**10):g})"
            )
        self.skipped_in_a_row += 1
        self.skipped_steps += 1
        self.clean_steps = 0
        if self.dynamic:
            self.scale *= self.backoff_factor
        return False

    def __repr__(self) -> str:
        kind = "dynamic" if self.dynamic else "fixed"
        return (
            f"LossScaler(scale={self.scale}, {kind}, growth_interval={self.growth_interval}, "
            f"clean_steps={self.clean_steps}, skipped_steps={self.skipped_steps})"
        )


def master_dtype_for(dtype: np.dtype, master: Any, resolve: Any, where: str = "Network") -> np.dtype:
    """The master weights' dtype: `dtype` itself for None, never narrower than `dtype`."""
    if master is None:
        return dtype
    try:
        mdt = resolve(master, floating_only=True)
    except TypeError as exc:
        raise ValueError(f"{where}(master_dtype={master!r}): {exc}") from None
    if mdt.itemsize < dtype.itemsize or np.promote_types(dtype, mdt) != mdt:
        raise ValueError(
            f"{where}(dtype='{dtype.name}', master_dtype='{mdt.name}'): the master weights must be at least as wide "
            f"as the compute dtype (they hold what {dtype.name} cannot); use master_dtype='float32' with "
            "dtype='float16', or leave master_dtype=None"
        )
    return mdt


# ---- the step ------------------------------------------------------------------------------
def scale_seed(eps: Any, scale: float) -> None:
    """Multiply the loss's gradient (backward's seed) by `scale`, computed in float32 at least:
    2**16 is inf in float16, while 2**16 * (softmax - labels) / batch fits."""
    raw = eps.data
    wide = np.promote_types(raw.dtype, np.float32)
    eps.device.xp.multiply(raw, scale, out=raw, dtype=wide, casting="same_kind")


def _finite(raw: Any) -> bool:
    """kit.checks' one pass, with the overflow this looks for expected."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is the NaN this looks for
        return all_finite(raw)


def _undo_frozen(net: Any) -> None:
    """A step not taken: BatchNorm's running statistics, moved in the forward pass in the compute
    copy, back to the master's (a float32 network without master weights keeps them moved, as
    PyTorch's GradScaler does)."""
    if net.mixed:
        for sl in net.frozen_slices:
            net.flat_params.data[sl] = net.flat_master.data[sl]


def precision_step(net: Any, mgr: LayerWorkspaceMgr) -> bool:
    """The update of a Network with master weights and/or a loss scale (inside mgr.updater()).
    Returns False for a skipped step."""
    xp, scaler = net.device.xp, net.loss_scaler
    master, params = net.flat_master, net.flat_params
    grads = net.flat_grads.data
    used = scaler.scale if scaler is not None else 1.0  # what the seed was multiplied by (update may grow it)
    if scaler is not None:
        try:
            applied = scaler.update(_finite(grads))
        except LossScaleError:
            _undo_frozen(net)
            raise
        if not applied:
            _undo_frozen(net)
            return False  # params, master, updater state and Adam's t stay as they were
    if net.mixed:  # BatchNorm's running statistics moved in the forward pass, in the compute copy
        for sl in net.frozen_slices:
            master.data[sl] = params.data[sl]
    wide = np.promote_types(master.dtype, np.float32)  # the unscaled gradient, where it cannot underflow
    g = mgr.create(ArrayType.UPDATER_WORKING_MEM, master.shape, wide, net.device)
    if scaler is not None:
        xp.divide(grads, used, out=g.data, dtype=wide)
    else:
        xp.copyto(g.data, grads)
    if net.l2:
        for sl in net.l2_slices:
            g.data[sl] += net.l2 * master.data[sl]
    skipped = scaler.skipped_steps if scaler is not None else 0
    net.updater.apply(master, g, net.updater_state, net.iteration + 1 - skipped, mgr, scratch=True)
    if net.mixed:
        xp.copyto(params.data, master.data, casting="same_kind")
    return True
