"""SparkNetwork: train and evaluate a kit Network on Apache Spark (DL4J's SparkDl4jMultiLayer).

Usage: kit.spark's example (Spark's JVM takes seconds to start, so not a doctest).

The data: an RDD of `(features, labels)` NumPy pairs with a leading examples axis (labels as class
indices or one-hot rows), any number of examples an element: a mini-batch is always
`batch_size_per_worker` examples, as DL4J splits and merges DataSets (`rdd_data_set_num_examples`
is kept for DL4J's API). A DataFrame's features_col and label_col are read through Arrow
(kit.spark.arrow_data); `to_rdd` makes an RDD from a kit DataSet.

Training drives kit's TrainingLoop on the driver: one loop step is one round of the master (one
Spark job); listeners see one `iteration_done` per worker per round (with `worker=`), as with
ParallelWrapper. With one worker, frequency 1 and an updater state that is kept (`save_updater`),
fit() equals Network.fit on the same mini-batches bit for bit, mixed precision included.
`network.iteration` counts each worker's updater steps (Adam's bias correction), and the next fit
goes on from the network's counters. In mixed precision (kit.nn.mixed) the float32 master weights
cross the wire; averaging keeps the most careful worker's loss scaler.

A failing task stops fit() with SparkTrainingError naming the partition, and the job group is
cancelled. A new driver's `fit(rdd, epochs=N, resume=True)` goes on from the last checkpoint bit for
bit (kit.spark.checkpoint). The parts, each re-exported here: kit.spark.spark_context, rdd_data,
spark_errors, spark_evaluation and scoring; this module holds the jobs: sessions, rounds, checkpoints.
"""

from __future__ import annotations

import contextlib
import math
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from kit.core.arguments import whole
from kit.nn.loop import StepResult, TrainingLoop, loop_hooks
from kit.nn.network import Network
from kit.spark import checkpoint, gang
from kit.spark.masters import TrainingMaster
from kit.spark.rdd_data import as_rdd, to_rdd
from kit.spark.scoring import Scoring
from kit.spark.spark_context import SparkUnavailableError, local_spark_context, spark_missing
from kit.spark.spark_errors import SparkTrainingError, is_spark_error, spark_error
from kit.spark.spark_evaluation import DEFAULT_EVAL_BATCH_SIZE as DEFAULT_EVAL_BATCH_SIZE  # as before
from kit.spark.spark_evaluation import Evaluating, merge_evaluations
from kit.spark.stats import SparkTrainingStats

__all__ = [
    "SparkNetwork",
    "SparkTrainingError",
    "SparkUnavailableError",
    "local_spark_context",
    "merge_evaluations",
    "spark_missing",
    "to_rdd",
]


class _Rounds:
    """The rounds of each epoch, the first epoch from `first` on (a resumed fit's); `epochs_left`
    epochs of them are what the fit asked for."""

    def __init__(self, rounds: int, first: int, epochs_left: int) -> None:
        self.rounds, self.first, self.epochs_left = rounds, first, epochs_left

    def __iter__(self) -> Iterator[int]:
        first, self.first = self.first, 0
        return iter(range(first, self.rounds))


class _FitRun:
    """What one fit's rounds share: the prepared data, the checkpoint store and position, the
    rounds of the newest checkpoint, and the stats collected."""

    def __init__(self, prepared: Any, store: Any, start: dict[str, Any], stats: SparkTrainingStats) -> None:
        self.prepared, self.store, self.stats = prepared, store, stats
        self.position = dict(start)
        self.written = 0


def _check_fit_args(epochs: Any, resume: Any) -> int:
    """Epochs as a whole number >= 1 (NumPy's too); refuse a resume that is not a bool."""
    epochs = whole("fit", "epochs", epochs)
    if not isinstance(resume, (bool, np.bool_)):
        raise ValueError(f"fit(resume={resume!r}): True (go on from the latest checkpoint) or False")
    return epochs


class SparkNetwork(Evaluating, Scoring):
    """A Network trained by a training master on a SparkContext (DL4J's SparkDl4jMultiLayer)."""

    def __init__(
        self,
        spark_context: Any,
        network: Network,
        training_master: TrainingMaster,
        features_col: str | None = None,
        label_col: str | None = None,
    ) -> None:
        """`features_col` and `label_col` (MLlib's featuresCol and labelCol): the columns fit() and
        evaluate() read from a DataFrame; by default "features" and "label" (what
        `spark.read.format("libsvm")` gives), and the first two columns only where neither name is
        there (said in a warning). A missing or wrong column is refused at the call, naming the
        DataFrame's columns."""
        for param, value in (("features_col", features_col), ("label_col", label_col)):
            if value is not None and not (isinstance(value, str) and value):
                raise TypeError(f"SparkNetwork({param}={value!r}): a column name (a str), or None")
        self.features_col, self.label_col = features_col, label_col
        if not isinstance(network, Network):
            raise TypeError(f"SparkNetwork needs a kit.nn.Network, got {type(network).__name__}")
        if not isinstance(training_master, TrainingMaster):
            raise TypeError(
                "SparkNetwork needs a ParameterAveragingTrainingMaster or SharedTrainingMaster, got "
                f"{type(training_master).__name__}"
            )
        self.sc = spark_context
        self.network = network
        self.training_master = training_master
        self.iteration = network.iteration  # loop steps (rounds): what listeners number
        self.epoch = network.epoch
        self.worker_iteration = network.iteration  # updater steps per worker
        # SharedTrainingMaster: each worker's residual, updater state and threshold, kept here
        # between rounds, epochs and fits (worker -> state)
        self.shared_worker_states: dict[int, dict[str, Any]] = {}
        self.last_score = float("nan")
        self.loop: TrainingLoop | None = None
        self._stats: SparkTrainingStats | None = None
        self._run: _FitRun | None = None  # the session's rounds, while one is open
        self._session_claim = threading.Lock()  # held for a whole session: a second fit is refused at once

    @property
    def config_json(self) -> str:
        return self.network.configuration.to_json()

    # ---- jobs ----------------------------------------------------------------------------
    def run_job(self, rdd: Any, what: str) -> list[Any]:
        """Collect `rdd` in its own job group; a failure cancels the group and names the partition."""
        with self.watched(what):
            return rdd.collect()

    @contextlib.contextmanager
    def watched(self, what: str, timeout: float | None = None) -> Iterator[None]:
        """Spark jobs started inside run in one job group, bounded by the master's round_timeout:
        past it the group is cancelled and SparkTrainingError says how many executors are alive.
        Any failure cancels the group (no job is left running) and is said in words."""
        group = f"kit-{uuid.uuid4().hex[:12]}"
        timeout = self.training_master.round_timeout if timeout is None else timeout
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.sc.cancelJobGroup(group)

        self.sc.setJobGroup(group, f"kit.spark {what}", interruptOnCancel=True)
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception as exc:
            self.sc.cancelJobGroup(group)
            if expired.is_set():
                raise SparkTrainingError(
                    f"Spark {what} made no progress within round_timeout={timeout:g} s and was cancelled; "
                    f"{self.executors_alive()} executor(s) alive. The network keeps its state from the last complete "
                    "round; check the cluster, or raise the master's round_timeout for longer rounds"
                ) from exc
            if isinstance(exc, SparkTrainingError) or not is_spark_error(exc):
                raise
            raise spark_error(exc, what) from exc
        finally:
            timer.cancel()
            self.sc.setLocalProperty("spark.jobGroup.id", None)

    def executors_alive(self) -> int:
        """Executors registered with the driver now (the driver itself not counted in cluster mode)."""
        infos = self.sc.statusTracker().getExecutorInfos()
        master = self.sc.master or ""
        return len(infos) if master.startswith("local") else max(0, len(infos) - 1)

    # ---- training ------------------------------------------------------------------------
    def fit(self, data: Any, epochs: int = 1, listeners: Iterable[Any] = (), resume: bool = False) -> Network:
        """Train on an RDD of (features, labels) pairs or a DataFrame; returns the network.

        With the master's `checkpoint_every`, the driver writes a checkpoint every that many rounds
        and at the end (kit.spark.checkpoint). `resume=True` goes on from the latest one in its
        `checkpoint_directory`, bit for bit as if the fit had not stopped: give the interrupted
        call again (`epochs` counts from the epoch that fit began at), with a network of the same
        configuration (its state is replaced by the checkpoint's), and the same data."""
        kept = self.training_master.prepared  # a DataFrame's RDD too: its prepared rounds are found again
        listeners, rdd = list(listeners), as_rdd(data, self.features_col, self.label_col, kept)
        epochs = _check_fit_args(epochs, resume)
        why_rounds = gang.use_gang(self, rdd, listeners)  # decided at the call, before the data are prepared
        with self.session(rdd, epochs, resume, gang=why_rounds is None) as rounds:
            gang.record_execution(self._run.stats, why_rounds)
            if rounds.epochs_left > 0 and why_rounds is None:
                gang.run_gang(self, self._run, rounds)  # one barrier stage for the whole fit (kit.spark.gang)
            elif rounds.epochs_left > 0:
                self.make_loop(listeners=listeners).run(rounds, rounds.epochs_left)
        return self.network

    def make_loop(self, **hooks: Any) -> TrainingLoop:
        """The training loop over Spark rounds (kit.nn.loop's Trainable: `hooks` are the loop's
        listeners, iteration_conditions, epoch_end): one round of the master a step, counted on this
        SparkNetwork; `stop_fit()` stops it. Run it over the rounds a `session(data)` gives."""
        loop = TrainingLoop(self.network, self._train_round, counters=self, **loop_hooks(self, hooks))
        self.loop = loop.attach(self.network)  # a listener's model.stop_fit() stops it too
        return self.loop

    @contextlib.contextmanager
    def session(self, data: Any, epochs: int = 1, resume: bool = False, gang: bool = False) -> Iterator[_Rounds]:
        """One fit's data, prepared for the master's rounds (and restored from the latest checkpoint
        with `resume=True`): yields the rounds to run a loop over, `epochs_left` epochs of them
        (`gang=True`: prepared for one barrier stage, kit.spark.gang, instead of a loop). On
        leaving, the final checkpoint is written (after a run that did not fail), the prepared data
        are released and the network holds the counters with its state."""
        if not self._session_claim.acquire(blocking=False):  # atomic: two threads' fits cannot both pass
            raise RuntimeError(
                "SparkNetwork: a session is open already (another fit, on this thread or another, is running); "
                "let it end before starting another, or give each thread its own SparkNetwork"
            )
        try:
            with self._claimed_session(data, epochs, resume, gang) as rounds:
                yield rounds
        finally:
            self._session_claim.release()

    @contextlib.contextmanager
    def _claimed_session(self, data: Any, epochs: int, resume: bool, gang: bool) -> Iterator[_Rounds]:
        """`session` once this SparkNetwork is claimed for it."""
        master = self.training_master
        epochs = _check_fit_args(epochs, resume)
        store = master.checkpoint_store()
        saved = self._checkpoint_to_resume(store) if resume else self._fresh_start(store)
        rdd = as_rdd(data, self.features_col, self.label_col, self.training_master.prepared)
        master.check_cluster(self.sc, rdd)
        with self.watched("data preparation"):  # Spark's own actions too (zipWithIndex counts partitions)
            prepared = master.prepare(self.sc, rdd, self.run_job, self.network.output_shape[0], gang)
        began = False  # the counters go back to the network only once rounds may have run
        try:
            if prepared.rounds == 0:
                raise ValueError("SparkNetwork.fit: the RDD holds no elements")
            start = self._start_position(saved, prepared, epochs)
            run = _FitRun(prepared, store, start, SparkTrainingStats(type(master).__name__, dict(prepared.setup)))
            run.written = self.iteration
            self._run, began = run, True
            yield _Rounds(prepared.rounds, start["round"], start["fit_start_epoch"] + epochs - start["epoch"])
            if master.checkpoint_every and run.written != self.iteration:
                checkpoint.write(store, self, self.iteration, prepared.fingerprint, run.position)
            self._stats = run.stats if master.collect_training_stats else None
        finally:
            self._run = None
            master.release(prepared)
            if began:
                with self.network.lock:  # counters with the state, as save() reads them
                    self.network.iteration, self.network.epoch = self.worker_iteration, self.epoch
                    self.network.last_score = self.last_score

    def _checkpoint_to_resume(self, store: Any) -> Any:
        """resume=True: the latest checkpoint, read before the data are prepared (a wrong network fails fast)."""
        if store is None:
            raise ValueError(
                f"fit(resume=True): {type(self.training_master).__name__} has no checkpoint_directory to resume "
                "from; give the master the interrupted fit's checkpoint_directory"
            )
        return checkpoint.load_for(store, self)

    def _fresh_start(self, store: Any) -> None:
        """resume=False: take on the network's local progress; a checkpoint directory must not hold a later fit."""
        self._adopt_local_progress()
        if store is not None:
            checkpoint.check_fresh(store, self.iteration)

    def _start_position(self, saved: Any, prepared: Any, epochs: int) -> dict[str, Any]:
        """Where the fit's rounds begin: the network's epoch, or the checkpoint's position with its state restored."""
        if saved is None:
            return {"fit_start_epoch": self.epoch, "fit_epochs": epochs, "epoch": self.epoch, "round": 0}
        where, header, arrays = saved
        checkpoint.check_data(where, header, prepared.fingerprint)
        checkpoint.restore(self, header, arrays)
        return {**header["position"], "fit_epochs": epochs}

    def _train_round(self, group: list[int]) -> list[StepResult]:
        """The loop's step: round k of the session's prepared data, on the executors."""
        run, master = self._run, self.training_master
        if run is None:
            raise RuntimeError("SparkNetwork: a round runs inside `with spark_network.session(data) as rounds:`")
        (k,) = group
        prepared = run.prepared
        results, timing, worker_stats = master.run_round(self, prepared, k)
        if master.collect_training_stats:
            n = len([w for w in worker_stats if w.get("examples")])
            run.stats.rounds.append({"round": k, "epoch": self.epoch, "workers": n, **timing})
            run.stats.workers.extend({**w, "epoch": self.epoch} for w in worker_stats)
        if results:
            self.last_score = float(np.mean([r.score for r in results]))
        if all(math.isfinite(r.score) for r in results):  # a round not applied is not checkpointed
            last = k + 1 == prepared.rounds
            run.position.update(epoch=self.epoch + last, round=0 if last else k + 1)
            done = self.iteration + 1  # the loop counts this round after the step
            if master.checkpoint_every and done % master.checkpoint_every == 0:
                checkpoint.write(run.store, self, done, prepared.fingerprint, run.position)
                run.written = done
        return results

    def _adopt_local_progress(self) -> None:
        """Training (or a state copy) on the Network itself between two Spark fits moved its
        counters: go on from them, so the executors' base iteration (Adam's bias correction) and
        the listeners' numbering continue where the network is, as one Network.fit after another
        would."""
        moved = self.network.iteration - self.worker_iteration
        if moved:
            self.iteration = max(0, self.iteration + moved)
            self.worker_iteration = self.network.iteration
        self.epoch = self.network.epoch

    def stop_fit(self) -> None:
        if self.loop is not None:
            self.loop.stop()

    def get_training_stats(self) -> SparkTrainingStats | None:
        """The last fit's stats (None unless the master has collect_training_stats=True)."""
        return self._stats

    def get_score(self) -> float:
        return self.last_score
