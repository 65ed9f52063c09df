"""`python -m kit bench parallel`: data-parallel training and parallel inference, side by side.

- ParallelWrapper, 2 workers vs 1 on the MLP (on a CPU-only machine: two logical CPU devices,
  one BLAS thread each, against one worker with every core), as samples per second;
- averaging frequency 1 / 5 / 20: throughput and the score reached;
- the same on 2 simulated host devices (separate placement domains, like two GPUs): what
  sending batches and gathering/broadcasting the average costs, in bytes per iteration;
- ParallelInference BATCHED vs SEQUENTIAL at 1, 8 and 64 client threads, and 64 asyncio clients
  on one event loop (`output_async`: no thread per client), interleaved repeats: throughput
  (median and spread, flagged when unreliable), p50/p99 latency, the ratio per repeat and
  whether it meets the goal, beside what merging alone can buy on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kit.bench.common import device_label
from kit.core.devices import (
    blas_threads,
    default_devices,
    host_device_count,
    logical_devices,
    reset_transfer_stats,
    set_host_device_count,
    transfer_stats,
)
from kit.data import ArrayIterator, DataSet
from kit.measurement import measure
from kit.nn import Sgd, lenet, mlp
from kit.parallel import InferenceMode, ParallelInference, ParallelWrapper

__all__ = ["bench_parallel"]


def _data(n: int, features: int, seed: int = 0) -> DataSet:
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((n, features)), rng.integers(0, 10, n), num_classes=10)


# name: (workers, averaging frequency). "1 worker" lets OpenBLAS use every core; "1 worker, 1 BLAS
# thread" is one core's worth, the share each of two workers gets
_TRAINING_CONFIGS = {
    "1 worker": (1, 1),
    "1 worker, 1 BLAS thread": (1, 1),
    "2 workers": (2, 1),
    "2 workers, F=5": (2, 5),
    "2 workers, F=20": (2, 20),
    # separate placement domains: every batch and every average crosses the transfer path
    "2 simulated host devices": (2, 1),
    "2 simulated host devices, F=5": (2, 5),
}


def _training(quick: bool) -> list[dict[str, Any]]:
    """Every training configuration fitted on the same data in turn, one row each."""
    data = _data(64 * (16 if quick else 64), 784)
    repeats = 3 if quick else 7
    previous_hosts = set_host_device_count(max(2, host_device_count()))
    wrappers = {name: _wrapper(name, workers, freq) for name, (workers, freq) in _TRAINING_CONFIGS.items()}
    try:
        times, copied = _time_training(wrappers, data, repeats)
        return [_training_row(name, net, pw, data, times, copied) for name, (net, pw) in wrappers.items()]
    finally:
        for _, pw in wrappers.values():
            pw.shutdown()
        set_host_device_count(previous_hosts)


def _wrapper(name: str, workers: int, freq: int) -> tuple[Any, ParallelWrapper]:
    """A fresh MLP and the ParallelWrapper that trains it on this configuration's devices."""
    net = mlp(784, hidden=(512, 256), n_out=10, updater=Sgd(0.05), seed=0)
    if "simulated" in name:
        devices = ["cpu:0", "cpu:1"]
    else:
        devices = [default_devices(1)[0]] if workers == 1 else list(logical_devices(workers, "cpu:0"))
    pw = ParallelWrapper(net, workers=workers, devices=devices, prefetch_buffer=0, averaging_frequency=freq)
    return net, pw


def _time_training(
    wrappers: dict[str, tuple[Any, ParallelWrapper]], data: DataSet, repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """A warm-up fit each, then repeats of one fit each in turn: seconds, and bytes copied per iteration."""
    times: dict[str, list[float]] = {k: [] for k in wrappers}
    copied: dict[str, list[float]] = {k: [] for k in wrappers}  # bytes through the transfer path per iteration
    for _, pw in wrappers.values():  # warm-up
        pw.fit(ArrayIterator(data, 64))
    for _ in range(repeats):
        for name, (_, pw) in wrappers.items():
            limit = blas_threads(1) if "1 BLAS thread" in name else contextlib.nullcontext()
            with limit:
                reset_transfer_stats()
                start_iteration = pw.iteration
                t0 = time.perf_counter()
                pw.fit(ArrayIterator(data, 64))
                times[name].append(time.perf_counter() - t0)
                moved = sum(b for _, b in transfer_stats().values())
                copied[name].append(moved / max(1, pw.iteration - start_iteration))
    return times, copied


def _training_row(
    name: str,
    net: Any,
    pw: ParallelWrapper,
    data: DataSet,
    times: dict[str, list[float]],
    copied: dict[str, list[float]],
) -> dict[str, Any]:
    """One configuration's row: samples per second, speed-ups over one worker, score, bytes copied."""
    ratio = statistics.median(b / t for b, t in zip(times["1 worker"], times[name]))
    ratio_one_core = statistics.median(b / t for b, t in zip(times["1 worker, 1 BLAS thread"], times[name]))
    return {
        "case": f"ParallelWrapper MLP 784-512-256-10, {name}",
        "devices": ", ".join(str(d) for d in pw.devices),
        "samples_per_s": data.num_examples / statistics.median(times[name]),
        "speedup_vs_1": ratio,
        "speedup_vs_1_one_thread": ratio_one_core,
        "score": net.score(data),
        "transfer_bytes_per_iter": statistics.median(copied[name]),
    }


def _clients(pi: ParallelInference, x: np.ndarray, clients: int, requests: int) -> tuple[float, list[float]]:
    """Requests per second over the burst (first client start to last client end) and latencies."""
    latencies: list[float] = []
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()
    go = threading.Barrier(clients)

    def client(c: int) -> None:
        rng = np.random.default_rng(c)
        rows = [x[i] for i in rng.integers(0, len(x), requests)]
        mine = []
        go.wait()  # thread start-up is not timed
        start = time.perf_counter()
        for row in rows:
            t0 = time.perf_counter()
            pi.output(row)
            mine.append(time.perf_counter() - t0)
        end = time.perf_counter()
        with lock:
            latencies.extend(mine)
            spans.append((start, end))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = max(e for _, e in spans) - min(s for s, _ in spans)
    return clients * requests / elapsed, latencies


def _async_clients(pi: ParallelInference, x: np.ndarray, clients: int, requests: int) -> tuple[float, list[float]]:
    """`_clients` with coroutines instead of threads: `clients` tasks on one event loop, each
    awaiting `output_async` for its requests one after another."""
    latencies: list[float] = []

    async def client(c: int) -> None:
        rng = np.random.default_rng(c)
        for row in [x[i] for i in rng.integers(0, len(x), requests)]:
            t0 = time.perf_counter()
            await pi.output_async(row)
            latencies.append(time.perf_counter() - t0)

    async def burst() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return time.perf_counter() - start

    return clients * requests / asyncio.run(burst()), latencies


CLIENT_KINDS = {"client threads": _clients, "asyncio clients": _async_clients}
INFERENCE_GOAL = 5.0  # BATCHED / SEQUENTIAL throughput at 64 clients
_MODES = (InferenceMode.SEQUENTIAL, InferenceMode.BATCHED)


def _batching_bound(net: Any, x: np.ndarray, batch: int, repeats: int, min_time: float) -> list[float]:
    """What merging alone can buy on this machine: `batch` one-row forwards over one forward of
    `batch` rows, with one worker's BLAS share, serving overhead excluded (kit.measure, per
    repeat). BATCHED/SEQUENTIAL can exceed it only by what SEQUENTIAL loses to its hand-offs."""
    rows = [x[i : i + 1] for i in range(batch)]
    with blas_threads(max(1, (os.cpu_count() or 1) // 2)):
        t = measure.compare(
            {"one row at a time": lambda: [net.output(r) for r in rows], "merged": lambda: net.output(x[:batch])},
            min_time=min_time,
            repeats=repeats,
        )
    return [a / b for a, b in zip(t["one row at a time"].seconds, t["merged"].seconds)]


def _inference(quick: bool, client_counts: tuple[int, ...] = (1, 8, 64)) -> list[dict[str, Any]]:
    """SEQUENTIAL and BATCHED side by side: both servers live, every repeat runs one burst of
    client threads on each (the order alternating), so drift hits them alike. A burst is timed
    from its first client's start to its last client's end (thread start-up excluded); the
    repeats become kit.measure Timings (seconds per request): median, spread, load flags."""
    rows = []
    models = {
        "MLP 784-512-256-10": (mlp(784, hidden=(512, 256), n_out=10), (784,)),
        "LeNet 1x28x28": (lenet(), (1, 28, 28)),
    }
    repeats = 3 if quick else 7
    requests = 30 if quick else 150  # per burst: this many per client up to 8 clients, then split
    for label, (net, shape) in models.items():
        x = np.random.default_rng(0).random((256, *shape)).astype(np.float32)
        bound = _batching_bound(net, x, 32, repeats, 0.05 if quick else measure.MIN_TIME)
        for clients, kind in [(c, "client threads") for c in client_counts] + [(64, "asyncio clients")]:
            per_client = max(5, requests // max(1, clients // 8))
            rows += _burst_rows(label, net, x, kind, clients, per_client, repeats, bound)
    return rows


def _burst_rows(
    label: str, net: Any, x: np.ndarray, kind: str, clients: int, per_client: int, repeats: int, bound: list[float]
) -> list[dict[str, Any]]:
    """Both servers under the same bursts of clients: one row per mode, the last with the ratio of the two."""
    run = CLIENT_KINDS[kind]
    servers = {mode: ParallelInference(net, workers=2, inference_mode=mode) for mode in _MODES}
    try:
        for pi in servers.values():  # warm-up: workspaces learn their sizes
            run(pi, x, min(clients, 4), 5)
        first = {mode: len(pi.batch_sizes) for mode, pi in servers.items()}
        seconds, lat, others = _time_bursts(servers, run, x, clients, per_client, repeats)
        timings = {m: measure.Timing(m.value, seconds[m], clients * per_client, others) for m in _MODES}
        rows = []
        for mode, pi in servers.items():
            t = timings[mode]
            rows.append(
                {
                    "case": f"ParallelInference {label}, {mode.value}, {clients} {kind}",
                    "requests_per_s": 1 / t.median,
                    "spread": measure.format_spread(t.spread),
                    "p50_ms": float(np.percentile(lat[mode], 50) * 1e3),
                    "p99_ms": float(np.percentile(lat[mode], 99) * 1e3),
                    "mean_batch": float(np.mean(pi.batch_sizes[first[mode] :])),
                    "warnings": "; ".join(t.warnings),
                }
            )
        ratios = [s / b for s, b in zip(seconds[InferenceMode.SEQUENTIAL], seconds[InferenceMode.BATCHED])]
        rows[-1]["batched_over_sequential"] = statistics.median(ratios)
        rows[-1]["batched_over_sequential_each"] = ratios  # one per repeat (in the JSON): the goal's interval
        rows[-1]["ratio_range"] = f"{min(ratios):.3g}-{max(ratios):.3g}"
        rows[-1]["batching_bound"] = statistics.median(bound)
        rows[-1]["reliable"] = all(t.reliable for t in timings.values())
        return rows
    finally:
        for pi in servers.values():
            pi.shutdown()


def _time_bursts(
    servers: dict[InferenceMode, ParallelInference],
    run: Callable[..., tuple[float, list[float]]],
    x: np.ndarray,
    clients: int,
    per_client: int,
    repeats: int,
) -> tuple[dict[InferenceMode, list[float]], dict[InferenceMode, list[float]], float]:
    """Repeats of one burst on each server, the order alternating: seconds per request, latencies, others' load."""
    seconds: dict[InferenceMode, list[float]] = {m: [] for m in _MODES}
    lat: dict[InferenceMode, list[float]] = {m: [] for m in _MODES}
    with measure.machine_load() as load:
        for r in range(repeats):
            for mode in _MODES if r % 2 == 0 else _MODES[::-1]:
                throughput, latencies = run(servers[mode], x, clients, per_client)
                seconds[mode].append(1 / throughput)
                lat[mode].extend(latencies)
    return seconds, lat, load.others


def _inference_goals(inference: list[dict[str, Any]]) -> dict[str, str]:
    goals = {}
    for r in inference:
        if ", 64 " in r["case"] and "batched_over_sequential" in r:
            kind = r["case"].split("64 ")[-1]
            text = measure.goal(
                f"BATCHED / SEQUENTIAL throughput at 64 {kind}",
                r["batched_over_sequential"],
                ">=",
                INFERENCE_GOAL,
                "x",
                r["reliable"],
                repeats=r.get("batched_over_sequential_each"),
            )
            goals[f"goal_inference[{_model_of(r)}, {kind}]"] = (
                f"{text}; merging 32 rows alone buys {r['batching_bound']:.2f}x here"
            )
    return goals


def _model_of(row: dict[str, Any]) -> str:
    return row["case"].split(",")[0].removeprefix("ParallelInference ")


def bench_parallel(quick: bool = False) -> dict[str, Any]:
    training = _training(quick)
    inference = _inference(quick)
    cols = ["case", "samples_per_s", "speedup_vs_1", "speedup_vs_1_one_thread", "score", "transfer_bytes_per_iter"]
    cols += ["requests_per_s"]
    cols += ["spread", "p50_ms", "p99_ms", "mean_batch", "batched_over_sequential", "ratio_range", "warnings"]
    rows = [{c: r.get(c, "") for c in cols} for r in training + inference]
    two = next(r for r in training if r["case"].endswith("2 workers"))
    at64 = [r for r in inference if ", 64 " in r["case"] and "batched_over_sequential" in r]
    return {
        "benchmark": "parallel",
        "device": device_label() + f"; workers on {two['devices']}",
        "repeats": 3 if quick else 7,
        "columns": cols,
        "rows": rows,
        "summary": {
            "two_workers_speedup_vs_one_worker_all_cores": two["speedup_vs_1"],
            "two_workers_speedup_vs_one_worker_one_thread": two["speedup_vs_1_one_thread"],
            "two_workers_F20_speedup_vs_one_worker_all_cores": next(
                r["speedup_vs_1"] for r in training if r["case"].endswith("F=20")
            ),
            "simulated_devices_transfer_bytes_per_iter_F1": next(
                r["transfer_bytes_per_iter"] for r in training if r["case"].endswith("2 simulated host devices")
            ),
            **{
                f"batched_over_sequential_64_clients[{_model_of(r)}, {r['case'].split('64 ')[-1]}]": r[
                    "batched_over_sequential"
                ]
                for r in at64
            },
            "goal": "2 workers >= 1.6x one; BATCHED >= 5x SEQUENTIAL at 64 clients",
            **_inference_goals(inference),
        },
    }
