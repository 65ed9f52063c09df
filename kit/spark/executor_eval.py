"""Evaluation on Spark executors: each partition's raw sums (a confusion matrix, ROC labels and
scores, a loss sum and count), merged up the driver's aggregation tree (kit.spark.aggregation).

A task is a plain function of (partition index, iterator of elements), as the training tasks of
kit.spark.executor are; the network is built once per configuration there (`network_for`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kit.data.dataset import DataSet
from kit.nn.evaluation import ROC, Evaluation
from kit.spark.elements import check_element, partition_error
from kit.spark.executor import network_for

__all__ = ["eval_task"]


def eval_task(config_json: str, params_bc: Any, kinds: tuple[str, ...], batch_size: int, num_classes: int) -> Any:
    """Per partition: the raw sums of each evaluation ("evaluation": confusion matrix; "roc": the
    labels and scores; "score": (loss sum, count)), merged up the tree of kit.spark.aggregation."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        try:
            yield _evaluate(config_json, params_bc, kinds, batch_size, num_classes, partition, it)
        except Exception as exc:
            raise partition_error(partition, "evaluation", exc) from exc

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
            out.append(ev.partial())
        else:
            out.append((loss, count))
    return tuple(out)
