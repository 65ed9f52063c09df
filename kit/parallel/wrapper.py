"""ParallelWrapper: data-parallel training of one network on several devices (DL4J's).

    >>> from kit.data import ArrayIterator, load_digits
    >>> from kit.nn import Adam, mlp
    >>> from kit.parallel import ParallelWrapper
    >>> train, test = load_digits()
    >>> net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2))
    >>> with ParallelWrapper(net, workers=2, averaging_frequency=5) as pw:
    ...     pw.fit(ArrayIterator(train, 64, shuffle=True), epochs=3)
    <kit.parallel.wrapper.ParallelWrapper object at 0x...>
    >>> net.evaluate(ArrayIterator(test, 256)).accuracy()   # the wrapper leaves the averaged parameters in `net`
    0.9...

One worker thread per replica, pinned to device i % n, built once per wrapper (DL4J rebuilds them
every fit: dl4j#8023). Each round the main thread hands one batch to each worker and waits for all,
so the result does not depend on thread timing. AVERAGING averages the parameters (and updater
state, `average_updaters`) every `averaging_frequency` rounds: with plain SGD and frequency 1, one
model on the concatenated batches. SHARED_GRADIENTS: every replica applies the sum of all workers'
threshold-encoded updates, so replicas stay identical without averaging. In mixed precision each
replica skips its own overflowing steps; AVERAGING keeps the smallest scale. Each fit() starts from
the model as it is then, hyper-parameters included; the model holds the fit's result when fit()
returns: a listener's epoch callbacks get the model as the fit found it (call `pw.sync()` there to
see the average so far, as early stopping does), and sync() refuses a model changed meanwhile.

Differences from DL4J, on purpose: workers=1 is allowed (a comparison's baseline); the model ends
with the averaged parameters, not worker 0's; a worker's exception stops fit() at once, naming the
worker; `shutdown()` during fit() makes fit() raise and write none of its rounds, while stop_fit()
keeps the result. The threads are kit.parallel.worker's; here: replicas, rounds, averaging, shutdown.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from kit.core import backend
from kit.core.arguments import whole
from kit.core.context import scope_out_of_workspaces
from kit.core.devices import AnyDevice, as_device, blas_threads, cores_per_worker, default_devices, gpu_count
from kit.data.async_iter import AsyncPrefetchIterator
from kit.data.dataset import DataSet
from kit.lifecycle import ShutsDownOnExit
from kit.nn.layers import Layer, hyper_values
from kit.nn.loop import StepResult, TrainingLoop, loop_hooks
from kit.nn.losses import loss_from_config
from kit.nn.mixed import LossScaler
from kit.nn.network import Network
from kit.nn.updaters import updater_from_config
from kit.nn.workspace_mgr import WorkspaceMode
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    NoOpResidualPostProcessor,
    ResidualPostProcessor,
    ThresholdAlgorithm,
)
from kit.parallel.worker import Task, Worker, WorkerError

__all__ = ["ParallelWrapper", "TrainingMode", "WorkerError", "default_devices"]

log = logging.getLogger(__name__)


class TrainingMode(enum.Enum):
    AVERAGING = "AVERAGING"
    SHARED_GRADIENTS = "SHARED_GRADIENTS"


def _workers_on_devices(
    model: Network, workers: int | None, devices: Sequence[str | AnyDevice] | None
) -> tuple[int, list[AnyDevice]]:
    """The wrapper's model, worker count and devices checked at the call: (workers, worker i's
    device at i). Without `workers`, one per device given, else one per GPU (at least 2)."""
    if not isinstance(model, Network):
        raise TypeError(f"ParallelWrapper needs a kit.nn.Network, got {type(model).__name__}")
    if devices is not None:
        devices = [as_device(d) for d in devices]
        if not devices:
            raise ValueError("ParallelWrapper(devices=[]): give at least one device")
    if workers is None:
        workers = len(devices) if devices else max(gpu_count(), 2)
    workers = whole("ParallelWrapper", "workers", workers, 1, what=" (at least 1 worker)")
    on = [devices[i % len(devices)] for i in range(workers)] if devices else default_devices(workers)
    return workers, on


class ParallelWrapper(ShutsDownOnExit):
    """Data-parallel training of the user's Network (`model`) by `workers` replicas (DL4J's ParallelWrapper).

    What it owns: the replicas (one Network per worker, built once from the model's configuration
    and state, on its device: `replicas`, `devices`), one worker thread per replica (and the
    prefetch thread of a fit with `prefetch_buffer`), and the counters of its rounds (`iteration`,
    `epoch`, `averagings`, `encoding_stats`). It does not own the model: each fit() starts from the
    model as it is and leaves the averaged result in it. The threads end with `shutdown()`, at the
    end of a `with` block, or when the wrapper is dropped; a shut-down wrapper cannot fit again.

        >>> import numpy as np
        >>> from kit.data import ArrayIterator, DataSet
        >>> from kit.nn import Sgd, mlp
        >>> from kit.parallel import ParallelWrapper
        >>> net = mlp(4, hidden=(8,), n_out=2, updater=Sgd(0.1), seed=0)
        >>> data = DataSet(np.random.default_rng(0).random((32, 4)), np.arange(32) % 2, num_classes=2)
        >>> with ParallelWrapper(net, workers=2, prefetch_buffer=0) as pw:
        ...     pw.fit(ArrayIterator(data, 8), epochs=2)    # 4 batches an epoch: 2 rounds of 2 workers
        <kit.parallel.wrapper.ParallelWrapper object at 0x...>
        >>> net.iteration, net.epoch                        # a round counts as one iteration
        (4, 2)
        >>> len(pw.replicas), pw.threads_alive()            # the `with` block shut the threads down
        (2, 0)
    """

    def __init__(
        self,
        model: Network,
        workers: int | None = None,
        devices: Sequence[str | AnyDevice] | None = None,
        prefetch_buffer: int = 16,
        averaging_frequency: int = 1,
        report_score_after_averaging: bool = False,
        average_updaters: bool = True,
        workspace_mode: WorkspaceMode | str | None = None,
        training_mode: TrainingMode | str = TrainingMode.AVERAGING,
        threshold_algorithm: ThresholdAlgorithm | None = None,
        residual_post_processor: ResidualPostProcessor | None = None,
        listeners: Iterable[object] = (),
    ) -> None:
        workers, on = _workers_on_devices(model, workers, devices)  # every argument checked before any is kept
        prefetch_buffer = whole("ParallelWrapper", "prefetch_buffer", prefetch_buffer, 0)
        averaging_frequency = whole("ParallelWrapper", "averaging_frequency", averaging_frequency, 1)
        self.model, self.workers, self.devices = model, workers, on
        self.prefetch_buffer, self.averaging_frequency = prefetch_buffer, averaging_frequency
        self.report_score_after_averaging = _flag("report_score_after_averaging", report_score_after_averaging)
        self.average_updaters = _flag("average_updaters", average_updaters)
        self.training_mode = _choice("training_mode", training_mode, TrainingMode)
        if threshold_algorithm is not None and not hasattr(threshold_algorithm, "calculate_threshold"):
            raise TypeError(
                f"ParallelWrapper(threshold_algorithm={threshold_algorithm!r}): a ThresholdAlgorithm, e.g. "
                "FixedThresholdAlgorithm(1e-3), or None for AdaptiveThresholdAlgorithm()"
            )
        if residual_post_processor is not None and not hasattr(residual_post_processor, "process_residual"):
            raise TypeError(
                f"ParallelWrapper(residual_post_processor={residual_post_processor!r}): a ResidualPostProcessor, "
                "e.g. ResidualClippingPostProcessor(5, 5), or None for none"
            )
        self.threshold_algorithm = AdaptiveThresholdAlgorithm() if threshold_algorithm is None else threshold_algorithm
        self.residual_post_processor = residual_post_processor or NoOpResidualPostProcessor()
        mode = workspace_mode
        self.workspace_mode = (
            model.training_workspace_mode if mode is None else _choice("workspace_mode", mode, WorkspaceMode)
        )
        self.listeners = list(listeners)
        self.iteration = model.iteration  # a trained model goes on counting (Adam's bias correction too)
        self.epoch = model.epoch
        self.last_score = float("nan")
        self.averagings = 0
        self.averaging_seconds = 0.0
        self.encoding_stats: list[dict[str, Any]] = []  # SHARED_GRADIENTS: tau and sparsity per worker, per round
        self.round_seconds: list[float] = []
        self._dirty: set[int] = set()  # workers that trained since the last averaging
        self.loop: TrainingLoop | None = None
        self._closed = False
        self._zoo: list[Worker] = []
        self._build()

    # ---- replicas -------------------------------------------------------------------
    def _build(self) -> None:
        config = self.model.configuration.replace(training_workspace_mode=self.workspace_mode.value)
        for i, dev in enumerate(self.devices):
            replica = Network.from_config(config, device=dev)
            replica.copy_state_from(self.model)
            self._zoo.append(Worker(i, replica, dev, self))
        self._published = self._fingerprint()

    @property
    def replicas(self) -> list[Network]:
        return [w.replica for w in self._zoo]

    def describe(self) -> str:
        kinds = {("logical" if getattr(d, "logical", False) else "physical") for d in self.devices}
        if any(getattr(d, "simulated", False) for d in self.devices):
            kinds = {"simulated on the host"}
        return (
            f"ParallelWrapper: {self.workers} worker(s) on "
            + ", ".join(d.name for d in self.devices)
            + (f" ({'/'.join(sorted(kinds))})")
        )

    def _fingerprint(self) -> tuple:
        """What the user's model held when this wrapper last wrote it (or built from it)."""
        m = self.model
        return (m.iteration, m.epoch, m.params().numpy().tobytes())

    def _begin(self) -> None:
        """Start of a fit: see every change the user made to the model since the last one, its
        training hyper-parameters included (the workers are idle between fits)."""
        if self._closed:
            raise RuntimeError(
                "ParallelWrapper was shut down (by shutdown(), a `with` block, or a worker's failure); make a new one"
            )
        self._hand_over_hyper_parameters()
        if self._fingerprint() != self._published:
            for w in self._zoo:
                w.replica.copy_state_from(self.model)
            self.iteration, self.epoch = self.model.iteration, self.model.epoch
            self._dirty.clear()
            self._published = self._fingerprint()

    def _hand_over_hyper_parameters(self) -> None:
        """Give every replica the model's current updater (type and every hyper-parameter: lr,
        momentum, Adam's betas and epsilon), L2 and loss, as fresh objects from their configs (a
        replica never shares a live object with the model). The updater state stays: each replica
        goes on with its own, as `net.fit` goes on with the model's."""
        model = self.model
        updater, loss = model.updater.config(), model.loss.config()
        for w in self._zoo:
            r = w.replica
            if r.updater.config() != updater:
                r.updater = updater_from_config(updater)
            if r.loss.config() != loss:
                r.loss = loss_from_config(loss)
            r.l2 = model.l2
            for ours, theirs in zip(_layers(model.body.layers), _layers(r.body.layers), strict=True):
                for name, value in hyper_values(ours).items():  # BatchNorm's eps, Dropout's retain ...
                    if getattr(theirs, name) != value:
                        setattr(theirs, name, value)

    # ---- training -------------------------------------------------------------------
    def fit(self, data: Iterable[DataSet], epochs: int = 1) -> ParallelWrapper:
        """Train `epochs` epochs on the wrapper's workers; the user's model ends with the average."""
        epochs = whole("fit", "epochs", epochs)  # before the session, which shuts the wrapper down on any error
        self.make_loop(listeners=self.listeners)
        with self.session(data) as source:
            self.loop.run(source, epochs)
        self.sync()
        return self

    def make_loop(self, **hooks: Any) -> TrainingLoop:
        """Start a run (the model's changes since the last one reach the replicas) and build its
        loop (kit.nn.loop's Trainable: `hooks` are the loop's listeners, iteration_conditions,
        epoch_end): one mini-batch per worker a step, counted on the wrapper; `stop_fit()` on the
        model or any replica stops it. Run it inside `session(data)`."""
        hooks = loop_hooks(self, hooks)
        self._begin()
        self.loop = TrainingLoop(
            self.model, self.train_step, counters=self, batches_per_step=self.workers, **hooks
        ).attach(self.model, *self.replicas)
        return self.loop

    @property
    def closed(self) -> bool:
        """True once shut down (by shutdown(), a `with` block, or a worker's failure)."""
        return self._closed

    @contextlib.contextmanager
    def session(self, data: Iterable[DataSet]) -> Iterator[Iterable[DataSet]]:
        """The conditions a run of the loop needs: BLAS threads shared out among CPU workers, the
        data behind a prefetch queue when it allows it; any failure shuts the wrapper down."""
        cpu = all(d.kind == "cpu" for d in self.devices) and self.workers > 1
        wrapped = None
        if self.prefetch_buffer > 0 and getattr(data, "async_supported", False):
            wrapped = data = AsyncPrefetchIterator(data, prefetch=self.prefetch_buffer, device=self.model.device)
        try:
            with blas_threads(cores_per_worker(self.workers)) if cpu else contextlib.nullcontext():
                yield data
        except BaseException:
            self.shutdown()
            raise
        finally:
            if wrapped is not None:
                wrapped.shutdown()

    def train_step(self, batches: Sequence[DataSet]) -> list[StepResult]:
        """The loop's step: one round, one batch per worker (fewer in an epoch's last round)."""
        t0 = time.perf_counter()
        batches = [ds.detach() if ds.features.is_attached else ds for ds in batches]
        zoo = self._zoo[: len(batches)]
        iteration = self.iteration + 1
        if self.training_mode is TrainingMode.AVERAGING:
            for w, ds in zip(zoo, batches):
                w.submit(lambda worker, ds=ds: worker.fit(ds))
            scores = self._collect(zoo)
            self._dirty.update(w.index for w in zoo)
            if iteration % self.averaging_frequency == 0 and self.workers > 1:
                self._average()
        else:
            for w, ds in zip(zoo, batches):
                w.submit(lambda worker, ds=ds: worker.encode(ds, self.iteration, self.epoch))
            results = self._collect(zoo)
            scores = [r[0] for r in results]
            messages = [(r[1], w.device) for r, w in zip(results, zoo)]  # each made on its worker's device
            self.encoding_stats.append({"iteration": self.iteration, "workers": [r[2] for r in results]})
            for w in self._zoo:  # every replica, including idle ones, applies the same sum
                w.submit(lambda worker: worker.apply(messages))
            self._collect(self._zoo)
            self._average_frozen(zoo)
        self.last_score = float(np.mean(scores))
        self.round_seconds.append(time.perf_counter() - t0)
        skipped = [w.replica.last_step_skipped for w in zoo]
        # a round every worker refused (a non-finite loss, nothing updated) is no iteration (kit.nn.loop)
        refused = all(not math.isfinite(s) and not k for s, k in zip(scores, skipped))
        for w in self._zoo:  # idle workers of a short last round keep the same step count
            w.replica.iteration = self.iteration if refused else iteration
        return [
            StepResult(score, ds.num_examples, w.replica, w.index, skip)
            for w, ds, score, skip in zip(zoo, batches, scores, skipped)
        ]

    def _collect(self, zoo: list[Worker]) -> list[Any]:
        # the first failure stops everything; the others finish their task first
        return [w.result() for w in zoo]

    def _average_frozen(self, zoo: list[Worker]) -> None:
        """SHARED_GRADIENTS: BatchNorm's running statistics (no gradient, never encoded) as the mean
        of the workers' that trained this round, in every replica: one network's statistics again."""
        slices = self.model.frozen_slices
        if not slices:
            return
        with scope_out_of_workspaces():
            for sl in slices:
                values = [w.replica.flat_master.data[sl] for w in zoo]
                host = [v.get() if backend.is_cupy_array(v) else v for v in values]  # (C,): small
                mean = np.mean(np.asarray(host, dtype=np.float64), axis=0)
                for w in self._zoo:
                    w.replica.flat_master.data[sl] = w.replica.device.xp.asarray(mean)
        for w in self._zoo:
            w.replica.cast_master()

    def _average(self) -> None:
        """Mean of the replicas that trained (parameters, and updater state when asked), computed
        on the first one's device and written into every replica, through the transfer path."""
        t0 = time.perf_counter()
        trained = [self._zoo[i].replica for i in sorted(self._dirty)] or self.replicas
        self._dirty.clear()
        # mixed precision: the master weights are averaged and the float16 copies written from them
        weights = ["master"] if self.model.mixed else ["params"]
        keys = weights + ([f"updater_{k}" for k in self.model.updater_state] if self.average_updaters else [])
        with scope_out_of_workspaces():
            for key in keys:
                sources = [r.state_arrays()[key] for r in trained]
                home, dtype = sources[0].device, sources[0].dtype
                wide = np.promote_types(dtype, np.float32)  # float16's sum of two 40,000s is inf; the mean fits
                mean = sources[0].dup() if wide == dtype else sources[0].astype(wide)
                for arr in sources[1:]:  # a fixed order: the same sum whatever the thread timing
                    mean += arr.to(home)
                mean /= len(sources)
                for r in self.replicas:
                    r.state_arrays()[key].assign(mean)
        for r in self.replicas:
            r.cast_master()
        if self.model.loss_scaler is not None:  # one scaler state again: the most careful scale
            merged = LossScaler.merged([r.loss_scaler for r in trained])
            in_a_row = max(r.loss_scaler.skipped_in_a_row for r in trained)  # a fixed scale that never steps
            for r in self.replicas:  # still gives up (the file format keeps three numbers; this is not one)
                r.loss_scaler.load_state(merged)
                r.loss_scaler.skipped_in_a_row = in_a_row
        self.averagings += 1
        self.averaging_seconds += time.perf_counter() - t0
        if self.report_score_after_averaging:
            log.info("Averaged score: %s", self.last_score)

    def sync(self) -> None:
        """End on the average (AVERAGING) and leave the state in the user's model; refused when the
        model changed since this wrapper last wrote it (another fit, another wrapper): that would
        be overwritten."""
        if self._closed:
            raise RuntimeError(
                "ParallelWrapper.sync(): it was shut down (by shutdown(), a `with` block, or a worker's failure); "
                "make a new one"
            )
        if self._fingerprint() != self._published:
            raise RuntimeError(
                f"ParallelWrapper.sync(): the model changed since this wrapper last wrote it (it is at iteration "
                f"{self.model.iteration}); syncing would overwrite that. fit() again to train on from it, or "
                "make a new wrapper"
            )
        if self.training_mode is TrainingMode.AVERAGING and self._dirty and self.workers > 1:
            self._average()
        with self.model.lock:  # a save() from another thread sees the state before or after, whole
            self.model.copy_state_from(self.replicas[0])
            self.model.iteration, self.model.epoch = self.iteration, self.epoch
            self.model.last_score = self.last_score
        self._published = self._fingerprint()

    def stop_fit(self) -> None:
        loop = self.loop
        if loop is not None:
            loop.stop()

    def run_on_worker(self, index: int, fn: Task) -> Any:
        """Run fn(worker) on worker `index`'s thread and return its result (tests, inspection)."""
        self._zoo[index].submit(fn)
        return self._zoo[index].result()

    def shutdown(self) -> None:
        """Stop every worker (each after its current task) and join it. From another thread
        during fit(), that fit() raises RuntimeError saying so (see the module's notes)."""
        self._closed = True
        for w in self._zoo:
            w.stopping = True  # every worker at once: a fit waiting on any of them learns why
        for w in self._zoo:
            w.stop()

    def threads_alive(self) -> int:
        return sum(w.thread.is_alive() for w in self._zoo)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool | np.bool_):  # "False" is a true string
        raise TypeError(f"ParallelWrapper({name}={value!r}): True or False")
    return bool(value)


def _choice(name: str, value: object, kind: type[enum.Enum]) -> Any:
    try:
        return kind(value.value if isinstance(value, kind) else value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"ParallelWrapper({name}={value!r}): one of {choices}") from None


def _layers(layers: Sequence[Layer]) -> Iterator[Layer]:
    """Every layer, sublayers included, in one order."""
    for layer in layers:
        yield layer
        yield from _layers(layer.sublayers())
