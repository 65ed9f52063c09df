"""`python -m kit bench parallel`: data-parallel training and parallel inference, side by side.

- ParallelWrapper, 2 workers vs 1 on the MLP (on a CPU-only machine: two logical CPU devices,
  one BLAS thread each, against one worker with every core), as samples per second;
- averaging frequency 1 / 5 / 20: throughput and the score reached;
- ParallelInference BATCHED vs SEQUENTIAL at 1, 8 and 64 client threads, interleaved repeats:
  throughput (median and [min-max]), p50/p99 latency, the ratio and whether it meets the goal.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from typing import Any

import numpy as np

from kit.bench import _device_label
from kit.data import ArrayIterator, DataSet
from kit.devices import blas_threads
from kit.nn import Sgd, lenet, mlp
from kit.parallel import InferenceMode, ParallelInference, ParallelWrapper
from kit.parallel.wrapper import default_devices

__all__ = ["bench_parallel"]


def _data(n: int, features: int, seed: int = 0) -> DataSet:
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((n, features)), rng.integers(0, 10, n), num_classes=10)


def _training(quick: bool) -> list[dict[str, Any]]:
    data = _data(64 * (16 if quick else 64), 784)
    repeats = 3 if quick else 7
    # "1 worker" lets OpenBLAS use every core; "1 worker, 1 BLAS thread" is one core's worth, the
    # share each of two workers gets
    configs = {
        "1 worker": (1, 1),
        "1 worker, 1 BLAS thread": (1, 1),
        "2 workers": (2, 1),
        "2 workers, F=5": (2, 5),
        "2 workers, F=20": (2, 20),
    }
    wrappers = {}
    for name, (workers, freq) in configs.items():
        net = mlp(784, hidden=(512, 256), n_out=10, updater=Sgd(0.05), seed=0)
        devices = None if workers > 1 else [default_devices(1)[0]]
        pw = ParallelWrapper(net, workers=workers, devices=devices, prefetch_buffer=0, averaging_frequency=freq)
        wrappers[name] = (net, pw)
    times: dict[str, list[float]] = {k: [] for k in configs}
    try:
        for _, pw in wrappers.values():  # warm-up
            pw.fit(ArrayIterator(data, 64))
        for _ in range(repeats):
            for name, (_, pw) in wrappers.items():
                limit = blas_threads(1) if "1 BLAS thread" in name else contextlib.nullcontext()
                with limit:
                    t0 = time.perf_counter()
                    pw.fit(ArrayIterator(data, 64))
                    times[name].append(time.perf_counter() - t0)
        rows = []
        for name, (net, pw) in wrappers.items():
            ratio = statistics.median(b / t for b, t in zip(times["1 worker"], times[name]))
            ratio_one_core = statistics.median(b / t for b, t in zip(times["1 worker, 1 BLAS thread"], times[name]))
            rows.append(
                {
                    "case": f"ParallelWrapper MLP 784-512-256-10, {name}",
                    "devices": ", ".join(str(d) for d in pw.devices),
                    "samples_per_s": data.num_examples / statistics.median(times[name]),
                    "speedup_vs_1": ratio,
                    "speedup_vs_1_one_thread": ratio_one_core,
                    "score": net.score(data),
                }
            )
        return rows
    finally:
        for _, pw in wrappers.values():
            pw.shutdown()


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


INFERENCE_GOAL = 5.0  # BATCHED / SEQUENTIAL throughput at 64 clients (issue 15)
_MODES = (InferenceMode.SEQUENTIAL, InferenceMode.BATCHED)


def _spread(values: list[float]) -> str:
    return f"{min(values):.3g}-{max(values):.3g}"


def _batching_bound(net: Any, x: np.ndarray, batch: int, repeats: int) -> list[float]:
    """What merging alone can buy on this machine: `batch` one-row forwards over one forward of
    `batch` rows, with one worker's BLAS share, serving overhead excluded: no BATCHED/SEQUENTIAL
    ratio can exceed this much (plus what SEQUENTIAL loses to its hand-offs)."""
    ratios = []
    with blas_threads(max(1, (os.cpu_count() or 1) // 2)):
        net.output(x[:batch])
        for _ in range(repeats):
            t0 = time.perf_counter()
            for i in range(batch):
                net.output(x[i : i + 1])
            t1 = time.perf_counter()
            net.output(x[:batch])
            ratios.append((t1 - t0) / (time.perf_counter() - t1))
    return ratios


def _inference(quick: bool, client_counts: tuple[int, ...] = (1, 8, 64)) -> list[dict[str, Any]]:
    """SEQUENTIAL and BATCHED side by side: both servers live, every repeat runs one burst on
    each (the order alternating), so drift hits them alike; medians and [min-max] of repeats."""
    rows = []
    models = {
        "MLP 784-512-256-10": (mlp(784, hidden=(512, 256), n_out=10), (784,)),
        "LeNet 1x28x28": (lenet(), (1, 28, 28)),
    }
    repeats = 3 if quick else 7
    requests = 30 if quick else 150  # per burst: this many per client up to 8 clients, then split
    for label, (net, shape) in models.items():
        x = np.random.default_rng(0).random((256, *shape)).astype(np.float32)
        bound = _batching_bound(net, x, 32, repeats)
        for clients in client_counts:
            per_client = max(5, requests // max(1, clients // 8))
            servers = {mode: ParallelInference(net, workers=2, inference_mode=mode) for mode in _MODES}
            try:
                for pi in servers.values():  # warm-up: workspaces learn their sizes
                    _clients(pi, x, min(clients, 4), 5)
                first = {mode: len(pi.batch_sizes) for mode, pi in servers.items()}
                tput: dict[InferenceMode, list[float]] = {m: [] for m in _MODES}
                lat: dict[InferenceMode, list[float]] = {m: [] for m in _MODES}
                for r in range(repeats):
                    for mode in _MODES if r % 2 == 0 else _MODES[::-1]:
                        throughput, latencies = _clients(servers[mode], x, clients, per_client)
                        tput[mode].append(throughput)
                        lat[mode].extend(latencies)
                for mode, pi in servers.items():
                    rows.append(
                        {
                            "case": f"ParallelInference {label}, {mode.value}, {clients} clients",
                            "requests_per_s": statistics.median(tput[mode]),
                            "spread": _spread(tput[mode]),
                            "p50_ms": float(np.percentile(lat[mode], 50) * 1e3),
                            "p99_ms": float(np.percentile(lat[mode], 99) * 1e3),
                            "mean_batch": float(np.mean(pi.batch_sizes[first[mode] :])),
                        }
                    )
                ratios = [b / s for b, s in zip(tput[InferenceMode.BATCHED], tput[InferenceMode.SEQUENTIAL])]
                rows[-1]["batched_over_sequential"] = statistics.median(ratios)
                rows[-1]["ratio_spread"] = _spread(ratios)
                rows[-1]["batching_bound"] = statistics.median(bound)
            finally:
                for pi in servers.values():
                    pi.shutdown()
    return rows


def _inference_goal(inference: list[dict[str, Any]]) -> str:
    parts = []
    for r in inference:
        if "64 clients" in r["case"] and "batched_over_sequential" in r:
            ratio = r["batched_over_sequential"]
            verdict = "met" if ratio >= INFERENCE_GOAL else "not met"
            parts.append(
                f"{_model_of(r)}: {verdict} ({ratio:.2f}x, repeats {r['ratio_spread']}; merging 32 rows alone "
                f"buys {r['batching_bound']:.2f}x on this machine)"
            )
    return f"BATCHED >= {INFERENCE_GOAL:g}x SEQUENTIAL at 64 clients: " + "; ".join(parts)


def _model_of(row: dict[str, Any]) -> str:
    return row["case"].split(",")[0].removeprefix("ParallelInference ")


def bench_parallel(quick: bool = False) -> dict[str, Any]:
    training = _training(quick)
    inference = _inference(quick)
    cols = ["case", "samples_per_s", "speedup_vs_1", "speedup_vs_1_one_thread", "score", "requests_per_s"]
    cols += ["spread", "p50_ms", "p99_ms", "mean_batch", "batched_over_sequential", "ratio_spread"]
    rows = [{c: r.get(c, "") for c in cols} for r in training + inference]
    two = next(r for r in training if r["case"].endswith("2 workers"))
    at64 = [r for r in inference if "64 clients" in r["case"] and "batched_over_sequential" in r]
    return {
        "benchmark": "parallel",
        "device": _device_label() + f"; workers on {two['devices']}",
        "repeats": 3 if quick else 7,
        "columns": cols,
        "rows": rows,
        "summary": {
            "two_workers_speedup_vs_one_worker_all_cores": two["speedup_vs_1"],
            "two_workers_speedup_vs_one_worker_one_thread": two["speedup_vs_1_one_thread"],
            "two_workers_F20_speedup_vs_one_worker_all_cores": next(
                r["speedup_vs_1"] for r in training if r["case"].endswith("F=20")
            ),
            **{f"batched_over_sequential_64_clients[{_model_of(r)}]": r["batched_over_sequential"] for r in at64},
            "goal": "2 workers >= 1.6x one; BATCHED >= 5x SEQUENTIAL at 64 clients",
            "goal_inference": _inference_goal(inference),
        },
    }
