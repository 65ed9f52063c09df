"""MLP inference in `python -m kit bench train`: a 784-256-10 MLP at batch 1 and 256 through
Network.output (which answers from a plan by itself), an explicit planned forward
(Network.plan_inference) and the same math hand-written in NumPy, interleaved, one BLAS thread
each. Goals: planned batch 1 <= PLAN_GOAL x NumPy; Network.output within OUTPUT_GOALS.

Interleaved in SLICES parts a repeat (kit.measure.compare's `slices`): a batch-1 answer streams the
first layer's weights at each call, so its time follows the machine's shared caches at that moment;
taken in short turns, the variants of a repeat meet the same moments.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from kit.bench.common import min_max_ms, row_verdict, same_dtype
from kit.measurement import measure
from kit.nn import mlp

__all__ = ["OUTPUT_GOALS", "PLAN_GOAL", "SLICES", "inference_rows", "numpy_mlp_forward"]

PLAN_GOAL = 1.3  # planned MLP inference at batch 1 / hand-written NumPy


OUTPUT_GOALS = {1: 1.3, 256: 1.05}  # Network.output / hand-written NumPy, by batch size
SLICES = 20  # parts of each repeat, the variants taking turns: 10 ms a part in the full run


def numpy_mlp_forward(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    """Softmax probabilities of the ReLU MLP, written plainly in NumPy (the inference reference)."""
    h = x
    n = len(weights) // 2
    for i in range(n):
        h = h @ weights[2 * i] + weights[2 * i + 1]
        if i < n - 1:
            h = np.maximum(h, 0)
    z = h - h.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def inference_rows(quick: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """MLP 784-256-10 inference at batch 1 and 256: Network.output, a planned forward
    (Network.plan_inference) and NumPy, interleaved, one BLAS thread each."""
    net = mlp(784, hidden=(256,), n_out=10)
    weights = [p.numpy().copy() for layer in net.layers for p in layer.params.values()]
    rows, summary, warned = [], {}, []
    for batch in (1, 256):
        x = np.random.default_rng(batch).random((batch, 784)).astype(net.dtype)
        plan = net.plan_inference(batch)
        same_dtype(f"NumPy MLP inference b{batch}", net.dtype, x, *weights, numpy_mlp_forward(x, weights))
        fns = {
            f"MLP 784-256-10 inference b{batch}: NumPy (hand-written)": lambda x=x: numpy_mlp_forward(x, weights),
            f"MLP 784-256-10 inference b{batch}: Network.output": lambda x=x: net.output(x),
            f"MLP 784-256-10 inference b{batch}: planned": lambda x=x, plan=plan: plan.output(x),
        }
        with threadpool_limits(limits=1, user_api="blas"):  # 21 repeats: a goal of a few per cent
            timings = measure.compare(fns, repeats=3 if quick else 21, min_time=0.01 if quick else 0.2, slices=SLICES)
        baseline = next(iter(timings.values()))  # NumPy: a ratio to a flagged baseline is flagged too
        base = baseline.seconds
        warned += [f"{name}: {'; '.join(t.warnings)}" for name, t in timings.items() if t.warnings]
        for name, t in timings.items():
            paired = [v / b for v, b in zip(t.seconds, base)]
            ratio, reliable = statistics.median(paired), t.reliable and baseline.reliable
            row = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": min_max_ms(t.seconds), "ratio": ratio}
            row["ratio_to"] = "NumPy"
            if batch == 1 and name.endswith("planned"):
                row["goal"] = f"<= {PLAN_GOAL}: " + row_verdict(ratio, PLAN_GOAL, paired)
                summary["goal_inference_b1"] = measure.goal(
                    "planned MLP inference b1 / NumPy", ratio, "<=", PLAN_GOAL, "x", reliable, repeats=paired
                )
            if name.endswith("Network.output"):
                goal = OUTPUT_GOALS[batch]
                row["goal"] = f"<= {goal}: " + row_verdict(ratio, goal, paired)
                summary[f"goal_output_b{batch}"] = measure.goal(
                    f"Network.output MLP inference b{batch} / NumPy", ratio, "<=", goal, "x", reliable, repeats=paired
                )
            rows.append(row)
    # why a goal line says "no verdict": the rule each flagged timing broke (spread, load), by row
    summary["inference_warnings"] = " | ".join(warned) or "none"
    return rows, summary
