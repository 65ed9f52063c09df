"""`python -m kit bench spark`: what Spark costs per round next to ParallelWrapper, on one machine.

- the same job (MLP, batch 32 per worker, averaging every round) with ParallelWrapper 2 workers,
  Spark parameter averaging with 1 and 2 local workers: samples per second and milliseconds per
  round, variants interleaved in every repeat, median and spread [min-max]/median;
- Spark's per-round overhead: Spark's round time minus ParallelWrapper's on the same job;
- broadcast and aggregate (driver) and job time as a function of the parameter count (small fits
  with training stats), with a least-squares line a + b * P for each: the scaling model of
  `compare_devices` extended with Spark's measured costs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from kit.bench.common import _device_label
from kit.data import ArrayIterator, DataSet
from kit.nn import Sgd, mlp
from kit.parallel import ParallelWrapper
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, local_spark_context, to_rdd

__all__ = ["bench_spark"]


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def bench_spark(quick: bool = False) -> dict[str, Any]:
    sc = local_spark_context("local[2]", app_name="kit-bench", conf={"spark.ui.showConsoleProgress": "false"})
    try:
        return _run(sc, quick, ParameterAveragingTrainingMaster, SparkNetwork, to_rdd)
    finally:
        sc.stop()


def _run(sc: Any, quick: bool, master: Any, spark_network: Any, to_rdd: Any) -> dict[str, Any]:
    repeats = 3 if quick else 5
    n = 32 * 2 * (8 if quick else 32)
    rng = np.random.default_rng(0)
    x, y = rng.random((n, 64), dtype=np.float32), rng.integers(0, 10, n)
    data = DataSet(x, y, num_classes=10)
    rdd = to_rdd(sc, (x, y)).cache()
    rdd.count()

    def pw() -> int:
        net = mlp(64, hidden=(64,), n_out=10, updater=Sgd(0.05), seed=0)
        with ParallelWrapper(net, workers=2, prefetch_buffer=0) as wrapper:
            wrapper.fit(ArrayIterator(data, 32))
        return n // 64

    def spark(workers: int) -> Any:
        def run() -> int:
            net = mlp(64, hidden=(64,), n_out=10, updater=Sgd(0.05), seed=0)
            tm = master(32, 1, num_workers=workers, rdd_training_approach="DIRECT")
            spark_network(sc, net, tm).fit(rdd)
            return -(-n // (32 * workers))

        return run

    variants = {"ParallelWrapper, 2 workers": pw, "Spark, 1 worker": spark(1), "Spark, 2 workers": spark(2)}
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    rounds: dict[str, int] = {}
    for fn in variants.values():  # warm-up: executor processes, imports, caches
        fn()
    for _ in range(repeats):
        for name, fn in variants.items():  # interleaved: drift hits every variant alike
            t0 = time.perf_counter()
            rounds[name] = fn()
            seconds[name].append(time.perf_counter() - t0)
    rows = []
    for name, values in seconds.items():
        per_round = [v / rounds[name] * 1e3 for v in values]
        rows.append(
            {
                "variant": name,
                "samples_per_s": statistics.median(n / v for v in values),
                "round_ms": statistics.median(per_round),
                "spread": _spread(values),
                "rounds": rounds[name],
            }
        )
    by = {r["variant"]: r for r in rows}
    overhead = [
        s / rounds["Spark, 2 workers"] - p / rounds["ParallelWrapper, 2 workers"]
        for s, p in zip(seconds["Spark, 2 workers"], seconds["ParallelWrapper, 2 workers"])
    ]
    scaling = _scaling(sc, quick, master, spark_network, to_rdd)
    rdd.unpersist()
    return {
        "benchmark": "spark",
        "device": _device_label() + f"; Spark {sc.version} {sc.master}",
        "repeats": repeats,
        "columns": ["variant", "samples_per_s", "round_ms", "spread", "rounds"],
        "rows": rows,
        "summary": {
            "spark_overhead_ms_per_round_median": statistics.median(overhead) * 1e3,
            "spark_overhead_ms_per_round_min": min(overhead) * 1e3,
            "spark_overhead_ms_per_round_max": max(overhead) * 1e3,
            "spark_2_vs_1_worker_speedup": by["Spark, 2 workers"]["samples_per_s"]
            / by["Spark, 1 worker"]["samples_per_s"],
            **scaling,
        },
    }


def _scaling(sc: Any, quick: bool, master: Any, spark_network: Any, to_rdd: Any) -> dict[str, Any]:
    """Median broadcast / aggregate / job ms per round at several parameter counts; a line each."""
    hidden = (16, 256, 2048) if quick else (16, 256, 2048, 8192)
    rng = np.random.default_rng(1)
    m = 32 * 2 * 4
    rdd = to_rdd(sc, (rng.random((m, 64), dtype=np.float32), rng.integers(0, 10, m))).cache()
    points: dict[str, list[tuple[int, float]]] = {"broadcast_ms": [], "aggregate_ms": [], "job_ms": []}
    out: dict[str, Any] = {}
    for h in hidden:
        net = mlp(64, hidden=(h,), n_out=10, updater=Sgd(0.01), seed=0)
        tm = master(32, 1, num_workers=2, rdd_training_approach="DIRECT", collect_training_stats=True)
        sn = spark_network(sc, net, tm)
        sn.fit(rdd)  # warm-up for this size (executors build the network)
        sn.fit(rdd, epochs=2)
        summary = sn.get_training_stats().summary()
        for key in points:
            points[key].append((net.num_params, summary[key]))
        out[f"P={net.num_params}"] = (
            f"broadcast {summary['broadcast_ms']:.2f} ms, aggregate {summary['aggregate_ms']:.2f} ms, "
            f"job {summary['job_ms']:.1f} ms"
        )
    rdd.unpersist()
    for key, pts in points.items():
        p = np.array([a for a, _ in pts], float)
        t = np.array([b for _, b in pts], float)
        slope, intercept = np.polyfit(p, t, 1)
        out[f"model_{key}"] = f"{intercept:.2f} ms + {slope * 1e6:.3f} ms per million parameters"
    return out
