"""What runs on Spark executors: rebuild a network from its JSON config, train a round (evaluation:
kit.spark.executor_eval).

The driver builds a task, `round_task(RoundSpec(...), broadcast)`, and Spark runs it on every
partition (`rdd.mapPartitionsWithIndex(fn)`). A task is a plain function of (partition index,
iterator of elements), so it also runs without Spark. An executor builds each configuration's
network once and reuses it:

    >>> from kit.nn import mlp
    >>> from kit.spark.executor import network_for
    >>> config_json = mlp(4, hidden=(3,), n_out=2).configuration.to_json()   # what crosses the wire
    >>> network_for(config_json, None) is network_for(config_json, None)
    True

The elements (tag, check, cut into mini-batches once, count, store by round) are kit.spark.elements';
the typed values on the wire kit.spark.wire's; both re-exported here. Every element is tagged
(RDD partition, position) before kit shuffles the data, so an error names the partition and element
the user gave. Only plain data crosses the wire (JSON configuration, flat float arrays, NumPy data,
a `RoundResult` back): no kit model object is pickled. Every failure is re-raised as
`PartitionError`, whose message starts with `[kit.spark] partition N`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from kit.core import memory
from kit.data.dataset import DataSet
from kit.nn.config import NetworkConfig
from kit.nn.network import Network
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    encoded_count,
    floor_to_update,
    threshold_decode,
    threshold_encode,
)
from kit.parallel.wrapper import TrainingMode
from kit.spark import worker_store
from kit.spark.aggregation import array_bytes
from kit.spark.elements import (
    BadElementError,
    PartitionError,
    batches_of,
    check_element,
    count_examples,
    count_task,
    cut_task,
    export_records,
    export_task,
    join_pieces,
    partition_error,
    read_npz,
    round_records,
    row_to_pair,
    tag_elements,
)
from kit.spark.scheduling import task_device, this_task_device
from kit.spark.wire import RoundResult, RoundSource, RoundSpec, SharedWorkerState, WorkerStats, task_attempt
from kit.state import STATE

__all__ = [
    "BadElementError",
    "PartitionError",
    "RoundResult",
    "RoundSource",
    "RoundSpec",
    "SharedWorkerState",
    "WorkerStats",
    "batches_of",
    "check_element",
    "count_examples",
    "count_task",
    "cut_task",
    "encode_step",
    "export_records",
    "export_task",
    "join_pieces",
    "round_records",
    "round_task",
    "row_to_pair",
    "scaler_state",
    "state_keys",
    "tag_elements",
    "task_attempt",
    "task_device",
    "weights",
]


def network_for(config_json: str, workspace_mode: str | None, device: Any = None) -> Network:
    """This process's network for a configuration (built once per device, reused by later tasks)."""
    key = f"{config_json}|{workspace_mode}|{device}"
    nets = STATE.executor_nets  # this process's (kit.state): an executor is a process of its own
    net = nets.get(key)
    if net is None:
        cfg = NetworkConfig.from_json(config_json)
        if workspace_mode:
            cfg = cfg.replace(training_workspace_mode=workspace_mode)
        if len(nets) >= 2:
            nets.clear()
        net = nets[key] = Network.from_config(cfg, device=device)
    return net


def weights(net: Network) -> Any:
    """The weights the updater moves: the float32 master weights of a mixed-precision network
    (kit.nn.mixed), the parameters otherwise. What crosses the wire as "params": averaging or
    summing float16 copies would lose what the master weights are there to keep."""
    return net.flat_master if net.mixed else net.flat_params


def state_keys(net: Network) -> tuple[str, ...]:
    """The state arrays a round sends, in order: "params" (the master weights when mixed; the
    float16 copy is written from them) and the updater's state."""
    return tuple(k for k in net.state_arrays() if k != "master")


def load_state(net: Network, flat: np.ndarray, keys: Iterable[str], sizes: Iterable[int]) -> None:
    arrays = net.state_arrays()
    offset = 0
    for key, size in zip(keys, sizes):
        part = flat[offset : offset + size]
        if key == "params":
            net.set_params(part)  # a mixed network keeps every float32 digit in its master weights
        else:
            arrays[key].assign(part)
        offset += size


def pack_state(net: Network, keys: Iterable[str]) -> np.ndarray:
    arrays = {**net.state_arrays(), "params": weights(net)}
    return np.concatenate([arrays[k].numpy().reshape(-1) for k in keys])  # the widest of their dtypes


def scaler_state(net: Network) -> tuple[float, ...] | None:
    """The loss scaler's [scale, skipped steps, clean steps] as plain floats, or None."""
    return None if net.loss_scaler is None else tuple(float(v) for v in net.loss_scaler.state())


# ---- training --------------------------------------------------------------------------


def round_task(spec: RoundSpec, state_bc: Any, workers_bc: Any = None) -> Any:
    """The function Spark runs on each partition for one round: one record (spec.source says
    which kind) or none (a worker with no examples this round). `workers_bc`
    (SharedTrainingMaster): each worker's own state, as the driver holds it."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[RoundResult]:
        try:
            yield _train_round(spec, state_bc, partition, it, workers_bc)
        except PartitionError:
            raise
        except Exception as exc:
            raise partition_error(partition, f"round {spec.round}", exc) from exc

    return run


def round_batches(spec: RoundSpec, partition: int, it: Iterator[Any]) -> tuple[int, list[DataSet]]:
    """The worker and its mini-batches for the round, read from the record where spec.source says
    they are (cut and checked once, when the data were prepared: kit.spark.elements)."""
    records = list(it)  # read to the end, or PySpark starts a new Python worker per task
    if not records:  # the round's RDD holds one partition per worker, in worker order
        return partition, []
    ((key, payload),) = records
    if spec.source is RoundSource.FILE:
        worker, pairs = key, read_npz(payload)
    else:
        worker = key // spec.stored_rounds
        pairs = payload if spec.source is RoundSource.CACHED else read_npz(payload)
    return worker, [DataSet(x, y, num_classes=spec.num_classes) for x, y in pairs]


def _train_round(spec: RoundSpec, state_bc: Any, partition: int, it: Iterator[Any], workers_bc: Any) -> RoundResult:
    """One worker's round: its mini-batches, the network at the round's state, the steps, and what goes back."""
    t_start = time.time()
    marks = [time.perf_counter()]  # the ends of loading, getting the model, fitting and exporting follow
    worker, batches = round_batches(spec, partition, it)
    marks.append(time.perf_counter())
    stats = WorkerStats(worker, spec.round, os.getpid(), attempt=task_attempt())
    result = RoundResult(worker, spec.round, stats)
    if not batches:
        return result
    gc0 = _set_gc(spec)
    net = network_for(spec.config_json, spec.workspace_mode, this_task_device(spec.gpus_per_task))
    everyone, received = _start_round(spec, net, state_bc, workers_bc)
    marks.append(time.perf_counter())
    allocs0 = memory.heap_allocations()
    _fit_steps(spec, net, batches, result, _own_state(spec, worker, everyone.get(worker), result.stats))
    result.sizes = [ds.num_examples for ds in batches]
    result.iterations = net.iteration - spec.base_iteration
    marks.append(time.perf_counter())
    if spec.mode is TrainingMode.AVERAGING:
        _pack_result(spec, net, result)
    marks.append(time.perf_counter())
    stats.start, stats.end = t_start, time.time()
    stats.load_ms, stats.get_model_ms, stats.fit_ms, stats.export_ms = _phase_ms(marks)
    stats.examples, stats.batches = sum(result.sizes), len(batches)
    _work_counts(stats, net, allocs0, gc0)
    stats.received_bytes = received
    stats.sent_bytes = array_bytes([result.state, result.messages, result.worker_state])
    return result


def _set_gc(spec: RoundSpec) -> dict[str, Any]:
    """Apply the round's garbage-collection settings; returns the collections counted so far."""
    memory.toggle_periodic_gc(spec.periodic_gc)
    memory.set_auto_gc_window(spec.gc_window_ms)
    return memory.gc_stats()


def _start_round(
    spec: RoundSpec, net: Network, state_bc: Any, workers_bc: Any
) -> tuple[dict[int, SharedWorkerState], int]:
    """Set the executor's network to the round's broadcast state: weights (and updater state), loss scale,
    iteration. Returns every worker's own state (SharedTrainingMaster's) and the bytes received."""
    flat = state_bc.value
    everyone = workers_bc.value if workers_bc is not None else {}  # unpickled whole, every worker's
    load_state(net, flat, spec.keys, spec.sizes)
    if net.loss_scaler is not None and spec.scaler is not None:  # the executor's network is reused: set it each round
        net.loss_scaler.load_state(spec.scaler)
    if not spec.send_updater and spec.mode is TrainingMode.AVERAGING:  # DL4J's saveUpdater(false): a fresh updater
        for arr in net.updater_state.values():
            arr.assign(np.zeros(arr.shape, arr.dtype))
    net.iteration = spec.base_iteration
    return everyone, array_bytes(flat) + array_bytes(everyone)


def _own_state(
    spec: RoundSpec, worker: int, sent: SharedWorkerState | None, stats: WorkerStats
) -> SharedWorkerState | None:
    """SharedTrainingMaster: the worker's own state after the rounds it has done, from this
    executor's store (kit.spark.worker_store) or from the driver's copy; None on its first round.
    `stats.state_from` says which, and a driver's copy older than the round expects is said too."""
    if spec.mode is not TrainingMode.SHARED_GRADIENTS:
        return None
    expected = dict(spec.expected).get(worker)
    kept = None
    if spec.store is not None and expected is not None:
        kept = worker_store.load(worker_store.executor_directory(), spec.store, worker, expected)
    if kept is not None:
        stats.state_from = f"executor (round {kept.rounds} of this worker)"
        return kept
    if sent is None:
        stats.state_from = "new"
    elif expected is not None and sent.rounds != expected:
        stats.state_from = (
            f"driver (round {sent.rounds} of this worker; this executor held no copy of round {expected})"
        )
    else:
        stats.state_from = f"driver (round {sent.rounds} of this worker)"
    return sent


def _fit_steps(
    spec: RoundSpec, net: Network, batches: list[DataSet], result: RoundResult, own: SharedWorkerState | None
) -> None:
    """The round's steps, their scores (and whether the loss scaler skipped each) into the result:
    plain fit_batch calls, or SharedTrainingMaster's threshold-encoded ones."""
    if spec.mode is TrainingMode.SHARED_GRADIENTS:
        _shared_steps(spec, net, batches, result, own)
        return
    for ds in batches:
        result.scores.append(float(net.fit_batch(ds)))
        result.skipped.append(bool(net.last_step_skipped))


def _pack_result(spec: RoundSpec, net: Network, result: RoundResult) -> None:
    """Parameter averaging: the worker's state (the updater's too where it is sent), if it is finite, its scale."""
    keys = spec.keys if spec.send_updater else spec.keys[:1]
    result.state = pack_state(net, keys)
    result.finite = bool(np.all(np.isfinite(result.state)))  # the driver gets sums only
    result.scaler = scaler_state(net)


def _phase_ms(marks: list[float]) -> tuple[float, float, float, float]:
    """Milliseconds between the round's marks: loading, getting the model, fitting, exporting."""
    load, model, fit, export = ((end - start) * 1e3 for start, end in itertools.pairwise(marks))
    return load, model, fit, export


def _work_counts(stats: WorkerStats, net: Network, allocs0: int, gc0: dict[str, Any]) -> None:
    """Since the round began: kit's heap allocations and garbage collections; the workspaces' peak."""
    gc1 = memory.gc_stats()
    stats.heap_allocations = memory.heap_allocations() - allocs0
    stats.peak_workspace_bytes = net.train_mgr.peak_bytes()
    stats.gc_calls = gc1["calls"] - gc0["calls"]
    stats.gc_ms = (gc1["seconds"] - gc0["seconds"]) * 1e3


def _shared_steps(
    spec: RoundSpec, net: Network, batches: list[DataSet], result: RoundResult, own: SharedWorkerState | None
) -> None:
    """SharedTrainingMaster: each step's update (times `update_scale`) goes into the residual, is
    threshold-encoded and sent. With DL4J's sum (scale 1) the worker moves by what it sent; with
    averaged updates it keeps its whole step, as a parameter-averaging worker does, so the round
    moves the model by the workers' mean update as averaging would, less the residuals (moving by
    its sent 1/workers share alone, it took its next gradients on a path a step behind and learned
    worse). The worker's own state (residual, updater state, threshold) comes from the file its
    executor kept (kit.spark.worker_store) or else the driver's copy: it lasts the whole training,
    across rounds, epochs and fits, and a retried task starts from exactly the state the failed one had."""
    state = _worker_state(net, own)
    algo = AdaptiveThresholdAlgorithm(**spec.threshold.as_kwargs())
    messages, counts = [], []
    for ds in batches:
        old = weights(net).numpy().copy()  # mixed precision: the float32 master weights
        result.scores.append(float(net.fit_batch(ds)))
        result.skipped.append(bool(net.last_step_skipped))
        update = (old - weights(net).numpy()) * spec.update_scale  # 0 for a step the loss scaler skipped
        message, count = encode_step(state, update, algo, spec.threshold_update_multiple, net.iteration)
        if message is not None:
            messages.append(message)
        if spec.update_scale == 1.0:  # DL4J's sum: the worker moves by what it sent
            applied = np.zeros_like(old)
            if message is not None:
                threshold_decode(message, applied)
            net.set_params(old - applied)
        counts.append(count)
    state.updater = {f"updater_{k}": arr.numpy().copy() for k, arr in net.updater_state.items()}
    state.scaler = scaler_state(net)
    stats = result.stats
    stats.tau, stats.encoded = float(state.tau), int(sum(counts))
    stats.sparsity = float(np.mean(counts) / net.num_params)
    state.rounds += 1
    if spec.store is not None:
        worker_store.save(worker_store.executor_directory(), spec.store, result.worker, state)
    result.messages = messages
    result.worker_state = state if spec.sync_state or spec.store is None else None


def encode_step(
    state: SharedWorkerState, update: np.ndarray, algo: AdaptiveThresholdAlgorithm, multiple: float | None, it: int
) -> tuple[np.ndarray | None, int]:
    """One step of a SharedTrainingMaster worker: the update into the residual, the step's threshold
    (DL4J's adaptive one, at least `multiple` times the update's largest entry: kit.parallel.threshold's
    floor_to_update), the residual encoded; the message and how many entries it moves."""
    state.residual += update
    state.tau = algo.calculate_threshold(it, 0, state.tau, state.last_dense, state.last_sparsity)
    state.tau = floor_to_update(state.tau, update, multiple)
    message = threshold_encode(state.residual, state.tau)
    count = encoded_count(message)
    state.last_dense = message is not None and int(message[3]) == 1
    state.last_sparsity = count / state.residual.size
    return message, count


def _worker_state(net: Network, own: SharedWorkerState | None) -> SharedWorkerState:
    """The worker's state from the driver, its updater state and loss scale set on the network; a new
    one on its first round (the broadcast updater state, sent while a worker has none; no residual)."""
    if own is None:
        return SharedWorkerState(np.zeros(net.num_params, np.result_type(net.dtype, np.float32)))  # float16: float32
    arrays = net.state_arrays()
    for key, value in own.updater.items():
        arrays[key].assign(value)
    if net.loss_scaler is not None and own.scaler is not None:  # each worker keeps its own scale
        net.loss_scaler.load_state(own.scaler)
    return dataclasses.replace(own, residual=own.residual.copy())
