"""What runs on Spark executors: rebuild a network from its JSON config, train a round, evaluate.

How the driver uses it (kit.spark.masters, with a live Spark context, so not run as a doctest):

    fn = round_task(RoundSpec(...), broadcast)        # the driver builds a task ...
    rdd.mapPartitionsWithIndex(fn).collect()          # ... Spark runs it on every partition

A task is a plain function of (partition index, iterator of elements), so it also runs without Spark:

    >>> import numpy as np
    >>> from kit.spark._executor import count_task
    >>> pair = (np.zeros((1, 4), np.float32), np.array([1]))   # one element: (features, labels)
    >>> count = count_task(per_batch=2, num_classes=3)          # elements come tagged with where they began
    >>> [(partition, n) for partition, n, sha256 in count(0, iter([((3, 0), pair), ((3, 1), pair)]))]
    [(0, 2)]
    >>> list(count(0, iter([((3, 0), pair), ((3, 1), (np.zeros((1, 4)), np.array([1, 2])))])))
    Traceback (most recent call last):
    kit.spark._executor.PartitionError: [kit.spark] partition 3 (element 1, count): ValueError: features of shape ...

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
import hashlib
import io
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit import backend, memory
from kit.checks import check_finite
from kit.data.dataset import DataSet
from kit.devices import Device, gpu_count
from kit.evaluation import ROC, Evaluation
from kit.nn.config import NetworkConfig
from kit.nn.network import Network
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    encoded_count,
    threshold_decode,
    threshold_encode,
)
from kit.spark.aggregation import array_bytes
from kit.spark.checkpoint import example_digest
from kit.state import STATE

__all__ = [
    "BadElementError",
    "PartitionError",
    "RoundSpec",
    "batches_of",
    "check_element",
    "count_task",
    "eval_task",
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

MARK = "[kit.spark] partition"


class PartitionError(RuntimeError):
    """A task failed on one partition; the message names it (and the round)."""


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


def task_device(resources: dict[str, Any] | None) -> Any:
    """The kit device of the GPU Spark gave this task (`TaskContext.get().resources()`): its first
    address, as CuPy numbers the GPUs the executor sees. Says so when Spark gave no GPU address or
    CuPy sees no GPU here."""
    gpu = (resources or {}).get("gpu")
    addresses = list(getattr(gpu, "addresses", None) or [])
    if not addresses:
        raise RuntimeError(
            "gpus_per_task is set but Spark gave this task no GPU address: the executors declare no 'gpu' "
            "resource (spark.executor.resource.gpu.amount and spark.executor.resource.gpu.discoveryScript, "
            "spark.worker.resource.gpu.* on standalone workers)"
        )
    count = gpu_count()
    if count == 0:
        raise RuntimeError(
            f"Spark gave this task GPU {addresses[0]} but kit sees no GPU on this executor "
            f"({backend.gpu_status()[1]}); install kit's gpu extra on the executors, or leave gpus_per_task=None"
        )
    index = int(addresses[0])
    if index >= count:
        raise RuntimeError(
            f"Spark gave this task GPU address {addresses[0]} but CuPy sees {count} GPU(s) on this executor "
            "(CUDA_VISIBLE_DEVICES renumbers them): make the discovery script report CuPy's numbering"
        )
    return Device(f"gpu:{index}")


def _this_task_device(spec: RoundSpec) -> Any:
    if not spec.gpus_per_task:
        return None
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return task_device(ctx.resources() if ctx is not None else None)


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


def check_element(element: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One RDD element: a (features, labels) pair of arrays with the same leading length."""
    if not isinstance(element, (tuple, list)) or len(element) != 2:
        raise ValueError(
            f"{where}: an element is a {type(element).__name__}; kit.spark needs (features, labels) pairs of "
            "NumPy arrays (see kit.spark.to_rdd)"
        )
    x, y = np.asarray(element[0]), np.asarray(element[1])
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{where}: features of shape {x.shape} and labels of shape {y.shape} differ in length")
    return x, y


class BadElementError(ValueError):
    """An element of the user's RDD that cannot be trained on, with where it began."""

    def __init__(self, source: tuple[int, int], message: str) -> None:
        super().__init__(message)
        self.source = source


def tag_elements(partition: int, it: Iterator[Any]) -> Iterator[tuple[tuple[int, int], Any]]:
    """((RDD partition, position), element): run on the user's RDD before any shuffle."""
    for j, element in enumerate(it):
        yield (partition, j), element


def single_examples(tagged: tuple[tuple[int, int], Any]) -> Iterator[tuple[tuple[int, int], Any]]:
    """A tagged element of n examples as n tagged one-example elements (a malformed element
    passes whole, for the checks to name)."""
    source, element = tagged
    try:
        x, y = check_element(element, "element")
    except ValueError:
        yield tagged
        return
    if x.shape[0] == 1:
        yield tagged
        return
    for r in range(x.shape[0]):
        yield source, (x[r : r + 1], y[r : r + 1])


def _one_batch(tagged: list[Any], num_classes: int) -> DataSet:
    pairs = []
    for source, e in tagged:
        try:
            pairs.append(check_element(e, "element"))
        except ValueError as exc:
            raise BadElementError(source, str(exc).removeprefix("element: ")) from None
    try:
        x = np.concatenate([p[0] for p in pairs])  # its own dtype: the network casts it, as a local fit does
        y = np.concatenate([p[1] for p in pairs])
        check_finite(x, "features")
        return DataSet(x, y, num_classes=num_classes)
    except ValueError as exc:
        if len(tagged) == 1:
            raise BadElementError(tagged[0][0], str(exc)) from None
    for one in tagged:  # which element: the same checks one by one, so the error names it
        _one_batch([one], num_classes)
    raise AssertionError("a mini-batch failed that none of its elements fails")  # pragma: no cover


def batches_of(elements: list[Any], per_batch: int, num_classes: int, where: str = "") -> list[DataSet]:
    """Stack groups of `per_batch` tagged elements ((partition, position), element) into
    DataSets; features must be finite and labels valid. A bad element raises BadElementError naming
    its RDD partition and position (`where`: the round, for messages)."""
    return [_one_batch(elements[i : i + per_batch], num_classes) for i in range(0, len(elements), per_batch)]


def _fail(partition: int, what: str, exc: BaseException) -> PartitionError:
    """The error the driver sees. A bad element is named by where it was in the user's RDD
    (partition, element), not by the partition kit's shuffle moved it to."""
    if isinstance(exc, BadElementError):
        (source, element), name = exc.source, "ValueError"
        return PartitionError(f"{MARK} {source} (element {element}, {what}): {name}: {exc}")
    return PartitionError(f"{MARK} {partition} ({what}): {type(exc).__name__}: {exc}")


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
            raise _fail(partition, f"round {spec.round}", exc) from exc

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
    t_start = time.time()
    t0 = time.perf_counter()
    worker, elements, source = _round_elements(spec, partition, it)
    where = f"worker {worker}, round {spec.round}"
    if source == "export":  # checked element by element when the files were written
        batches = [DataSet(x, y, num_classes=spec.num_classes) for x, y in elements]
    else:  # checked element by element by the count that cached them
        batches = batches_of(elements, spec.elements_per_batch, spec.num_classes, where)
    t1 = time.perf_counter()
    memory.toggle_periodic_gc(spec.periodic_gc)
    memory.set_auto_gc_window(spec.gc_window_ms)
    gc0 = memory.gc_stats()
    result: dict[str, Any] = {"worker": worker, "round": spec.round, "state": None, "scores": [], "sizes": []}
    if not batches:
        result["stats"] = {"worker": worker, "round": spec.round, "pid": os.getpid(), "examples": 0}
        return result
    net = network_for(spec.config_json, spec.workspace_mode, _this_task_device(spec))
    flat = state_bc.value
    everyone = workers_bc.value if workers_bc is not None else {}  # unpickled whole, every worker's
    received = array_bytes(flat) + array_bytes(everyone)
    load_state(net, flat, spec.keys, spec.sizes)
    if net.loss_scaler is not None and spec.scaler is not None:  # the executor's network is reused: set it each round
        net.loss_scaler.load_state(spec.scaler)
    if not spec.send_updater and spec.mode != "shared":  # DL4J's saveUpdater(false): each round's updater starts fresh
        for arr in net.updater_state.values():
            arr.assign(np.zeros(arr.shape, arr.dtype))
    net.iteration = spec.base_iteration
    t2 = time.perf_counter()
    allocs0 = memory.heap_allocations()
    extra: dict[str, Any] = {}
    if spec.mode == "shared":
        own = everyone.get(worker)
        result["messages"], extra, result["worker_state"] = _shared_steps(spec, net, batches, result["scores"], own)
    else:
        for ds in batches:
            result["scores"].append(float(net.fit_batch(ds)))
    result["sizes"] = [ds.num_examples for ds in batches]
    t3 = time.perf_counter()
    if spec.mode != "shared":
        keys = spec.keys if spec.send_updater else spec.keys[:1]
        result["state"] = pack_state(net, keys)
        result["finite"] = bool(np.all(np.isfinite(result["state"])))  # the driver gets sums only
        result["scaler"] = scaler_state(net)
    t4 = time.perf_counter()
    gc1 = memory.gc_stats()
    result["stats"] = {
        "worker": worker,
        "round": spec.round,
        "pid": os.getpid(),
        "start": t_start,
        "end": time.time(),
        "load_ms": (t1 - t0) * 1e3,
        "get_model_ms": (t2 - t1) * 1e3,
        "fit_ms": (t3 - t2) * 1e3,
        "export_ms": (t4 - t3) * 1e3,
        "examples": sum(result["sizes"]),
        "batches": len(batches),
        "heap_allocations": memory.heap_allocations() - allocs0,
        "peak_workspace_bytes": net._train_mgr.peak_bytes(),
        "gc_calls": gc1["calls"] - gc0["calls"],
        "gc_ms": (gc1["seconds"] - gc0["seconds"]) * 1e3,
        "received_bytes": received,
        "sent_bytes": array_bytes([result.get(k) for k in ("state", "messages", "worker_state")]),
        **extra,
    }
    return result


def _shared_steps(
    spec: RoundSpec, net: Network, batches: list[DataSet], scores: list[float], own: dict[str, Any] | None
) -> tuple[list[np.ndarray], dict[str, Any], dict[str, Any]]:
    """SharedTrainingMaster: each step's update goes into the residual, is threshold-encoded,
    applied locally and sent. The worker's own state (residual, updater state, threshold) comes
    from the driver and goes back to it with the messages: it lasts the whole training, across
    rounds, epochs and fits, wherever Spark runs the task, and a retried task starts from exactly
    the state the failed one had."""
    arrays = net.state_arrays()
    if own is None:  # its first round: the broadcast updater state (sent while a worker has none), no residual
        state: dict[str, Any] = {
            "residual": np.zeros(net.num_params, np.result_type(net.dtype, np.float32)),  # float16: float32
            "tau": None,
            "last_dense": None,
            "last_sparsity": None,
            "rounds": 0,
        }
    else:
        state = {**own, "residual": own["residual"].copy()}
        for key, value in own["updater"].items():
            arrays[key].assign(value)
        if net.loss_scaler is not None and own.get("scaler") is not None:  # each worker keeps its own scale
            net.loss_scaler.load_state(own["scaler"])
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


def count_task(per_batch: int, num_classes: int) -> Any:
    """DIRECT: the elements of a partition, each checked (features, labels) as the rounds will
    stack them; materialises the cache. Yields (partition, count, SHA-256 of its examples in
    order: the data's fingerprint a checkpoint keeps)."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, int, str]]:
        try:
            n, group, hasher = 0, [], hashlib.sha256()
            for tagged in it:
                group.append(tagged)
                n += 1
                _digest_all(hasher, [tagged])
                if len(group) == per_batch:
                    batches_of(group, per_batch, num_classes)
                    group = []
            if group:
                batches_of(group, per_batch, num_classes)
            yield partition, n, hasher.hexdigest()
        except BaseException as exc:
            raise _fail(partition, "count", exc) from exc

    return run


def row_to_pair(row: Any) -> tuple[np.ndarray, np.ndarray]:
    """A DataFrame row (features: array or ml Vector, label: a class number, or a one-hot array
    or Vector) as a one-example pair. The label keeps its value: the DataSet that batches it
    applies kit.labels' rule (1.9 was truncated to class 1 here), and a refusal names the row."""
    x, y = row[0], row[1]
    x = np.asarray(x.toArray() if hasattr(x, "toArray") else x)
    return x[None], np.asarray(y.toArray() if hasattr(y, "toArray") else y)[None]


def export_task(directory: str, per_round: int, per_batch: int, num_classes: int) -> Any:
    """EXPORT: write each round's mini-batches of a partition to one .npz file (no pickle),
    every element checked on the way (features, labels) and named by where it began. Yields
    (worker, round, path, examples so far, SHA-256 of them in order: count_task's, at the end)."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, int, str, int, str]]:
        try:
            buffer: list[Any] = []
            k, n, hasher = 0, 0, hashlib.sha256()
            for e in it:
                buffer.append(e)
                if len(buffer) == per_round:
                    n += _digest_all(hasher, buffer)
                    written = _write_round(directory, partition, k, buffer, per_batch, num_classes)
                    yield (*written, n, hasher.hexdigest())
                    buffer, k = [], k + 1
            if buffer:
                n += _digest_all(hasher, buffer)
                written = _write_round(directory, partition, k, buffer, per_batch, num_classes)
                yield (*written, n, hasher.hexdigest())
        except BaseException as exc:
            raise _fail(partition, "export", exc) from exc

    return run


def _digest_all(hasher: Any, tagged: list[Any]) -> int:
    for _, element in tagged:
        try:
            example_digest(hasher, check_element(element, "element"))
        except ValueError:
            pass  # the mini-batch checks that follow name the element
    return len(tagged)


def round_records(per_round: int, stored_rounds: int) -> Any:
    """DIRECT: a worker's partition as one record per round (worker * stored_rounds + round,
    its tagged examples), so that a round reads its own examples and nothing else."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, list[Any]]]:
        try:
            for k, chunk in enumerate(iter(lambda: list(itertools.islice(it, per_round)), [])):
                yield partition * stored_rounds + k, chunk
        except BaseException as exc:
            raise _fail(partition, "cache", exc) from exc

    return run


def export_records(per_round: int, per_batch: int, stored_rounds: int) -> Any:
    """EXPORT into Spark's storage: each round's mini-batches of a worker as one record
    (worker * stored_rounds + round, .npz bytes, no pickle); the elements were checked by the
    count before."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, bytes]]:
        try:
            buffer: list[Any] = []
            k = 0
            for e in it:
                buffer.append(e)
                if len(buffer) == per_round:
                    yield partition * stored_rounds + k, _npz_bytes(buffer, per_batch)
                    buffer, k = [], k + 1
            if buffer:
                yield partition * stored_rounds + k, _npz_bytes(buffer, per_batch)
        except BaseException as exc:
            raise _fail(partition, "export", exc) from exc

    return run


def _npz_bytes(elements: list[Any], per_batch: int) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    n = 0
    for start in range(0, len(elements), per_batch):
        pairs = [check_element(e, "element") for _, e in elements[start : start + per_batch]]
        arrays[f"x{n}"] = np.concatenate([p[0] for p in pairs])
        arrays[f"y{n}"] = np.concatenate([p[1] for p in pairs])
        n += 1
    out = io.BytesIO()
    np.savez(out, count=np.int64(n), **arrays)
    return out.getvalue()


def _write_round(
    directory: str, worker: int, k: int, elements: list[Any], per_batch: int, num_classes: int
) -> tuple[int, int, str]:
    arrays: dict[str, np.ndarray] = {}
    n = 0
    for start in range(0, len(elements), per_batch):
        group = elements[start : start + per_batch]
        batches_of(group, per_batch, num_classes)  # the same checks as a round's: the round reads what passed
        pairs = [check_element(e, "element") for _, e in group]
        arrays[f"x{n}"] = np.concatenate([p[0] for p in pairs])
        arrays[f"y{n}"] = np.concatenate([p[1] for p in pairs])
        n += 1
    path = os.path.join(directory, f"w{worker}_r{k}.npz")
    np.savez(path, count=np.int64(n), **arrays)
    return worker, k, path


# ---- evaluation ------------------------------------------------------------------------


def eval_task(config_json: str, params_bc: Any, kinds: tuple[str, ...], batch_size: int, num_classes: int) -> Any:
    """Per partition: the raw sums of each evaluation ("evaluation": confusion matrix; "roc": the
    labels and scores; "score": (loss sum, count)), merged up the tree of kit.spark.aggregation."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        try:
            yield _evaluate(config_json, params_bc, kinds, batch_size, num_classes, partition, it)
        except BaseException as exc:
            raise _fail(partition, "evaluation", exc) from exc

    return run


def _evaluate(
    config_json: str,
    params_bc: Any,
    kinds: tuple[str, ...],
    batch_size: int,
    num_classes: int,
    partition: int,
    it: Iterator[Any],
) -> tuple[Any, ...]:
    net = network_for(config_json, None)
    net.set_params(params_bc.value)
    evs: list[Any] = [Evaluation(num_classes) if k == "evaluation" else ROC() if k == "roc" else None for k in kinds]
    loss, count = 0.0, 0
    pairs = [check_element(e, f"partition {partition}") for e in it]
    if pairs:
        x = np.concatenate([p[0] for p in pairs])
        y = np.concatenate([p[1] for p in pairs])
        for start in range(0, x.shape[0], batch_size):
            ds = DataSet(x[start : start + batch_size], y[start : start + batch_size], num_classes=num_classes)
            if "score" in kinds:
                loss += net.score(ds) * ds.num_examples
                count += ds.num_examples
            if any(ev is not None for ev in evs):
                probs = net.output(ds.features)
                for ev in evs:
                    if ev is not None:
                        ev.eval(ds.labels, probs)
    out: list[Any] = []
    for kind, ev in zip(kinds, evs):
        if kind == "evaluation":
            out.append(ev.confusion)
        elif kind == "roc":
            out.append((list(ev._labels), list(ev._scores)))
        else:
            out.append((loss, count))
    return tuple(out)
