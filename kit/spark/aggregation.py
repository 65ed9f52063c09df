"""Tree aggregation: how the workers' results come back to the driver (DL4J's treeAggregate).

A round's results travel up a tree instead of all landing on the driver: with N workers and
`depth` d, each level combines groups of f = ceil(N ** (1 / d)) neighbouring partial results on
the executors, so after d - 1 levels the driver receives at most f of them (depth 1: every
worker's result, Spark's plain aggregate). Parameter averaging sums the workers' states in
float64 on the way up; the driver divides by the number of workers that trained.

The combining functions are plain functions, so they run without Spark too:

    >>> import numpy as np
    >>> from kit.spark.aggregation import array_bytes, fan_in, merge_round, round_partial
    >>> fan_in(4, 2), fan_in(9, 2), fan_in(8, 3), fan_in(4, 1)
    (2, 3, 2, 4)
    >>> w0 = {"worker": 0, "state": np.float32([1.0, 2.0]), "scores": [0.5]}
    >>> w1 = {"worker": 1, "state": np.float32([3.0, 5.0]), "scores": [0.25]}
    >>> both = merge_round(round_partial(None, w0), round_partial(None, w1))
    >>> both["sum"], both["trained"], [w["worker"] for w in both["workers"]]
    (array([4., 7.]), 2, [0, 1])
    >>> both["sum"].dtype, array_bytes(both["sum"])      # a sum of two float32 states: float64
    (dtype('float64'), 16)

Why kit does not call PySpark's `RDD.treeAggregate`: it adds a level only when that "helps
the wall-clock time" (with 4 partitions and depth 2 it builds none, so the driver receives all
4), and its levels merge partial results in the order the shuffle delivers them, which can
differ from run to run. Here every level is built while more than f results remain, and each
group is merged in worker order, so the sums are the same on every run and cluster, and with
depth 1 they are exactly the sequential float64 sum the driver computed before (worker 0's
state, plus worker 1's, ...). A leaf (one worker's state) keeps its own dtype; sums of two or
more are float64, so with float32 states and fan-in 2 a partial sum weighs what the two
states it replaces did (the driver still receives fewer of them). For float32 and float16
networks the float64 sum of a few workers' values is exact (24 or 11 significant bits, plus a
few for the carries, fit in float64's 53 unless the values differ in magnitude by about
2 ** 25), and where it is not, the grouping moves float64's last bit, which the cast back to
the network's dtype keeps about once in 2 ** 29 values: every depth gives the same parameters
in practice (tests/spark/test_spark_aggregation.py checks 8 workers at depths 1, 2 and 3). A
float64 network's mean may differ in its last bit between depths, never between runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["array_bytes", "check_depth", "fan_in", "merge_round", "round_partial", "tree_aggregate"]


def check_depth(owner: str, depth: Any) -> int:
    """`aggregation_depth` as an integer >= 1, or a ValueError naming the value and the remedy."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(
            f"{owner}(aggregation_depth={depth!r}): must be an integer >= 1 (DL4J's default 2: the driver "
            "receives about sqrt(workers) partial sums; 1 sends every worker's result to the driver)"
        )
    return depth


def fan_in(n: int, depth: int) -> int:
    """The smallest f with f ** depth >= n: how many partial results one level merges into one,
    and the most the driver receives (integer arithmetic: 8 ** (1 / 3) is 2.0000000000000004)."""
    if n <= 1:
        return 1
    f = max(1, round(n ** (1.0 / depth)))
    while f**depth < n:
        f += 1
    while f > 1 and (f - 1) ** depth >= n:
        f -= 1
    return f


def array_bytes(value: Any) -> int:
    """Bytes of the NumPy arrays in a value (dicts, lists and tuples walked): what kit counts as
    sent; the pickle framing around them (tens of bytes an array) and plain numbers are not."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(array_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(array_bytes(v) for v in value)
    return 0


def round_partial(zero: Any, result: dict[str, Any]) -> dict[str, Any]:
    """seqOp: one worker's round result as a partial result. Its state (parameter averaging)
    becomes the partial's `sum`; everything else (scores, stats, shared training's messages and
    worker state) rides along in `workers`, in worker order."""
    info = {k: v for k, v in result.items() if k != "state"}
    state = result.get("state")
    leaf = {"workers": [info], "sum": state, "trained": int(state is not None)}
    return leaf if zero is None else merge_round(zero, leaf)


def merge_round(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """combOp: two partial results, `a`'s workers before `b`'s. Sums go to float64 (a copy of a
    leaf's state, then added in place), as the driver's mean always did."""
    if a is None:
        return b
    if b is None:
        return a
    total = a["sum"]
    if b["sum"] is not None:
        if total is None:
            total = b["sum"]
        else:
            if a["trained"] == 1:  # a worker's own array: a float64 copy to sum into
                total = total.astype(np.float64)
            np.add(total, b["sum"], out=total)
    return {"workers": a["workers"] + b["workers"], "sum": total, "trained": a["trained"] + b["trained"]}


def _identity(key: int) -> int:
    return key


def _merge_group(comb_op: Callable[[Any, Any], Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """One level's task: its group's partial results merged in their order (not the shuffle's);
    it passes on the array bytes moved to it, added to those moved below it."""

    def run(it: Iterator[tuple[int, tuple[int, Any, int]]]) -> Iterator[tuple[int, Any, int]]:
        pairs = list(it)  # (group, item): this partition holds one group
        if not pairs:
            return
        group, items = pairs[0][0], [item for _, item in pairs]
        items.sort(key=lambda item: item[0])
        moved = sum(m + array_bytes(value) for _, value, m in items)
        acc = items[0][1]
        for _, value, _ in items[1:]:
            acc = comb_op(acc, value)
        yield group, acc, moved

    return run


def _leaves(rdd: Any, zero: Any, seq_op: Callable[[Any, Any], Any]) -> Any:
    """Each partition folded into one partial result: (position, partial result, array bytes moved so far)."""

    def leaf(i: int, it: Iterator[Any]) -> Iterator[tuple[int, Any, int]]:
        acc = zero
        for element in it:
            acc = seq_op(acc, element)
        yield i, acc, 0  # (position, partial result, array bytes moved between executors so far)

    return rdd.mapPartitionsWithIndex(leaf)


def _levels(partial: Any, n: int, f: int, comb_op: Callable[[Any, Any], Any]) -> tuple[Any, int]:
    """Merge groups of f neighbouring partials on the executors until at most f are left; them and the levels."""
    levels = 0
    while n > f:  # one level: groups of f neighbours, keyed by their first position // f
        groups = -(-n // f)
        partial = (
            partial.map(lambda item, f=f: (item[0] // f, item))
            .partitionBy(groups, _identity)
            .mapPartitions(_merge_group(comb_op))
        )
        n = groups
        levels += 1
    return partial, levels


def tree_aggregate(
    rdd: Any,
    zero: Any,
    seq_op: Callable[[Any, Any], Any],
    comb_op: Callable[[Any, Any], Any],
    depth: int = 2,
) -> tuple[Any, dict[str, int]]:
    """`rdd.treeAggregate(zero, seq_op, comb_op, depth)` with a bound and a fixed order: the
    driver receives at most fan_in(partitions, depth) partial results, each level merging
    neighbouring partitions in partition order. Returns the result and what it cost:
    `partials` (results the driver received), `levels` (levels run on the executors),
    `driver_bytes` (array bytes of the partials the driver received) and `tree_bytes` (array
    bytes the levels moved between executors)."""
    depth = check_depth("tree_aggregate", depth)
    n = rdd.getNumPartitions()
    info = {"partials": 0, "levels": 0, "driver_bytes": 0, "tree_bytes": 0}
    if n == 0:
        return zero, info

    partial, info["levels"] = _levels(_leaves(rdd, zero, seq_op), n, fan_in(n, depth), comb_op)
    collected = sorted(partial.collect(), key=lambda item: item[0])
    info["partials"] = len(collected)
    info["driver_bytes"] = sum(array_bytes(value) for _, value, _ in collected)
    info["tree_bytes"] = sum(moved for _, _, moved in collected)
    result = collected[0][1]
    for _, value, _ in collected[1:]:
        result = comb_op(result, value)
    return result, info
