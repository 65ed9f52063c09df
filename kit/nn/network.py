"""Network: layers over one flat parameter buffer and one flat gradient buffer.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.listeners import ScoreIterationListener
    >>> from kit.nn import Adam, Dense, Network, ReLU
    >>> train, test = load_digits()                # 1,797 8x8 digits shipped inside kit, 80/20 split
    >>> net = Network([Dense(128), ReLU(), Dense(10)], input_shape=(64,), updater=Adam(1e-3))
    >>> net.fit(ArrayIterator(train, batch_size=64, shuffle=True), epochs=5,
    ...         listeners=[ScoreIterationListener(50)])
    Score at iteration 50 is ...
    Score at iteration 100 is ...
    <kit.nn.network.Network object at 0x...>
    >>> net.evaluate(ArrayIterator(test, 256)).accuracy()
    0.9...
    >>> probs = net.output(test.features)          # always detached (heap) memory
    >>> probs.shape, probs.is_attached
    ((359, 10), False)
    >>> net.save("digits.npz")                     # .npz + a checked JSON header, never pickle
    >>> Network.load("digits.npz").configuration == net.configuration
    True

Every layer's parameters are views into `net.flat_params` (and gradients into
`net.flat_grads`), so averaging replicas, broadcasting, encoding updates or saving are
operations on one vector. Training runs each iteration inside the workspaces of
`training_workspace_mode` (kit.nn.workspace_mgr), inference inside `inference_workspace_mode`.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from kit import backend, memory
from kit.checks import all_finite, check_finite
from kit.creation import asarray, empty, zeros
from kit.data.async_iter import AsyncPrefetchIterator
from kit.data.dataset import DataSet
from kit.devices import as_device
from kit.evaluation import Evaluation
from kit.labels import probability_rows
from kit.ndarray import NDArray
from kit.nn.config import NetworkConfig
from kit.nn.init import initial_values
from kit.nn.layers import Layer, Sequential, layer_from_config
from kit.nn.loop import StepResult, TrainingLoop, loop_hooks
from kit.nn.losses import Loss, SoftmaxCrossEntropy, loss_from_config, rows_of_scores
from kit.nn.mixed import LossScaler, master_dtype_for, precision_step, scale_seed
from kit.nn.persistence import ModelFileError, read_model, write_model
from kit.nn.plan import InferencePlan, OutputPlans
from kit.nn.updaters import Adam, Updater, state_dtype, updater_from_config
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE
from kit.workspace import scope_out_of_workspaces

__all__ = ["ModelFileError", "Network"]


def _leaves(layer: Layer) -> list[Layer]:
    subs = layer.sublayers()
    return [layer] if not subs else [leaf for s in subs for leaf in _leaves(s)]


class Network:
    """A feed-forward network: its layers (one Sequential body), trained by one updater against one loss.

    What it owns: `flat_params` and `flat_grads`, one vector each, of which every layer's
    parameters and gradients are views (and `flat_master`, the float32 master weights of a
    mixed-precision network); `updater_state` (Adam's m and v ...); the counters `iteration` and
    `epoch`; and two LayerWorkspaceMgrs, whose workspaces (named after this network, one set per
    thread that uses it) hold each training and each inference iteration's arrays. Arrays it hands
    out (`output`, `params`) are detached: they stay valid after those workspaces move on.

        >>> import numpy as np
        >>> from kit.data import DataSet
        >>> from kit.nn import Dense, Network, ReLU, Sgd
        >>> net = Network([Dense(4), ReLU(), Dense(3)], input_shape=(5,), updater=Sgd(0.1), seed=0)
        >>> net.num_params                                    # (5*4 + 4) + (4*3 + 3)
        39
        >>> net.flat_params.numpy()[:] = 0                    # one vector: every layer sees the change
        >>> float(abs(net.layers[0].params["W"]).sum())
        0.0
        >>> net.set_params(np.random.default_rng(0).normal(0, 0.5, net.num_params))
        >>> ds = DataSet(np.ones((2, 5), np.float32), [0, 2], num_classes=3)
        >>> first = net.fit_batch(ds)
        >>> net.fit_batch(ds) < first, net.iteration         # one step each: the loss went down
        (True, 2)
        >>> net.output(ds.features).shape                     # (B, 3) class probabilities
        (2, 3)
    """

    def __init__(
        self,
        layers: list[Layer] | Sequential,
        input_shape: tuple[int, ...],
        loss: Loss | None = None,
        updater: Updater | None = None,
        l2: float = 0.0,
        seed: int = 0,
        dtype: Any = None,
        device: Any = None,
        training_workspace_mode: WorkspaceMode | str = WorkspaceMode.SEPARATE,
        # SEPARATE, not SINGLE: one SINGLE arena holds every array of a pass (a ResNet-18's im2col
        # columns of every layer: 3.3 GB at batch 128), SEPARATE the activations and one layer's
        # working memory (0.7 GB); DL4J's inference workspaces are layer-scoped likewise
        inference_workspace_mode: WorkspaceMode | str = WorkspaceMode.SEPARATE,
        input_gradient: bool = False,
        master_dtype: Any = None,
        loss_scale: float | str | LossScaler | None = None,
    ) -> None:
        self.body = layers if isinstance(layers, Sequential) else Sequential(list(layers))
        shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else (input_shape,)
        if not shape or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 for n in shape):
            raise ValueError(
                f"Network(input_shape={shape!r}): every dimension must be a positive integer (one example's "
                "shape, without the batch axis)"
            )
        self.input_shape = tuple(int(n) for n in shape)
        self.loss = loss or SoftmaxCrossEntropy()
        self.updater = updater or Adam()
        if not isinstance(l2, (int, float)) or not math.isfinite(l2) or l2 < 0:
            raise ValueError(f"Network(l2={l2!r}): must be a finite number >= 0")
        self.l2, self.seed = float(l2), int(seed)
        self.dtype = backend.resolve_dtype(dtype, floating_only=True)
        # mixed precision (kit.nn.mixed): the updater's master copy and the loss scale
        self.master_dtype = master_dtype_for(self.dtype, master_dtype, backend.resolve_dtype)
        self.loss_scaler = LossScaler.from_spec(loss_scale)
        self.device = as_device(device)
        self.training_workspace_mode = WorkspaceMode(training_workspace_mode)
        self.inference_workspace_mode = WorkspaceMode(inference_workspace_mode)
        self.output_shape = self.body.build(self.input_shape)
        # the first layer's input gradient is unused unless asked for (gradient checks, saliency)
        self.input_gradient = bool(input_gradient)
        self.body.layers[0].skip_input_grad = not self.input_gradient
        self.iteration = 0
        self.epoch = 0
        self.last_score = float("nan")
        self.last_etl_ms = 0.0
        self._lock = _TurnLock()
        self._loop: Any = None  # a weak reference to the loop training this network (stop_fit)
        self._name = STATE.unique_name("net")
        self._allocate_buffers()
        calls = len(self.layers) + 1  # each leaf layer, and the loss
        self._train_mgr = LayerWorkspaceMgr(self.training_workspace_mode, f"{self._name}/train/", self.device, calls)
        self._infer_mgr = LayerWorkspaceMgr(
            self.inference_workspace_mode, f"{self._name}/infer/", self.device, calls, backward_follows=False
        )
        self.output_plans = OutputPlans(self)  # output()'s plans, one per batch size (kit.nn.plan)
        self._initialise()

    # ---- flat buffers ----------------------------------------------------------------
    def _allocate_buffers(self) -> None:
        self.layers = _leaves(self.body)
        self._specs = [(layer, spec) for layer in self.layers for spec in layer.param_specs()]
        n = sum(math.prod(spec.shape) for _, spec in self._specs)
        with scope_out_of_workspaces():
            self.flat_params = zeros((n,), self.dtype, self.device)
            self.flat_grads = zeros((n,), self.dtype, self.device)
            # the weights the updater changes: float32 master weights of a float16 network, else flat_params
            self.flat_master = zeros((n,), self.master_dtype, self.device) if self.mixed else self.flat_params
            state = state_dtype(self.master_dtype)
            self.updater_state = {k: zeros((n,), state, self.device) for k in self.updater.state_names}
        offset = 0
        self._regularized: list[tuple[NDArray, NDArray]] = []
        self._l2: list[slice] = []  # ranges of the flat vector L2 applies to, and those no updater trains
        self._frozen: list[slice] = []
        for layer in self.layers:
            params, grads = {}, {}
            for spec in layer.param_specs():
                size = math.prod(spec.shape)
                params[spec.name] = self.flat_params[offset : offset + size].reshape(spec.shape)
                grads[spec.name] = self.flat_grads[offset : offset + size].reshape(spec.shape)
                if spec.regularize:
                    self._regularized.append((params[spec.name], grads[spec.name]))
                    self._l2.append(slice(offset, offset + size))
                if not spec.trainable:
                    self._frozen.append(slice(offset, offset + size))
                offset += size
            layer.bind(params, grads)

    @property
    def mixed(self) -> bool:
        """True when the updater keeps master weights wider than the compute dtype."""
        return self.master_dtype != self.dtype

    @property
    def _precise(self) -> bool:
        """The update goes through kit.nn.mixed (master weights and/or a loss scale)."""
        return self.mixed or self.loss_scaler is not None

    def cast_master(self) -> None:
        """Write the compute copy (`flat_params`, in `dtype`) from the master weights; a no-op
        without master weights. Code that changes `flat_master` directly calls it after."""
        if self.mixed:
            self.device.xp.copyto(self.flat_params.data, self.flat_master.data, casting="same_kind")

    @property
    def updater(self) -> Updater:
        return self._updater

    @updater.setter
    def updater(self, value: Updater) -> None:
        """A new updater between fits. One that keeps other state (Sgd -> Adam, Adam -> Nesterovs)
        starts that state at zero, as a new DL4J updater does; one with the same state names
        (Adam with another learning rate) goes on from the state there is."""
        if not isinstance(value, Updater):
            raise TypeError(f"Network.updater = {value!r}: give an Updater (Sgd, Nesterovs, Adam ...)")
        state = getattr(self, "updater_state", None)
        if state is None or sorted(state) == sorted(value.state_names):
            self._updater = value
            return
        with self._lock:
            n = self.flat_params.shape[0]
            with scope_out_of_workspaces():
                fresh = {k: zeros((n,), state_dtype(self.master_dtype), self.device) for k in value.state_names}
            self._updater, self.updater_state = value, fresh

    def _initialise(self) -> None:
        """Initial values drawn on the host from `seed`, so every device gets the same net."""
        self.set_params(initial_values([spec for _, spec in self._specs], self.seed))

    @property
    def num_params(self) -> int:
        return self.flat_params.shape[0]

    def params(self) -> NDArray:
        """A detached copy of the flat parameter vector."""
        with scope_out_of_workspaces():
            return self.flat_params.dup()

    def set_params(self, values: Any) -> None:
        if isinstance(values, NDArray) and values.device is not self.device:
            values = values.to(self.device)  # another device's parameters: the counted transfer path
        src = values.numpy() if isinstance(values, NDArray) else np.asarray(values)
        if src.shape != self.flat_params.shape:
            raise ValueError(
                f"set_params: expected {self.flat_params.shape[0]} values, got an array of shape {src.shape}"
            )
        check_finite(src, "the values", where="set_params")
        cast = src.astype(self.dtype, copy=False)
        if not all_finite(cast):
            worst = float(np.max(np.abs(src)))
            raise ValueError(f"set_params: a value of magnitude {worst:.3g} does not fit this network's {self.dtype}")
        with self._lock:  # save() from another thread sees the old parameters or the new, never a mix
            self.flat_params.assign(cast)
            if self.mixed:  # the master weights keep every digit given (float32 of float64 values)
                self.flat_master.assign(src.astype(self.master_dtype, copy=False))

    # ---- validation ----------------------------------------------------------------
    def _features(self, x: Any) -> NDArray:
        if not isinstance(x, NDArray):
            arr = np.asarray(x)
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"features must be numbers, got dtype {arr.dtype}")
            x = asarray(arr.astype(self.dtype, copy=False), device=self.device)
        if x.device is not self.device and x.device.physical is not self.device.physical:
            raise ValueError(
                f"features are on {x.device} but the network is on {self.device}; use .to({self.device.name!r})"
            )
        if x.dtype != self.dtype:
            if x.dtype.kind != "f":
                raise TypeError(
                    f"features have dtype {x.dtype} but the network computes in {self.dtype}; "
                    f"convert with .astype('{self.dtype}')"
                )
            # data keeps the dtype it was given and is cast where it meets the network, to the
            # network's dtype (DL4J does the same), never to a process-wide default
            x = x.astype(self.dtype)
        if x.shape[1:] != self.input_shape:
            raise ValueError(
                f"features of shape {x.shape} do not fit the first layer, which expects "
                f"(batch, {', '.join(map(str, self.input_shape))})"
            )
        return x

    def _check_finite(self, x: NDArray, what: str) -> None:
        check_finite(x.data, what)  # one pass; only a non-finite sum triggers the search (kit.checks)

    def _labels(self, y: NDArray, n: int) -> NDArray:
        expected = (n, *self.output_shape)
        if y.shape != expected:
            if self.loss.classification and len(self.output_shape) != 1:  # the loss, not the labels, is wrong
                rows_of_scores(expected, type(self.loss).__name__)
            raise ValueError(
                f"labels of shape {y.shape} do not match the network's output {expected}: "
                f"{self.output_shape[0]} classes/outputs per example"
            )
        if y.dtype != self.dtype:  # cast where the data meets the network, as the features are
            y = y.astype(self.dtype)
        if self.loss.classification:
            _check_label_rows(y)
        return y

    # ---- training ------------------------------------------------------------------
    def _forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        return self.body.forward(x, mgr, training)

    def _backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """Backpropagate; returns the gradient with respect to the network's input."""
        return self.body.backward(eps, mgr)

    def compute_gradient_and_score(self, ds: DataSet) -> float:
        """Forward, loss and backward on one batch: gradients land in `flat_grads`; no update.
        With a loss scaler they are multiplied by `loss_scaler.scale` (and L2 is left to the update)."""
        with self._lock:
            mgr = self._train_mgr
            with mgr.iteration():
                return self._gradient_step(ds, mgr)

    def _gradient_step(self, ds: DataSet, mgr: LayerWorkspaceMgr) -> float:
        if not isinstance(ds, DataSet):
            raise TypeError(
                f"training needs DataSets (features, labels), got {type(ds).__name__}: wrap with DataSet(x, y)"
            )
        if ds.num_examples == 0:
            raise ValueError("fit: a mini-batch with 0 examples; there is nothing to learn from an empty DataSet")
        x = self._features(ds.features)
        y = self._labels(ds.labels, x.shape[0])
        self._check_finite(x, "features")
        body = self.body
        out = body.forward(x, mgr, True)
        scaler = self.loss_scaler
        with mgr.layer_call():
            score, eps = self.loss.value_and_grad(out, y, mgr)
            if scaler is not None:  # backward computes the gradient times the scale (kit.nn.mixed)
                with np.errstate(over="ignore"):
                    scale_seed(eps, scaler.scale)
        if scaler is None:
            body.backward(eps, mgr)
        else:  # an overflow here is expected now and then: precision_step finds it and skips the step
            with np.errstate(over="ignore", invalid="ignore"):
                body.backward(eps, mgr)
        if self.l2:
            if self._precise:  # added to the unscaled master gradient in precision_step
                score += self._l2_penalty()
            else:
                with mgr.updater():
                    score += self._apply_l2(mgr)
        return score

    def _l2_penalty(self) -> float:
        xp, master = self.device.xp, self.flat_master.data
        return sum(0.5 * self.l2 * float(xp.dot(master[sl], master[sl])) for sl in self._l2)

    def _update(self, mgr: LayerWorkspaceMgr) -> None:
        """The updater's step (inside mgr.updater()): plain, or through kit.nn.mixed."""
        if self._precise:
            precision_step(self, mgr)
        else:
            self.updater.apply(self.flat_params, self.flat_grads, self.updater_state, self.iteration + 1, mgr)

    def _apply_l2(self, mgr: LayerWorkspaceMgr) -> float:
        xp, penalty = self.device.xp, 0.0
        for p, g in self._regularized:
            flat = p.data.reshape(-1)
            penalty += 0.5 * self.l2 * float(xp.dot(flat, flat))
            tmp = mgr.create(ArrayType.UPDATER_WORKING_MEM, p.shape, p.dtype, p.device).data
            xp.multiply(p.data, self.l2, out=tmp)
            g.data += tmp
        return penalty

    def apply_update(self) -> None:
        """Apply the updater to the gradients now in `flat_grads` (one iteration; with a loss
        scaler they are the scaled gradients compute_gradient_and_score left there)."""
        with self._lock:
            mgr = self._train_mgr
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
        lock = self._lock
        # save(), output() ... waiting in another thread: their turn, between two iterations
        if lock.waiting:
            lock.let_waiters_in()
        with lock._lock:  # the RLock itself (C): this thread waits for nobody, see let_waiters_in
            mgr = self._train_mgr
            with mgr.iteration():
                score = self._gradient_step(ds, mgr)
                with mgr.updater():
                    self._update(mgr)
            self.last_score = score
            if advance:
                self.iteration += 1
        memory.maybe_gc()
        return score

    def train_step(self, batches: Sequence[DataSet]) -> list[StepResult]:
        """The step of this network's TrainingLoop: one mini-batch, one iteration."""
        (ds,) = batches
        return [StepResult(self._train_one(ds, advance=True), ds.num_examples)]  # the loop sees the count moved

    def fit(
        self, data: DataSet | Iterable[DataSet], epochs: int = 1, listeners: Iterable[Any] = (), prefetch: int = 0
    ) -> Network:
        """Train on a DataSet (one iteration, as DL4J's fit(DataSet)) or an iterator (epochs).
        `prefetch=N` wraps an iterator that allows it in an AsyncPrefetchIterator with a queue
        of N (DL4J always wraps, with a queue of 2; kit asks you to choose)."""
        loop = self.make_loop(listeners=listeners)
        if isinstance(data, DataSet):  # one iteration, no epoch (DL4J's fit(DataSet))
            loop.run_step([data])
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

    # ---- inference -----------------------------------------------------------------
    def output(self, x: Any, train: bool = False, planned: bool = True) -> NDArray:
        """Predictions for x (probabilities for softmax cross-entropy), always in detached heap
        memory, also when called inside a workspace (DL4J throws there, dl4j#8231).

        In inference a batch size asked for again is answered by a plan (kit.nn.plan,
        `output_plans`): the same numbers with less bookkeeping. `planned=False` runs the layers
        unplanned, in the inference workspaces."""
        if planned and not train:
            lock = self._lock._lock
            if lock.acquire(False):  # free: the RLock itself, without _TurnLock's Python
                try:
                    answer = self.output_plans.answer(x)
                finally:
                    lock.release()
            else:  # wait the way every other caller does (counted, let in between training steps)
                with self._lock:
                    answer = self.output_plans.answer(x)
            if answer is not None:
                return answer
        with self._lock, scope_out_of_workspaces():
            x = self._features(x)
            if x.shape[0] == 0:  # no examples, no work: an empty answer of the right shape
                return empty((0, *self.output_shape), self.dtype, self.device)
            self._check_finite(x, "features")
            mgr = self._infer_mgr
            with mgr.iteration():
                out = self._forward(x, mgr, training=train)
                with scope_out_of_workspaces():
                    result = empty(out.shape, self.dtype, self.device)
                with mgr.layer_call():
                    self.loss.activate(out, result, mgr)
            return result

    def plan_inference(self, batch_size: int) -> InferencePlan:
        """Forward passes for `batch_size` examples, captured once and replayed (kit.nn.plan): no
        allocation and no per-call bookkeeping; the CPU analogue of a captured CUDA graph."""
        return InferencePlan(self, batch_size)

    def score(self, data: DataSet | Iterable[DataSet]) -> float:
        """Mean loss over a DataSet or an iterator (no training, no L2)."""
        batches = [data] if isinstance(data, DataSet) else data
        total, count = 0.0, 0
        with self._lock, scope_out_of_workspaces():
            mgr = self._infer_mgr
            for ds in batches:
                if ds.num_examples == 0:  # an empty batch adds nothing to a mean (it divided by zero)
                    continue
                x = self._features(ds.features)
                y = self._labels(ds.labels, x.shape[0])
                with mgr.iteration():
                    out = self._forward(x, mgr, training=False)
                    with mgr.layer_call():
                        value = self.loss.value(out, y, mgr)
                total += value * x.shape[0]
                count += x.shape[0]
        if count == 0:
            raise ValueError("score: no examples (every batch was empty); give a DataSet with at least one row")
        return total / count

    def evaluate(self, data: Iterable[DataSet]) -> Any:
        return self.do_evaluation(data, Evaluation(self.output_shape[0]))[0]

    def do_evaluation(self, data: DataSet | Iterable[DataSet], *evaluations: Any) -> tuple[Any, ...]:
        """One pass over the data updating every evaluation (Evaluation, ROC, ...)."""
        if not evaluations:
            raise ValueError("do_evaluation needs at least one evaluation object")
        batches = [data] if isinstance(data, DataSet) else data
        for ds in batches:
            probs = self.output(ds.features)
            for ev in evaluations:
                ev.eval(ds.labels, probs)
        return evaluations

    # ---- configuration, copies, files ----------------------------------------------
    @property
    def configuration(self) -> NetworkConfig:
        """The whole configuration as one validated value (JSON round-trip: `to_json()`)."""
        return NetworkConfig(
            layers=tuple(layer.config() for layer in self.body.layers),
            input_shape=self.input_shape,
            loss=self.loss.config(),
            updater=self.updater.config(),
            l2=self.l2,
            seed=self.seed,
            dtype=self.dtype.name,
            training_workspace_mode=self.training_workspace_mode.value,
            inference_workspace_mode=self.inference_workspace_mode.value,
            master_dtype=self.master_dtype.name if self.mixed else None,
            loss_scale=self.loss_scaler.config() if self.loss_scaler is not None else None,
        )

    def config(self) -> dict[str, Any]:
        """`configuration` as plain JSON types."""
        return self.configuration.to_dict()

    @classmethod
    def from_config(cls, cfg: NetworkConfig | dict[str, Any], device: Any = None) -> Network:
        cfg = NetworkConfig.from_dict(cfg)
        return cls(
            [layer_from_config(c) for c in cfg.layers],
            cfg.input_shape,
            loss=loss_from_config(cfg.loss),
            updater=updater_from_config(cfg.updater),
            l2=cfg.l2,
            seed=cfg.seed,
            dtype=cfg.dtype,
            device=device,
            training_workspace_mode=cfg.training_workspace_mode,
            inference_workspace_mode=cfg.inference_workspace_mode,
            master_dtype=cfg.master_dtype,
            loss_scale=cfg.loss_scale,
        )

    def clone(self, device: Any = None) -> Network:
        """An independent copy (parameters, updater state, counters), optionally on another device."""
        twin = Network.from_config(self.configuration, device=device or self.device)
        twin.copy_state_from(self)
        return twin

    def state_arrays(self) -> dict[str, NDArray]:
        """The arrays that make up the trained state: flat parameters, master weights (mixed
        precision) and updater state. The loss scaler's state is `loss_scaler.state()`."""
        master = {"master": self.flat_master} if self.mixed else {}
        return {"params": self.flat_params, **master, **{f"updater_{k}": v for k, v in self.updater_state.items()}}

    def copy_state_from(self, other: Network) -> None:
        """Copy parameters, updater state and counters from a network of the same configuration."""
        if other is self:
            return
        mine, theirs = self.configuration, other.configuration
        if (mine.layers, mine.input_shape) != (theirs.layers, theirs.input_shape):
            raise ValueError(
                f"copy_state_from: the architectures differ ({_architecture(theirs)} into {_architecture(mine)}); "
                "copy state only between networks built from the same layers"
            )
        ours, source = self.state_arrays(), other.state_arrays()
        if self.mixed != other.mixed:
            raise ValueError(
                f"copy_state_from: one network keeps master weights and the other does not (master_dtype "
                f"{other.master_dtype} for dtype {other.dtype} into {self.master_dtype} for {self.dtype}); build both "
                "with the same dtype and master_dtype, or use set_params() to copy parameters only"
            )
        if sorted(ours) != sorted(source):
            raise ValueError(
                f"copy_state_from: updater {type(other.updater).__name__} keeps state {sorted(source)} but "
                f"{type(self.updater).__name__} needs {sorted(ours)}; use the same updater, or set_params() "
                "to copy parameters only"
            )
        first, second = sorted((self, other), key=id)  # one order for every pair: two copies the other way round
        with first._lock, second._lock:  # cannot deadlock; save() on either side sees one whole state
            for key, dst in ours.items():
                dst.assign(source[key])
            if self.loss_scaler is not None and other.loss_scaler is not None:
                self.loss_scaler.load_state(other.loss_scaler.state())
            self.iteration, self.epoch = other.iteration, other.epoch

    def save(self, path: str | os.PathLike) -> None:
        """NumPy .npz (no pickle) + JSON header with SHA-256 checks; atomic. Safe while another
        thread trains: the arrays are copied between two iterations."""
        with self._lock:  # fit_batch holds it for a whole iteration: the snapshot is consistent
            arrays = {k: v.numpy().copy() for k, v in self.state_arrays().items()}
            if self.loss_scaler is not None:  # covered by the file's checksums like every array
                arrays["loss_scaler"] = self.loss_scaler.state()
            counters = {"iteration": self.iteration, "epoch": self.epoch}
            config = self.config()
        write_model(path, config, arrays, counters)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None) -> Network:
        path = os.fspath(path)
        config, arrays, counters = read_model(path)
        try:
            net = cls.from_config(config, device=device)
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelFileError(f"{path}: the configuration does not build a network ({exc})") from None
        expected = {k: v.shape for k, v in net.state_arrays().items()}
        if net.loss_scaler is not None:
            expected["loss_scaler"] = (3,)
        stored = {k: v.shape for k, v in arrays.items()}
        if expected != stored:
            raise ModelFileError(f"{path}: stored arrays {stored} but the configuration needs {expected}")
        try:
            net.set_params(arrays.pop("params"))
            if net.loss_scaler is not None:
                net.loss_scaler.load_state(arrays.pop("loss_scaler"))
        except ValueError as exc:
            raise ModelFileError(f"{path}: {exc}") from None
        for key, value in arrays.items():  # the master weights after set_params: every stored digit
            net.state_arrays()[key].assign(value)
        net.iteration, net.epoch = counters["iteration"], counters["epoch"]
        return net

    def summary(self) -> str:
        lines = [f"Network on {self.device}: input {self.input_shape} -> output {self.output_shape}"]
        lines += [f"  {layer.describe()}" for layer in self.body.layers]
        lines.append(
            f"  {self.num_params:,} parameters "
            f"({self.num_params * self.dtype.itemsize / 2**20:.2f} MiB, one flat buffer)"
        )
        if self._precise:
            mib = self.num_params * self.master_dtype.itemsize / 2**20
            master = f", master weights {self.master_dtype} ({mib:.2f} MiB)"
            scaling = self.loss_scaler if self.loss_scaler is not None else "no loss scaling"
            lines.append(f"  mixed precision: compute {self.dtype}{master if self.mixed else ''}, {scaling}")
        lines.append(
            f"  loss {type(self.loss).__name__}, updater {self.updater.config()}, l2 {self.l2}, workspaces: "
            f"training {self.training_workspace_mode.value}, inference {self.inference_workspace_mode.value}"
        )
        return "\n".join(lines)

    def workspace_stats(self) -> dict[str, dict[str, Any]]:
        return {"training": self._train_mgr.stats(), "inference": self._infer_mgr.stats()}


class _TurnLock:
    """A network's lock (re-entrant). Training holds it for one iteration at a time and would
    take it straight back after each (a released Python lock goes to whoever asks first, and
    the training thread asks within microseconds); a thread that had to wait for it (save,
    output, score from elsewhere) is counted, and let in between two iterations."""

    __slots__ = ("_count", "_lock", "waiting")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self.waiting = 0

    def __enter__(self) -> _TurnLock:
        if not self._lock.acquire(blocking=False):
            with self._count:
                self.waiting += 1
            try:
                self._lock.acquire()
            finally:
                with self._count:
                    self.waiting -= 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def let_waiters_in(self, patience: float = 0.05) -> None:
        """Wait (at most `patience` seconds) until the threads queued for the lock have got it."""
        if self._lock._is_owned():  # still held further out: nobody can come in now
            return
        deadline = time.monotonic() + patience
        while self.waiting and time.monotonic() < deadline:
            time.sleep(0.0001)


@functools.lru_cache(maxsize=64)
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


def _check_label_rows(y: NDArray) -> None:
    """A classifier's label rows are one-hot or probabilities: in [0, 1], summing to 1."""
    raw, xp = y.data, y.device.xp
    if raw.size == 0:
        return
    # values >= 0 in rows summing to 1 (+-1e-3) are also <= 1 (+1e-3): no separate maximum needed
    if xp is np:  # the ufuncs' own reductions: no Python wrapper on the training hot path
        sums = raw @ _ones(raw.shape[1], raw.dtype) if raw.ndim == 2 else np.add.reduce(raw, axis=1)  # BLAS
        lo, low_sum, high_sum = np.minimum.reduce(raw, axis=None), np.minimum.reduce(sums), np.maximum.reduce(sums)
    else:
        sums = raw.sum(axis=1)
        lo, low_sum, high_sum = raw.min(), sums.min(), sums.max()
    if float(lo) >= 0 and float(low_sum) >= 1 - 1e-3 and float(high_sum) <= 1 + 1e-3:  # NaN fails each test
        return
    host = y.numpy()
    probability_rows(host.reshape(host.shape[0], -1))  # kit.labels' rule names the first bad row


def _architecture(cfg: NetworkConfig) -> str:
    return f"input {cfg.input_shape}, layers " + ", ".join(c["type"] for c in cfg.layers)
