"""Tree aggregation: how the workers' results come back to the driver (DL4J's treeAggregate).

With N workers and `depth` d, each level combines groups of f = ceil(N ** (1 / d)) neighbouring
partial results on the executors, so the driver receives at most f of them (depth 1: every
worker's result). Parameter averaging sums the states in float64 on the way up; the driver
divides by the number of workers that trained. The combining functions run without Spark too:

    >>> import numpy as np
    >>> from kit.spark.aggregation import array_bytes, fan_in, merge_round, round_partial
    >>> fan_in(4, 2), fan_in(9, 2), fan_in(8, 3), fan_in(4, 1)
    (2, 3, 2, 4)
    >>> from kit.spark.wire import RoundResult, WorkerStats
    >>> def result(w, state):
    ...     return RoundResult(worker=w, round=0, stats=WorkerStats(w, 0, pid=0), state=np.float32(state))
    >>> both = merge_round(round_partial(None, result(0, [1, 2])), round_partial(None, result(1, [3, 5])))
    >>> both.sum, both.trained, [w.worker for w in both.workers]
    (array([4., 7.]), 2, [0, 1])
    >>> both.sum.dtype, array_bytes(both.sum)      # a sum of two float32 states: float64, their bytes together
    (dtype('float64'), 16)

Why not PySpark's `RDD.treeAggregate`: it adds a level only when that "helps the wall-clock time"
and merges in the order the shuffle delivers. Here every level is built and each group merged in
worker order, so the sums are the same on every run and cluster. Sums are float64, so a tree saves
the driver partial results, not bytes; float32 sums would round each partial sum and the depths
would stop agreeing with the sequential sum. A float64 network's mean may differ in its last bit
between depths, never between runs (test_spark_aggregation.py checks both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kit.spark.wire import RoundResult

__all__ = ["RoundPartial", "array_bytes", "check_depth", "fan_in", "merge_round", "round_partial", "tree_aggregate"]


def check_depth(owner: str, depth: Any) -> int:
    """`aggregation_depth` as an integer >= 1, or a ValueError naming the value and the remedy."""
    if not isinstance(depth, int | np.integer) or isinstance(depth, bool) or depth < 1:
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
    """Bytes of the NumPy arrays in a value (dicts, lists, tuples and dataclasses walked): what kit counts as
    sent; the pickle framing around them (tens of bytes an array) and plain numbers are not."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(array_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(array_bytes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # the wire's types (kit.spark.wire)
        return sum(array_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


@dataclass
class RoundPartial:
    """A partial result of a round's tree: its workers' results in worker order (their states
    taken out) and the sum of the `trained` states among them: float64 for two or more, a lone
    worker's state in its own dtype."""

    workers: list[RoundResult]
    sum: np.ndarray | None
    trained: int


def round_partial(zero: RoundPartial | None, result: RoundResult) -> RoundPartial:
    """seqOp: one worker's round result as a partial result. Its state (parameter averaging)
    becomes the partial's `sum`; everything else (scores, stats, shared training's messages and
    worker state) rides along in `workers`, in worker order."""
    state = result.state
    leaf = RoundPartial([dataclasses.replace(result, state=None)], state, int(state is not None))
    return leaf if zero is None else merge_round(zero, leaf)


def merge_round(a: RoundPartial | None, b: RoundPartial | None) -> RoundPartial | None:
    """combOp: two partial results, `a`'s workers before `b`'s. Sums go to float64 (a copy of a
    leaf's state, then added in place), as the driver's mean always did."""
    if a is None:
        return b
    if b is None:
        return a
    total = a.sum
    if b.sum is not None:
        if total is None:
            total = b.sum
        else:
            if a.trained == 1:  # a worker's own array: a float64 copy to sum into
                total = total.astype(np.float64)
            np.add(total, b.sum, out=total)
    return RoundPartial(a.workers + b.workers, total, a.trained + b.trained)


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
    rdd: Any, zero: Any, seq_op: Callable[[Any, Any], Any], comb_op: Callable[[Any, Any], Any], depth: int = 2
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
