"""Network: layers over one flat parameter buffer and one flat gradient buffer.

    >>> net = Network([Dense(128), ReLU(), Dense(10)], input_shape=(64,), updater=Adam(1e-3))
    >>> net.fit(ArrayIterator(train, batch_size=64, shuffle=True), epochs=5,
    ...         listeners=[ScoreIterationListener(50)])
    >>> net.evaluate(ArrayIterator(test, 256)).accuracy()
    >>> probs = net.output(test.features)          # always detached (heap) memory
    >>> net.save("digits.npz"); Network.load("digits.npz")

Every layer's parameters are views into `net.flat_params` (and gradients into
`net.flat_grads`), so averaging replicas, broadcasting, encoding updates or saving are
operations on one vector. Training runs each iteration inside the workspaces of
`training_workspace_mode` (kit.nn.workspace_mgr), inference inside `inference_workspace_mode`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from kit import backend, memory
from kit.creation import asarray, empty, zeros
from kit.data.dataset import DataSet
from kit.devices import as_device
from kit.ndarray import NDArray
from kit.nn.layers import Layer, Sequential, call_backward, call_forward, layer_from_config
from kit.nn.losses import Loss, SoftmaxCrossEntropy, loss_from_config
from kit.nn.updaters import Adam, Updater, updater_from_config
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspaceMode
from kit.workspace import scope_out_of_workspaces

__all__ = ["ModelFileError", "Network"]

FORMAT = "kit.Network/1"
_ids = itertools.count()


class ModelFileError(ValueError):
    """A saved model file that is corrupted, tampered with, or does not match."""


def _leaves(layer: Layer) -> list[Layer]:
    subs = layer.sublayers()
    return [layer] if not subs else [leaf for s in subs for leaf in _leaves(s)]


class Network:
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
        inference_workspace_mode: WorkspaceMode | str = WorkspaceMode.SINGLE,
        input_gradient: bool = False,
    ) -> None:
        self.body = layers if isinstance(layers, Sequential) else Sequential(list(layers))
        self.input_shape = tuple(int(n) for n in input_shape)
        self.loss = loss or SoftmaxCrossEntropy()
        self.updater = updater or Adam()
        if not isinstance(l2, (int, float)) or not math.isfinite(l2) or l2 < 0:
            raise ValueError(f"Network(l2={l2!r}): must be a finite number >= 0")
        self.l2, self.seed = float(l2), int(seed)
        self.dtype = backend.resolve_dtype(dtype, floating_only=True)
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
        self._lock = threading.RLock()
        self._stop = False
        self._name = f"net{next(_ids)}"
        self._allocate_buffers()
        calls = len(self.layers) + 1  # each leaf layer, and the loss
        self._train_mgr = LayerWorkspaceMgr(self.training_workspace_mode, f"{self._name}/train/", self.device, calls)
        self._infer_mgr = LayerWorkspaceMgr(self.inference_workspace_mode, f"{self._name}/infer/", self.device, calls)
        self._initialise()

    # ---- flat buffers ----------------------------------------------------------------
    def _allocate_buffers(self) -> None:
        self.layers = _leaves(self.body)
        self._specs = [(layer, spec) for layer in self.layers for spec in layer.param_specs()]
        n = sum(math.prod(spec.shape) for _, spec in self._specs)
        with scope_out_of_workspaces():
            self.flat_params = zeros((n,), self.dtype, self.device)
            self.flat_grads = zeros((n,), self.dtype, self.device)
            self.updater_state = {k: zeros((n,), self.dtype, self.device) for k in self.updater.state_names}
        offset = 0
        self._regularized: list[tuple[NDArray, NDArray]] = []
        for layer in self.layers:
            params, grads = {}, {}
            for spec in layer.param_specs():
                size = math.prod(spec.shape)
                params[spec.name] = self.flat_params[offset : offset + size].reshape(spec.shape)
                grads[spec.name] = self.flat_grads[offset : offset + size].reshape(spec.shape)
                if spec.regularize:
                    self._regularized.append((params[spec.name], grads[spec.name]))
                offset += size
            layer.bind(params, grads)

    def _initialise(self) -> None:
        """Initial values drawn on the host from `seed`, so every device gets the same net."""
        rng = np.random.default_rng(self.seed)
        host = np.empty(self.flat_params.shape, dtype=np.float64)
        offset = 0
        for _, spec in self._specs:
            size = math.prod(spec.shape)
            host[offset : offset + size] = _init_values(spec, rng, size)
            offset += size
        self.set_params(host)

    @property
    def num_params(self) -> int:
        return self.flat_params.shape[0]

    def params(self) -> NDArray:
        """A detached copy of the flat parameter vector."""
        with scope_out_of_workspaces():
            return self.flat_params.dup()

    def set_params(self, values: Any) -> None:
        src = values.numpy() if isinstance(values, NDArray) else np.asarray(values)
        if src.shape != self.flat_params.shape:
            raise ValueError(
                f"set_params: expected {self.flat_params.shape[0]} values, got an array of shape {src.shape}"
            )
        if not np.all(np.isfinite(src)):
            raise ValueError("set_params: the values contain NaN or infinity")
        with scope_out_of_workspaces():
            self.flat_params[...] = asarray(src.astype(self.dtype, copy=False), device=self.device)

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
            raise TypeError(
                f"features have dtype {x.dtype} but the network computes in {self.dtype}; "
                f"convert with .astype('{self.dtype}')"
            )
        if x.shape[1:] != self.input_shape:
            raise ValueError(
                f"features of shape {x.shape} do not fit the first layer, which expects "
                f"(batch, {', '.join(map(str, self.input_shape))})"
            )
        return x

    def _check_finite(self, x: NDArray, what: str) -> None:
        total = float(x.sum())  # one pass; only a non-finite sum triggers the search below
        if math.isfinite(total):
            return
        host = x.numpy()
        bad = np.argwhere(~np.isfinite(host))
        if bad.size:
            where = ", ".join(str(int(i)) for i in bad[0])
            raise ValueError(f"{what} contain NaN or infinity ({len(bad)} values; first at index [{where}])")

    def _labels(self, y: NDArray, n: int) -> NDArray:
        expected = (n, *self.output_shape)
        if y.shape != expected:
            raise ValueError(
                f"labels of shape {y.shape} do not match the network's output {expected}: "
                f"{self.output_shape[0]} classes/outputs per example"
            )
        if y.dtype != self.dtype:
            raise TypeError(f"labels have dtype {y.dtype} but the network computes in {self.dtype}")
        return y

    # ---- training ------------------------------------------------------------------
    def _forward(self, x: NDArray, mgr: LayerWorkspaceMgr, training: bool) -> NDArray:
        for layer in self.body.layers:
            x = call_forward(layer, x, mgr, training)
        return x

    def _backward(self, eps: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        """Backpropagate; returns the gradient with respect to the network's input."""
        for layer in reversed(self.body.layers):
            eps = call_backward(layer, eps, mgr)
        return eps

    def compute_gradient_and_score(self, ds: DataSet) -> float:
        """Forward, loss and backward on one batch: gradients land in `flat_grads`; no update."""
        with self._lock:
            mgr = self._train_mgr
            with mgr.iteration():
                return self._gradient_step(ds, mgr)

    def _gradient_step(self, ds: DataSet, mgr: LayerWorkspaceMgr) -> float:
        x = self._features(ds.features)
        y = self._labels(ds.labels, x.shape[0])
        self._check_finite(x, "features")
        out = self._forward(x, mgr, training=True)
        with mgr.layer_call():
            score, eps = self.loss.value_and_grad(out, y, mgr)
        self._backward(eps, mgr)
        if self.l2:
            with mgr.updater():
                score += self._apply_l2(mgr)
        return score

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
        """Apply the updater to the gradients now in `flat_grads` (one iteration)."""
        with self._lock:
            mgr = self._train_mgr
            with mgr.iteration(), mgr.updater():
                self.updater.apply(self.flat_params, self.flat_grads, self.updater_state, self.iteration + 1, mgr)
            self.iteration += 1

    def fit_batch(self, ds: DataSet) -> float:
        """One iteration on one mini-batch: gradients, L2, updater. Returns the score."""
        with self._lock:
            mgr = self._train_mgr
            with mgr.iteration():
                score = self._gradient_step(ds, mgr)
                with mgr.updater():
                    self.updater.apply(self.flat_params, self.flat_grads, self.updater_state, self.iteration + 1, mgr)
            self.iteration += 1
            self.last_score = score
        memory.maybe_gc()
        return score

    def fit(
        self, data: DataSet | Iterable[DataSet], epochs: int = 1, listeners: Iterable[Any] = (), prefetch: int = 0
    ) -> Network:
        """Train on a DataSet (one iteration, as DL4J's fit(DataSet)) or an iterator (epochs).
        `prefetch=N` wraps an iterator that allows it in an AsyncPrefetchIterator with a queue
        of N (DL4J always wraps, with a queue of 2; kit asks you to choose)."""
        listeners = list(listeners)
        if isinstance(data, DataSet):
            self._iteration_with_listeners(data, listeners, etl_ms=0.0)
            return self
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"fit(epochs={epochs!r}): must be a positive integer")
        if prefetch and getattr(data, "async_supported", False):
            from kit.data.async_iter import AsyncPrefetchIterator

            with AsyncPrefetchIterator(data, prefetch=prefetch, device=self.device) as wrapped:
                return self.fit(wrapped, epochs, listeners)
        self._stop = False
        for listener in listeners:
            _call(listener, "on_fit_start", self)
        for _ in range(epochs):
            for listener in listeners:
                _call(listener, "on_epoch_start", self)
            t_etl = time.perf_counter()
            for ds in data:
                self._iteration_with_listeners(ds, listeners, (time.perf_counter() - t_etl) * 1e3)
                if self._stop:
                    break
                t_etl = time.perf_counter()
            if hasattr(data, "reset"):
                data.reset()
            self.epoch += 1
            for listener in listeners:
                _call(listener, "on_epoch_end", self)
            if self._stop:
                break
        return self

    def _iteration_with_listeners(self, ds: DataSet, listeners: list[Any], etl_ms: float) -> None:
        self.last_etl_ms = etl_ms
        score = self.fit_batch(ds)
        for listener in listeners:
            listener.iteration_done(self, self.iteration, self.epoch, score=score, batch_size=ds.num_examples)

    def stop_fit(self) -> None:
        """Ask a running fit() to stop after the current iteration."""
        self._stop = True

    # ---- inference -----------------------------------------------------------------
    def output(self, x: Any, train: bool = False) -> NDArray:
        """Predictions for x (probabilities for softmax cross-entropy), always in detached heap
        memory, also when called inside a workspace (DL4J throws there, dl4j#8231)."""
        with self._lock, scope_out_of_workspaces():
            x = self._features(x)
            self._check_finite(x, "features")
            mgr = self._infer_mgr
            with mgr.iteration():
                out = self._forward(x, mgr, training=train)
                with scope_out_of_workspaces():
                    result = empty(out.shape, self.dtype, self.device)
                with mgr.layer_call():
                    self.loss.activate(out, result, mgr)
            return result

    def score(self, data: DataSet | Iterable[DataSet]) -> float:
        """Mean loss over a DataSet or an iterator (no training, no L2)."""
        batches = [data] if isinstance(data, DataSet) else data
        total, count = 0.0, 0
        with self._lock, scope_out_of_workspaces():
            mgr = self._infer_mgr
            for ds in batches:
                x = self._features(ds.features)
                y = self._labels(ds.labels, x.shape[0])
                with mgr.iteration():
                    out = self._forward(x, mgr, training=False)
                    with mgr.layer_call():
                        value = self.loss.value(out, y, mgr)
                total += value * x.shape[0]
                count += x.shape[0]
        if count == 0:
            raise ValueError("score: no examples")
        return total / count

    def evaluate(self, data: Iterable[DataSet]) -> Any:
        from kit.evaluation import Evaluation

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

    # ---- copies, files -------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "layers": [layer.config() for layer in self.body.layers],
            "input_shape": list(self.input_shape),
            "loss": self.loss.config(),
            "updater": self.updater.config(),
            "l2": self.l2,
            "seed": self.seed,
            "dtype": self.dtype.name,
            "training_workspace_mode": self.training_workspace_mode.value,
            "inference_workspace_mode": self.inference_workspace_mode.value,
        }

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device: Any = None) -> Network:
        return cls(
            [layer_from_config(c) for c in cfg["layers"]],
            tuple(cfg["input_shape"]),
            loss=loss_from_config(cfg["loss"]),
            updater=updater_from_config(cfg["updater"]),
            l2=cfg["l2"],
            seed=cfg["seed"],
            dtype=cfg["dtype"],
            device=device,
            training_workspace_mode=cfg["training_workspace_mode"],
            inference_workspace_mode=cfg["inference_workspace_mode"],
        )

    def clone(self, device: Any = None) -> Network:
        """An independent copy (parameters, updater state, counters), optionally on another device."""
        twin = Network.from_config(self.config(), device=device or self.device)
        twin.copy_state_from(self)
        return twin

    def copy_state_from(self, other: Network) -> None:
        """Copy parameters, updater state and counters from a network of the same shape."""
        for dst, src in [(self.flat_params, other.flat_params)] + [
            (self.updater_state[k], other.updater_state[k]) for k in self.updater_state
        ]:
            host = src.numpy()
            if self.device.kind == "cpu":
                np.copyto(dst.data, host)
            else:
                with self.device.activate():
                    dst.data.set(np.ascontiguousarray(host))
        self.iteration, self.epoch = other.iteration, other.epoch

    def save(self, path: str | os.PathLike) -> None:
        """NumPy .npz (no pickle) + JSON config with a SHA-256 of every array; atomic."""
        arrays = {"params": self.flat_params.numpy()}
        arrays.update({f"updater_{k}": v.numpy() for k, v in self.updater_state.items()})
        meta = {
            "config": self.config(),
            "iteration": self.iteration,
            "epoch": self.epoch,
            "sha256": {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in arrays.items()},
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        path = os.fspath(path)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None) -> Network:
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise ModelFileError(f"{path}: not a readable kit model file ({type(exc).__name__}: {exc})") from None
        if "meta" not in arrays or "params" not in arrays:
            raise ModelFileError(f"{path}: missing 'meta' or 'params'; not a kit model file")
        try:
            meta = json.loads(arrays.pop("meta").tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFileError(f"{path}: the configuration is corrupted ({exc})") from None
        if meta.get("config", {}).get("format") != FORMAT:
            raise ModelFileError(f"{path}: format {meta.get('config', {}).get('format')!r}, expected {FORMAT!r}")
        for key, value in arrays.items():
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
            if meta["sha256"].get(key) != digest:
                raise ModelFileError(
                    f"{path}: array {key!r} does not match its SHA-256: the file was modified or corrupted"
                )
        net = cls.from_config(meta["config"], device=device)
        if arrays["params"].shape != net.flat_params.shape:
            raise ModelFileError(
                f"{path}: {arrays['params'].shape[0]} parameters stored but the configuration needs {net.num_params}"
            )
        net.set_params(arrays["params"])
        for k, v in net.updater_state.items():
            with scope_out_of_workspaces():
                v[...] = asarray(arrays[f"updater_{k}"], device=net.device)
        net.iteration, net.epoch = meta["iteration"], meta["epoch"]
        return net

    def summary(self) -> str:
        lines = [f"Network on {self.device}: input {self.input_shape} -> output {self.output_shape}"]
        lines += [f"  {layer.describe()}" for layer in self.body.layers]
        lines.append(
            f"  {self.num_params:,} parameters "
            f"({self.num_params * self.dtype.itemsize / 2**20:.2f} MiB, one flat buffer)"
        )
        lines.append(
            f"  loss {type(self.loss).__name__}, updater {self.updater.config()}, l2 {self.l2}, workspaces: "
            f"training {self.training_workspace_mode.value}, inference {self.inference_workspace_mode.value}"
        )
        return "\n".join(lines)

    def workspace_stats(self) -> dict[str, dict[str, Any]]:
        return {"training": self._train_mgr.stats(), "inference": self._infer_mgr.stats()}


def _call(listener: Any, name: str, *args: Any) -> None:
    fn = getattr(listener, name, None)
    if fn is not None:
        fn(*args)


def _init_values(spec: Any, rng: np.random.Generator, size: int) -> np.ndarray:
    init = spec.init
    if init == "zeros":
        return np.zeros(size)
    if init == "ones":
        return np.ones(size)
    if init == "xavier":  # DL4J XAVIER: N(0, 2 / (fan_in + fan_out))
        return rng.standard_normal(size) * math.sqrt(2.0 / (spec.fan_in + spec.fan_out))
    if init in ("he", "relu"):  # DL4J RELU (He): N(0, 2 / fan_in)
        return rng.standard_normal(size) * math.sqrt(2.0 / spec.fan_in)
    if init.startswith("normal:"):
        return rng.standard_normal(size) * float(init.split(":", 1)[1])
    raise ValueError(f"unknown weight initialisation {init!r}: use 'xavier', 'he', 'normal:<std>', 'zeros' or 'ones'")
