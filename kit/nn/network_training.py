"""How a Network trains: one iteration (forward, loss, backward, L2, the updater's step), and `fit`.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.nn import Dense, Network, ReLU, Sgd
    >>> train, _ = load_digits()
    >>> net = Network([Dense(16), ReLU(), Dense(10)], input_shape=(64,), updater=Sgd(0.1))
    >>> first = net.score(train)
    >>> net.fit(ArrayIterator(train, batch_size=128), epochs=2).score(train) < first
    True

Each iteration runs inside the training workspaces (`train_mgr`, kit.nn.workspace_mgr) and under
the network's lock, which `_train_one` hands to a waiting thread between two iterations
(kit.nn.turn_lock). `fit` builds a kit.nn.loop.TrainingLoop over `train_step`. `Training` is a
mixin of kit.nn.network.Network, which holds the state these methods use; it opens by declaring it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from kit.arrays.checks import all_finite
from kit.core import memory
from kit.core.arguments import whole
from kit.data.async_iter import AsyncPrefetchIterator
from kit.data.dataset import DataSet
from kit.nn import replay
from kit.nn.kernels import l2_into
from kit.nn.layers import call_forward
from kit.nn.loop import NonFiniteScoreError, StepResult, TrainingLoop, loop_hooks
from kit.nn.mixed import LossScaleError, precision_step, scale_seed
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE

if TYPE_CHECKING:
    from kit.arrays.ndarray import NDArray
    from kit.core.devices import AnyDevice
    from kit.nn.layers import Layer, Sequential
    from kit.nn.losses import Loss
    from kit.nn.mixed import LossScaler
    from kit.nn.replay import TrainingPlans
    from kit.nn.turn_lock import TurnLock
    from kit.nn.updaters import Updater

__all__ = ["Training"]


class Training:
    """The training half of Network: gradients, the update, the loop."""

    # needs from its host (kit.nn.network.Network):
    body: Sequential
    layers: list[Layer]  # the leaf layers, in order
    loss: Loss
    loss_scaler: LossScaler | None
    updater: Updater
    updater_state: dict[str, NDArray]
    flat_params: NDArray
    flat_grads: NDArray
    flat_master: NDArray  # float32 master weights of a mixed-precision network, else flat_params
    precision_managed: bool
    l2: float
    l2_slices: list[slice]
    _regularized: list[tuple[NDArray, NDArray]]  # (parameter, its gradient) pairs L2 applies to
    device: AnyDevice
    dtype: np.dtype
    lock: TurnLock
    train_mgr: LayerWorkspaceMgr
    train_plans: TrainingPlans
    iteration: int
    last_score: float
    _loop: Callable[[], TrainingLoop | None] | None  # a weak reference to the loop training it
    _features: Callable[[Any], NDArray]  # features checked and cast where they meet the network
    _labels: Callable[[NDArray, int], NDArray]  # labels checked against the output, cast
    _check_finite: Callable[[NDArray, str], None]
    clone: Callable[[], Self]

    last_step_skipped = False  # the loss scaler skipped the last step (kit.nn.mixed): no update

    def compute_gradient_and_score(self, ds: DataSet) -> float:
        """Forward, loss and backward on one batch: gradients land in `flat_grads`; no update.
        With a loss scaler they are multiplied by `loss_scaler.scale` (and L2 is left to the update)."""
        with self.lock:
            mgr = self.train_mgr
            with mgr.iteration():
                return self._gradient_step(ds, mgr)

    def _gradient_step(self, ds: DataSet, mgr: LayerWorkspaceMgr) -> float:
        x, y = self.checked_batch(ds)
        return self._forward_backward(x, y, mgr)

    def checked_batch(self, ds: DataSet) -> tuple[NDArray, NDArray]:
        """The batch's features and labels, checked and in the network's dtype, on its device."""
        if not isinstance(ds, DataSet):
            raise TypeError(
                f"training needs DataSets (features, labels), got {type(ds).__name__}: wrap with DataSet(x, y)"
            )
        if ds.features.shape[0] == 0:  # ds.num_examples, without its property call: this runs every step
            raise ValueError("fit: a mini-batch with 0 examples; there is nothing to learn from an empty DataSet")
        x = self._features(ds.features)
        y = self._labels(ds.labels, x.shape[0])
        self._check_finite(x, "features")
        if x.shape[0] == 1:  # before any layer runs: a refused batch moves no statistic
            for i, layer in enumerate(self.layers):
                layer.check_training_batch(x.shape[0], i)
        return x, y

    def _forward_backward(self, x: NDArray, y: NDArray, mgr: LayerWorkspaceMgr) -> float:
        """Forward, loss, backward (and L2) on checked inputs: gradients land in flat_grads."""
        body = self.body
        out = body.forward(x, mgr, True)
        scaler = self.loss_scaler
        with mgr.layer_call():
            score, eps = self.loss.value_and_grad(out, y, mgr)
            if scaler is not None:  # backward computes the gradient times the scale (kit.nn.mixed)
                with np.errstate(over="ignore"):
                    scale_seed(eps, scaler.scale)
        if scaler is None:
            dx = body.backward(eps, mgr)
        else:  # an overflow here is expected now and then: precision_step finds it and skips the step
            with np.errstate(over="ignore", invalid="ignore"):
                dx = body.backward(eps, mgr)
        mgr.release(eps, keep=dx)  # the gradient slots (SEPARATE) are free for the next iteration
        mgr.release(dx)
        if self.l2:
            if self.precision_managed:  # added to the unscaled master gradient in precision_step
                score += self._l2_penalty()
            else:
                with mgr.updater():
                    score = self._apply_l2(mgr, score)
        return score

    def _l2_penalty(self) -> float:
        xp, master = self.device.xp, self.flat_master.data
        return sum(0.5 * self.l2 * float(xp.dot(master[sl], master[sl])) for sl in self.l2_slices)

    def _update(self, mgr: LayerWorkspaceMgr) -> None:
        """The updater's step (inside mgr.updater()): plain, or through kit.nn.mixed (which may
        skip it: `last_step_skipped`)."""
        if self.precision_managed:
            self.last_step_skipped = not precision_step(self, mgr)
        else:
            updater = self.updater  # Sgd, Nesterovs: the update is written over the gradient (Updater.exact_in_place)
            updater.apply(
                self.flat_params, self.flat_grads, self.updater_state, self.iteration + 1, mgr, updater.exact_in_place
            )

    def _apply_l2(self, mgr: LayerWorkspaceMgr, score: float) -> float:
        """Add L2's gradient to each regularised parameter's; `score` plus each penalty, in order."""
        xp = self.device.xp
        for p, g in self._regularized:
            tmp = mgr.create(ArrayType.UPDATER_WORKING_MEM, p.shape, p.dtype, p.device).data
            score += l2_into(xp, p.data, g.data, tmp, self.l2)
        return score

    def apply_update(self) -> None:
        """Apply the updater to the gradients now in `flat_grads` (one iteration; with a loss
        scaler they are the scaled gradients compute_gradient_and_score left there). An updater
        that updates in place (Sgd, Nesterovs: `Updater.exact_in_place`) leaves the update there
        instead of the gradient, as DL4J's do: read the gradient before this call."""
        with self.lock:
            if self.loss_scaler is None and not all_finite(self.flat_grads.data):  # with one, the scaler skips
                raise NonFiniteScoreError(
                    "apply_update: the gradients hold NaN or infinity (was compute_gradient_and_score's score "
                    f"finite?); nothing was applied and the iteration count stays {self.iteration}. Train on other "
                    "data, lower the learning rate, or let fit() stop on it (InvalidScoreIterationTerminationCondition)"
                )
            mgr = self.train_mgr
            with mgr.iteration(), mgr.updater():
                self._update(mgr)
            self.iteration += 1

    def make_loop(self, **hooks: Any) -> TrainingLoop:
        """The training loop over this network's own step, one mini-batch at a time (kit.nn.loop's
        Trainable: `hooks` are the loop's listeners, iteration_conditions, epoch_end); `stop_fit()`
        stops it."""
        return TrainingLoop(self, self.train_step, **loop_hooks(self, hooks)).attach(self)

    def fit_batch(self, ds: DataSet) -> float:
        """One iteration on one mini-batch: gradients, L2, updater. Returns the score."""
        return self._train_one(ds, advance=True)

    def _train_one(self, ds: DataSet, advance: bool = False) -> float:
        """One iteration; `advance` moves the iteration counter too, inside the lock, so a
        snapshot taken from another thread (save) never pairs new parameters with the old count."""
        lock = self.lock
        # save(), output() ... waiting in another thread: their turn, between two iterations
        if lock.waiting:
            lock.let_waiters_in()
        with lock.rlock:  # the RLock itself (C): this thread waits for nobody, see let_waiters_in
            # a batch size trained on before: replayed at the kernel seam (kit.nn.replay); None: as written
            score = self.train_plans.step(ds) if replay.switch.on else None
            if score is None:
                mgr = self.train_mgr
                self.last_step_skipped = False
                with mgr.iteration():  # a cast of the inputs is carved here too
                    score = self._gradient_step(ds, mgr)
                    with mgr.updater():
                        try:
                            # a non-finite loss moves nothing (the loop then says why), master weights
                            # or not; with a loss scaler, the scaler decides (it skips and backs off)
                            if self.loss_scaler is not None or math.isfinite(score):
                                self._update(mgr)
                        except LossScaleError as exc:  # nothing moved; say what overflowed, if the forward did
                            cause = self.non_finite_cause(ds) if not math.isfinite(score) else None
                            if cause is None:
                                raise
                            raise LossScaleError(f"{exc}. Here the loss itself is {score}: {cause}") from None
            self.last_score = score
            if advance and (self.loss_scaler is not None or math.isfinite(score)):  # a refused step is no iteration
                self.iteration += 1
        if STATE.gc["enabled"]:  # the GC window (kit.core.gc_window), off by default: asked only when on
            memory.maybe_gc()
        return score

    def train_step(self, batches: Sequence[DataSet]) -> list[StepResult]:
        """The step of this network's TrainingLoop: one mini-batch, one iteration."""
        (ds,) = batches
        score = self._train_one(ds, advance=True)  # the loop sees the count moved
        return [StepResult(score, ds.num_examples, skipped=self.last_step_skipped)]

    def non_finite_cause(self, ds: DataSet) -> str | None:
        """Why a step on `ds` gave a non-finite loss, in words (the loop's NonFiniteScoreError and
        the loss scaler's error say it): the parameters, or the first layer whose activations
        overflow this network's dtype with finite parameters and features. Found on a clone (this
        network's running statistics do not move). None when the features themselves are not finite."""
        xp = self.device.xp
        if not isinstance(ds, DataSet):  # a Spark round, or another trainer's unit: nothing to run again here
            return None
        if not all_finite(self.flat_params.data):
            return "the parameters are no longer finite. Lower the learning rate or scale the features"
        twin = self.clone()
        mgr = LayerWorkspaceMgr(WorkspaceMode.NONE, device=self.device, backward_follows=False)
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                h = twin._features(ds.features)
            except ValueError:
                return None
            if not all_finite(h.data):
                return None
            for i, layer in enumerate(twin.body.layers):
                h = call_forward(layer, h, mgr, True)
                if not all_finite(h.data):
                    limit = float(xp.finfo(self.dtype).max)
                    narrow = xp.finfo(self.dtype).bits < 32  # only then is a wider dtype the way out
                    instead = (
                        "train in float32 (or with master_dtype='float32' and a loss scale)"
                        if narrow
                        else "lower the learning rate (the parameters grew until this layer's output overflowed)"
                    )
                    return (
                        f"the activations of layer {i} ({type(layer).__name__}) exceed {self.dtype}'s range (largest "
                        f"{limit:g}) while the parameters and the features are finite. Scale the features down, or "
                        f"{instead}"
                    )
        return "the loss overflowed while the parameters, the features and every layer's output are finite"

    def fit(
        self, data: DataSet | Iterable[DataSet], epochs: int = 1, listeners: Iterable[Any] = (), prefetch: int = 0
    ) -> Self:
        """Train on a DataSet (one iteration, as DL4J's fit(DataSet); with `epochs=N`, N epochs of
        that one batch) or an iterator (epochs).
        `prefetch=N` wraps an iterator that allows it in an AsyncPrefetchIterator with a queue
        of N (DL4J always wraps, with a queue of 2; kit asks you to choose)."""
        prefetch = whole("fit", "prefetch", prefetch, 0, what=" (0: no prefetching)")  # whatever the data
        loop = self.make_loop(listeners=listeners)
        if isinstance(data, DataSet):
            if epochs is not None and not isinstance(epochs, bool) and epochs == 1:  # one step (DL4J fit(DataSet))
                loop.run_step([data])
                return self
            loop.run([data], epochs)  # as many epochs of this one batch (checked: a whole number >= 1)
            return self
        if isinstance(data, tuple):
            raise TypeError(
                "fit: got a tuple; wrap features and labels in a DataSet: net.fit(DataSet(features, labels))"
            )
        if prefetch and getattr(data, "async_supported", False):
            with AsyncPrefetchIterator(data, prefetch=prefetch, device=self.device) as wrapped:
                return self.fit(wrapped, epochs, listeners)
        loop.run(data, epochs)
        return self

    def stop_fit(self) -> None:
        """Ask a running fit() to stop after the current iteration."""
        loop = self._loop() if self._loop is not None else None
        if loop is not None:
            loop.stop()
