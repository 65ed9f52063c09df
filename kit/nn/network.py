"""Network: layers over one flat parameter buffer and one flat gradient buffer.

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.training.listeners import ScoreIterationListener
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

The class in rooms: this module holds what a Network owns (its layers, the flat buffers, the
updater, the checks where data meets the network); the methods that use them come from three
mixins: kit.nn.network_training (an iteration, `fit`), kit.nn.network_inference (`output`,
`score`, evaluation) and kit.nn.network_state (configuration, copies, save/load). Its lock is
kit.nn.turn_lock's.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from kit.arrays.checks import all_finite, check_cast, check_finite, narrow_remedy
from kit.arrays.creation import aligned_zeros, asarray
from kit.arrays.ndarray import NDArray
from kit.core import backend
from kit.core.arguments import real, whole
from kit.core.devices import as_device
from kit.data.labels import probability_rows
from kit.nn.init import initial_values
from kit.nn.layers import Layer, Sequential
from kit.nn.losses import Loss, SoftmaxCrossEntropy, rows_of_scores
from kit.nn.mixed import LossScaler, master_dtype_for
from kit.nn.network_inference import Inference
from kit.nn.network_state import NetworkState
from kit.nn.network_training import Training
from kit.nn.persistence import ModelFileError
from kit.nn.replay import TrainingPlans
from kit.nn.replay_inference import OutputPlans
from kit.nn.turn_lock import TurnLock
from kit.nn.updaters import Adam, Updater, state_dtype
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode
from kit.state import STATE
from kit.workspaces.workspace import scope_out_of_workspaces

__all__ = ["ModelFileError", "Network"]


def _leaves(layer: Layer) -> list[Layer]:
    subs = layer.sublayers()
    return [layer] if not subs else [leaf for s in subs for leaf in _leaves(s)]


class Network(Training, Inference, NetworkState):
    """A feed-forward network: its layers (one Sequential body), trained by one updater against one loss.

    What it owns: `flat_params` and `flat_grads`, one vector each, of which every layer's
    parameters and gradients are views (and `flat_master`, the float32 master weights of a
    mixed-precision network; after an update by Sgd or Nesterovs, `flat_grads` holds the update
    written over the gradient, see `Updater.exact_in_place`); `updater_state` (Adam's m and v
    ...); the counters `iteration` and `epoch`; and two LayerWorkspaceMgrs, `train_mgr` and
    `infer_mgr` (kit.nn.workspace_mgr), whose workspaces (named after this network, one set per
    thread that uses it) hold each training and each inference iteration's arrays. Arrays it
    hands out (`output`, `params`) are detached: they stay valid after those workspaces move on.
    `lock` (kit.nn.turn_lock.TurnLock): hold it, `with net.lock:`, to read or change one whole
    state while another thread may train; training holds it one iteration at a time.

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
        self.l2, self.seed = real("Network", "l2", l2, low=0), whole("Network", "seed", seed, 0)
        self.dtype = backend.resolve_dtype(dtype, floating_only=True)
        # mixed precision (kit.nn.mixed): the updater's master copy and the loss scale
        self.master_dtype = master_dtype_for(self.dtype, master_dtype, backend.resolve_dtype)
        self.loss_scaler = LossScaler.from_spec(loss_scale)
        self.device = as_device(device)
        self.training_workspace_mode = WorkspaceMode(training_workspace_mode)
        self.inference_workspace_mode = WorkspaceMode(inference_workspace_mode)
        self.output_shape = self.body.build(self.input_shape)
        self.body.releases_given_gradient = True  # the loss's gradient is read by the body alone
        # the first layer's input gradient is unused unless asked for (gradient checks, saliency)
        self.input_gradient = bool(input_gradient)
        self.body.layers[0].skip_input_grad = not self.input_gradient
        self.iteration = 0
        self.epoch = 0
        self.last_score = float("nan")
        self.last_etl_ms = 0.0
        self.lock = TurnLock()
        self._loop: Any = None  # a weak reference to the loop training this network (stop_fit)
        self._name = STATE.unique_name("net")
        self._allocate_buffers()
        calls = len(self.layers) + 1  # each leaf layer, and the loss
        self.train_mgr = LayerWorkspaceMgr(self.training_workspace_mode, f"{self._name}/train/", self.device, calls)
        self.infer_mgr = LayerWorkspaceMgr(
            self.inference_workspace_mode, f"{self._name}/infer/", self.device, calls, backward_follows=False
        )
        self.output_plans = OutputPlans(self)  # output()'s replays, one per batch size (kit.nn.replay)
        self.train_plans = TrainingPlans(self)  # fit's, one per batch size (kit.nn.replay)
        self._initialise()

    # ---- flat buffers ----------------------------------------------------------------
    def _allocate_buffers(self) -> None:
        self.layers = _leaves(self.body)
        self._specs = [(layer, spec) for layer in self.layers for spec in layer.param_specs()]
        n = sum(math.prod(spec.shape) for _, spec in self._specs)
        # on the heap, each starting on a cache line (kit.memory.allocate_aligned): BLAS reads and writes
        # every layer's weights and gradients in them (the first layer's start on the line; a later
        # layer's where the parameters before it end: on a line when they fill whole lines)
        self.flat_params = aligned_zeros((n,), self.dtype, self.device)
        self.flat_grads = aligned_zeros((n,), self.dtype, self.device)
        # the weights the updater changes: float32 master weights of a float16 network, else flat_params
        self.flat_master = aligned_zeros((n,), self.master_dtype, self.device) if self.mixed else self.flat_params
        state = state_dtype(self.master_dtype)
        self.updater_state = {k: aligned_zeros((n,), state, self.device) for k in self.updater.state_names}
        offset = 0
        self._regularized: list[tuple[NDArray, NDArray]] = []
        self.l2_slices: list[slice] = []  # ranges of the flat vector L2 applies to, and those no updater trains
        self.frozen_slices: list[slice] = []
        for layer in self.layers:
            params, grads = {}, {}
            for spec in layer.param_specs():
                size = math.prod(spec.shape)
                params[spec.name] = self.flat_params[offset : offset + size].reshape(spec.shape)
                grads[spec.name] = self.flat_grads[offset : offset + size].reshape(spec.shape)
                if spec.regularize:
                    self._regularized.append((params[spec.name], grads[spec.name]))
                    self.l2_slices.append(slice(offset, offset + size))
                if not spec.trainable:
                    self.frozen_slices.append(slice(offset, offset + size))
                offset += size
            layer.bind(params, grads)

    @property
    def mixed(self) -> bool:
        """True when the updater keeps master weights wider than the compute dtype."""
        return self.master_dtype != self.dtype

    @property
    def precision_managed(self) -> bool:
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
        with self.lock:
            n = self.flat_params.shape[0]
            state = state_dtype(self.master_dtype)  # on the heap and on a cache line, as _allocate_buffers makes it
            fresh = {k: aligned_zeros((n,), state, self.device) for k in value.state_names}
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
        with self.lock:  # save() from another thread sees the old parameters or the new, never a mix
            self.flat_params.assign(cast)
            if self.mixed:  # the master weights keep every digit given (float32 of float64 values)
                self.flat_master.assign(src.astype(self.master_dtype, copy=False))

    # ---- validation ----------------------------------------------------------------
    def _features(self, x: Any) -> NDArray:
        if not isinstance(x, NDArray):
            arr = np.asarray(x)
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"features must be numbers, got dtype {arr.dtype}")
            with np.errstate(over="ignore"):  # an overflow is found and named just below
                cast = arr.astype(self.dtype, copy=False)
            if cast is not arr:  # whole numbers too: int64's 70,000 is no float16
                check_cast(arr, cast, "features", narrow_remedy(self.dtype))
            x = asarray(cast, device=self.device)
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
            with np.errstate(over="ignore"):  # an overflow is found and named just below
                source, x = x, x.astype(self.dtype)
            check_cast(source.data, x.data, "features", narrow_remedy(self.dtype))
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
            with np.errstate(over="ignore"):  # an overflow is found and named just below
                source, y = y, y.astype(self.dtype)
            check_cast(source.data, y.data, "labels", narrow_remedy(self.dtype, "targets"))
        if self.loss.classification:
            _check_label_rows(y)
        return y

    def _forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        return self.body.forward(x, mgr, training)

    def _backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """Backpropagate; returns the gradient with respect to the network's input."""
        return self.body.backward(eps, mgr)

    def clone(self, device: Any = None) -> Network:
        """An independent copy (parameters, updater state, counters), optionally on another device."""
        twin = Network.from_config(self.configuration, device=device or self.device)
        twin.copy_state_from(self)
        return twin

    def summary(self) -> str:
        lines = [f"Network on {self.device}: input {self.input_shape} -> output {self.output_shape}"]
        lines += [f"  {layer.describe()}" for layer in self.body.layers]
        lines.append(
            f"  {self.num_params:,} parameters "
            f"({self.num_params * self.dtype.itemsize / 2**20:.2f} MiB, one flat buffer)"
        )
        if self.precision_managed:
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
        return {"training": self.train_mgr.stats(), "inference": self.infer_mgr.stats()}


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
