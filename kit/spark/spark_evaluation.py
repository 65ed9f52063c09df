"""Evaluation on Spark: every partition evaluates with the driver's parameters, and the raw sums
(confusion matrices, ROC rows, loss totals) come back merged up a tree, in partition order.

    >>> import numpy as np
    >>> from kit.nn.evaluation import Evaluation
    >>> from kit.spark.spark_evaluation import merge_evaluations
    >>> ev = Evaluation(2)
    >>> merge_evaluations(ev, np.array([[3, 1], [0, 4]]))
    >>> ev.accuracy()
    0.875

The numbers equal a local `network.do_evaluation` on the same data. `Evaluating` is a mixin of
kit.spark.network.SparkNetwork (it runs its jobs through `watched`, with the master's
aggregation_depth). `merge_evaluations` is re-exported by kit.spark.network and kit.spark.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.nn.evaluation import ROC, Evaluation
from kit.spark.aggregation import tree_aggregate
from kit.spark.executor_eval import eval_task
from kit.spark.rdd_data import as_rdd

__all__ = ["DEFAULT_EVAL_BATCH_SIZE", "Evaluating", "check_batch_size", "merge_evaluations"]

DEFAULT_EVAL_BATCH_SIZE = 64  # DL4J's DEFAULT_EVAL_SCORE_BATCH_SIZE


def merge_evaluations(target: Any, raw: Any) -> None:
    """Merge a partition's raw sums into an Evaluation (confusion matrix) or ROC (labels, scores)."""
    if isinstance(target, Evaluation):
        target.confusion += raw
    elif isinstance(target, ROC):
        labels, scores = raw
        target.merge_partial(labels, scores)
    else:
        raise TypeError(f"do_evaluation: kit.spark merges Evaluation and ROC, got {type(target).__name__}")


def check_batch_size(batch_size: Any, call: str) -> None:
    """At the call, on the driver: an evaluation batch is a whole number of examples >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
        raise ValueError(
            f"SparkNetwork.{call}(batch_size={batch_size!r}): the examples evaluated at a time on an executor, a "
            f"whole number >= 1 (default {DEFAULT_EVAL_BATCH_SIZE})"
        )


def _combine(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    if a is None:
        return b
    if b is None:
        return a
    out = []
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            out.append(x + y)
        elif isinstance(x[0], list):
            out.append((x[0] + y[0], x[1] + y[1]))
        else:
            out.append((x[0] + y[0], x[1] + y[1]))
    return tuple(out)


class Evaluating:
    """SparkNetwork's evaluation: do_evaluation, evaluate, score."""

    def _aggregate(self, data: Any, kinds: tuple[str, ...], batch_size: int) -> tuple[Any, ...]:
        """Each partition's raw sums, merged up a tree (the master's aggregation_depth) in
        partition order."""
        rdd = as_rdd(data, self.features_col, self.label_col)
        net = self.network
        bc = self.sc.broadcast(net.params().numpy())
        try:
            with self.watched("evaluation"):
                fn = eval_task(self.config_json, bc, kinds, batch_size, net.output_shape[0])
                depth = self.training_master.aggregation_depth
                result, _ = tree_aggregate(rdd.mapPartitionsWithIndex(fn), None, _combine, _combine, depth)
        finally:
            bc.destroy()
        if result is None:
            raise ValueError("SparkNetwork evaluation: the RDD holds no elements")
        return result

    def do_evaluation(self, data: Any, *evaluations: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> tuple:
        """Evaluate on every partition and merge (up the tree of kit.spark.aggregation) into the given Evaluation/ROC
        objects: the same numbers as a local `network.do_evaluation` on the same data."""
        if not evaluations:
            raise ValueError("do_evaluation needs at least one evaluation object (Evaluation, ROC)")
        check_batch_size(batch_size, "do_evaluation")
        width = self.network.output_shape[0]
        kinds = []
        for ev in evaluations:
            if isinstance(ev, Evaluation):
                if ev.num_classes != self.network.output_shape[0]:
                    raise ValueError(
                        f"Evaluation({ev.num_classes}) for a network with {self.network.output_shape[0]} outputs"
                    )
                kinds.append("evaluation")
            elif isinstance(ev, ROC):
                columns = 2 if width == 1 else width  # one sigmoid output scores two classes
                if ev.partial()[1] and ev.num_classes != columns:  # before the job: the ROC would be left unreadable
                    raise ValueError(
                        f"do_evaluation: this ROC already holds rows of {ev.num_classes} columns, and the network "
                        f"scores {columns}; pass a new ROC() for this network"
                    )
                kinds.append("roc")
            else:
                raise TypeError(f"do_evaluation: kit.spark merges Evaluation and ROC, got {type(ev).__name__}")
        raw = self._aggregate(data, tuple(kinds), batch_size)
        first = raw[0]
        if (int(np.sum(first)) if kinds[0] == "evaluation" else len(first[0])) == 0:  # before any is merged into
            raise ValueError("SparkNetwork evaluation: no examples (every partition of the RDD is empty)")
        for ev, part in zip(evaluations, raw):
            merge_evaluations(ev, part)
        return evaluations

    def evaluate(self, data: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> Evaluation:
        check_batch_size(batch_size, "evaluate")
        return self.do_evaluation(data, Evaluation(self.network.output_shape[0]), batch_size=batch_size)[0]

    def score(self, data: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> float:
        """Mean loss over the RDD (DL4J's calculateScore(rdd, average=true))."""
        check_batch_size(batch_size, "score")
        ((total, count),) = self._aggregate(data, ("score",), batch_size)
        if count == 0:
            raise ValueError("SparkNetwork.score: no examples")
        return total / count

    calculate_score = score
