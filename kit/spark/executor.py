"""What runs on Spark executors: rebuild a network from its JSON config, train a round (evaluation:
kit.spark.executor_eval).

How the driver uses it (kit.spark.masters, with a live Spark context, so not run as a doctest):

    fn = round_task(RoundSpec(...), broadcast)        # the driver builds a task ...
    rdd.mapPartitionsWithIndex(fn).collect()          # ... Spark runs it on every partition

A task is a plain function of (partition index, iterator of elements), so it also runs without
Spark. An executor builds each configuration's network once and reuses it for later tasks:

    >>> from kit.nn import mlp
    >>> from kit.spark.executor import network_for
    >>> config_json = mlp(4, hidden=(3,), n_out=2).configuration.to_json()   # what crosses the wire
    >>> network_for(config_json, None) is network_for(config_json, None)
    True

What the tasks do with the elements before training (tag, check, stack, count, store by round)
is in kit.spark.elements, re-exported here.

Every element is tagged (RDD partition, position in it) before kit shuffles the data, so an
error names the partition and element of the RDD the user gave, not the worker it was moved to.

Only plain data crosses the wire: the JSON configuration (a string), flat float arrays (the
parameters and updater state, through a Spark broadcast), NumPy data, and plain dictionaries
of numbers coming back. No kit object is ever pickled: each executor process builds its own
Network with `Network.from_config` (once per configuration, then reused) and sets the flat
buffer. Every failure is re-raised as `PartitionError`, whose message starts with
`[kit.spark] partition N`, so the driver can name the partition.
"""

from __future__ import annotations

import collections
import io
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.core import memory
from kit.data.dataset import DataSet
from kit.nn.config import NetworkConfig
from kit.nn.network import Network
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    encoded_count,
    threshold_decode,
    threshold_encode,
)
from kit.spark.aggregation import array_bytes
from kit.spark.elements import (
    BadElementError,
    PartitionError,
    batches_of,
    check_element,
    count_task,
    export_records,
    export_task,
    partition_error,
    round_records,
    row_to_pair,
    single_examples,
    tag_elements,
)
from kit.spark.scheduling import task_device, this_task_device
from kit.state import STATE

__all__ = [
    "BadElementError",
    "PartitionError",
    "RoundSpec",
    "batches_of",
    "check_element",
    "count_task",
    "export_records",
    "export_task",
    "round_records",
    "round_task",
    "row_to_pair",
    "scaler_state",
    "single_examples",
    "state_keys",
    "tag_elements",
    "task_device",
    "weights",
]


@dataclass(frozen=True)
class RoundSpec:
    """Everything a round's task needs, as plain values (pickled by Spark with the closure)."""

    config_json: str
    keys: tuple[str, ...]  # state arrays in the flat buffer, in order ("params", "updater_m", ...)
    sizes: tuple[int, ...]
    round: int
    elements_per_batch: int
    batches_per_round: int
    base_iteration: int  # updater steps done before this round (Adam's bias correction)
    num_classes: int
    send_updater: bool
    mode: str = "averaging"  # or "shared"
    workspace_mode: str | None = None
    periodic_gc: bool = True
    gc_window_ms: int = 5000
    threshold: dict[str, float] = field(default_factory=dict)
    scaler: tuple[float, ...] | None = None  # mixed precision: the driver's LossScaler.state()
    stored_rounds: int = 0  # EXPORT in Spark's storage: record key = worker * stored_rounds + round
    gpus_per_task: float | None = None  # the job's resource profile asked for GPUs: train on the one Spark gave


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
    """The function Spark runs on each partition for one round (DIRECT: the cached elements;
    EXPORT: one (worker, path) record per partition). `workers_bc` (SharedTrainingMaster): each
    worker's own state (residual, updater state, threshold) as the driver holds it."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[dict[str, Any]]:
        try:
            yield _train_round(spec, state_bc, partition, it, workers_bc)
        except PartitionError:
            raise
        except BaseException as exc:
            raise partition_error(partition, f"round {spec.round}", exc) from exc

    return run


def _round_elements(spec: RoundSpec, partition: int, it: Iterator[Any]) -> tuple[int, list[Any], str]:
    first = next(it, None)
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], list):
        key, elements = first  # DIRECT: this round's tagged examples, cached as one record
        collections.deque(it, maxlen=0)
        return key // spec.stored_rounds, elements, "direct"
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], bytes):
        key, blob = first  # EXPORT in Spark's storage: this round's mini-batches as .npz bytes
        collections.deque(it, maxlen=0)
        with np.load(io.BytesIO(blob), allow_pickle=False) as f:
            n = int(f["count"])
            return key // spec.stored_rounds, [(f[f"x{i}"], f[f"y{i}"]) for i in range(n)], "export"
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], str) and first[1].endswith(".npz"):
        worker, path = first  # EXPORT: this round's mini-batches were written to a file
        collections.deque(it, maxlen=0)  # drained: PySpark reuses a worker only after a whole input
        with np.load(path, allow_pickle=False) as f:
            n = int(f["count"])
            return worker, [(f[f"x{i}"], f[f"y{i}"]) for i in range(n)], "export"
    # an empty partition: a worker with no examples in this round (the round's RDD holds one
    # partition per worker, in worker order, so its index is the worker)
    collections.deque(it, maxlen=0)  # read to the end, or PySpark starts a new Python worker per task
    return partition, [], "direct"


def _train_round(
    spec: RoundSpec, state_bc: Any, partition: int, it: Iterator[Any], workers_bc: Any = None
) -> dict[str, Any]:
    """One worker's round: its mini-batches, the network at the round's state, the steps, and what goes back."""
    t_start = time.time()
    marks = [time.perf_counter()]  # the ends of loading, getting the model, fitting and exporting follow
    worker, elements, source = _round_elements(spec, partition, it)
    batches = _round_batches(spec, worker, elements, source)
    marks.append(time.perf_counter())
    gc0 = _set_gc(spec)
    result: dict[str, Any] = {"worker": worker, "round": spec.round, "state": None, "scores": [], "sizes": []}
    if not batches:
        result["stats"] = {"worker": worker, "round": spec.round, "pid": os.getpid(), "examples": 0}
        return result
    net = network_for(spec.config_json, spec.workspace_mode, this_task_device(spec.gpus_per_task))
    everyone, received = _start_round(spec, net, state_bc, workers_bc)
    marks.append(time.perf_counter())
    allocs0 = memory.heap_allocations()
    extra = _fit_steps(spec, net, batches, result, everyone.get(worker))
    result["sizes"] = [ds.num_examples for ds in batches]
    marks.append(time.perf_counter())
    if spec.mode != "shared":
        _pack_result(spec, net, result)
    marks.append(time.perf_counter())
    result["stats"] = {
        "worker": worker,
        "round": spec.round,
        "pid": os.getpid(),
        "start": t_start,
        "end": time.time(),
        **_phase_ms(marks),
        "examples": sum(result["sizes"]),
        "batches": len(batches),
        **_work_counts(net, allocs0, gc0),
        "received_bytes": received,
        "sent_bytes": array_bytes([result.get(k) for k in ("state", "messages", "worker_state")]),
        **extra,
    }
    return result


def _round_batches(spec: RoundSpec, worker: int, elements: list[Any], source: str) -> list[DataSet]:
    """The round's mini-batches, from the exported files' arrays or from the cached elements."""
    if source == "export":  # checked element by element when the files were written
        return [DataSet(x, y, num_classes=spec.num_classes) for x, y in elements]
    # checked element by element by the count that cached them
    return batches_of(elements, spec.elements_per_batch, spec.num_classes, f"worker {worker}, round {spec.round}")


def _set_gc(spec: RoundSpec) -> dict[str, Any]:
    """Apply the round's garbage-collection settings; returns the collections counted so far."""
    memory.toggle_periodic_gc(spec.periodic_gc)
    memory.set_auto_gc_window(spec.gc_window_ms)
    return memory.gc_stats()


def _start_round(spec: RoundSpec, net: Network, state_bc: Any, workers_bc: Any) -> tuple[dict[Any, Any], int]:
    """Set the executor's network to the round's broadcast state: weights (and updater state), loss scale,
    iteration. Returns every worker's own state (SharedTrainingMaster's) and the bytes received."""
    flat = state_bc.value
    everyone = workers_bc.value if workers_bc is not None else {}  # unpickled whole, every worker's
    load_state(net, flat, spec.keys, spec.sizes)
    if net.loss_scaler is not None and spec.scaler is not None:  # the executor's network is reused: set it each round
        net.loss_scaler.load_state(spec.scaler)
    if not spec.send_updater and spec.mode != "shared":  # DL4J's saveUpdater(false): each round's updater starts fresh
        for arr in net.updater_state.values():
            arr.assign(np.zeros(arr.shape, arr.dtype))
    net.iteration = spec.base_iteration
    return everyone, array_bytes(flat) + array_bytes(everyone)


def _fit_steps(
    spec: RoundSpec, net: Network, batches: list[DataSet], result: dict[str, Any], own: dict[str, Any] | None
) -> dict[str, Any]:
    """The round's steps, their scores into the result: plain fit_batch calls, or SharedTrainingMaster's
    threshold-encoded ones (their messages and the worker's state into the result too)."""
    if spec.mode == "shared":
        result["messages"], extra, result["worker_state"] = _shared_steps(spec, net, batches, result["scores"], own)
        return extra
    for ds in batches:
        result["scores"].append(float(net.fit_batch(ds)))
    return {}


def _pack_result(spec: RoundSpec, net: Network, result: dict[str, Any]) -> None:
    """Parameter averaging: the worker's state (the updater's too where it is sent), if it is finite, its scale."""
    keys = spec.keys if spec.send_updater else spec.keys[:1]
    result["state"] = pack_state(net, keys)
    result["finite"] = bool(np.all(np.isfinite(result["state"])))  # the driver gets sums only
    result["scaler"] = scaler_state(net)


def _phase_ms(marks: list[float]) -> dict[str, float]:
    """Milliseconds between the round's marks: loading, getting the model, fitting, exporting."""
    phases = ("load_ms", "get_model_ms", "fit_ms", "export_ms")
    return {name: (end - start) * 1e3 for name, start, end in zip(phases, marks, marks[1:])}


def _work_counts(net: Network, allocs0: int, gc0: dict[str, Any]) -> dict[str, Any]:
    """Since the fit began: kit's heap allocations and garbage collections; the workspaces' peak."""
    gc1 = memory.gc_stats()
    return {
        "heap_allocations": memory.heap_allocations() - allocs0,
        "peak_workspace_bytes": net.train_mgr.peak_bytes(),
        "gc_calls": gc1["calls"] - gc0["calls"],
        "gc_ms": (gc1["seconds"] - gc0["seconds"]) * 1e3,
    }


def _shared_steps(
    spec: RoundSpec, net: Network, batches: list[DataSet], scores: list[float], own: dict[str, Any] | None
) -> tuple[list[np.ndarray], dict[str, Any], dict[str, Any]]:
    """SharedTrainingMaster: each step's update goes into the residual, is threshold-encoded,
    applied locally and sent. The worker's own state (residual, updater state, threshold) comes
    from the driver and goes back to it with the messages: it lasts the whole training, across
    rounds, epochs and fits, wherever Spark runs the task, and a retried task starts from exactly
    the state the failed one had."""
    state = _worker_state(net, own)
    algo = AdaptiveThresholdAlgorithm(**spec.threshold)
    messages, counts = [], []
    for ds in batches:
        old = weights(net).numpy().copy()  # mixed precision: the float32 master weights
        scores.append(float(net.fit_batch(ds)))
        update = old - weights(net).numpy()  # 0 for a step the loss scaler skipped
        state["residual"] += update
        state["tau"] = algo.calculate_threshold(
            net.iteration, 0, state["tau"], state["last_dense"], state["last_sparsity"]
        )
        message = threshold_encode(state["residual"], state["tau"])
        applied = np.zeros_like(old)
        if message is not None:
            threshold_decode(message, applied)
            messages.append(message)
        net.set_params(old - applied)
        count = encoded_count(message)
        counts.append(count)
        state["last_dense"] = message is not None and int(message[3]) == 1
        state["last_sparsity"] = count / old.size
    state["updater"] = {f"updater_{k}": arr.numpy().copy() for k, arr in net.updater_state.items()}
    state["scaler"] = scaler_state(net)
    extra = {
        "tau": float(state["tau"]),
        "encoded": int(sum(counts)),
        "sparsity": float(np.mean(counts) / net.num_params),
        "state_from": "new" if own is None else f"driver (round {own['rounds']} of this worker)",
    }
    state["rounds"] += 1
    return messages, extra, state


def _worker_state(net: Network, own: dict[str, Any] | None) -> dict[str, Any]:
    """The worker's state from the driver, its updater state and loss scale set on the network; a new
    one on its first round (the broadcast updater state, sent while a worker has none; no residual)."""
    if own is None:
        return {
            "residual": np.zeros(net.num_params, np.result_type(net.dtype, np.float32)),  # float16: float32
            "tau": None,
            "last_dense": None,
            "last_sparsity": None,
            "rounds": 0,
        }
    arrays = net.state_arrays()
    for key, value in own["updater"].items():
        arrays[key].assign(value)
    if net.loss_scaler is not None and own.get("scaler") is not None:  # each worker keeps its own scale
        net.loss_scaler.load_state(own["scaler"])
    return {**own, "residual": own["residual"].copy()}
