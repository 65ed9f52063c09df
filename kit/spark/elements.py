"""The user's elements on the executors, before any training: tagged with where they began,
checked, cut into mini-batches ONCE (`cut_task`, DIRECT and EXPORT alike), counted and stored one
record per round. A mini-batch is always `per_batch` examples: an element is split where a
mini-batch ends, and pieces from different partitions are joined after the shuffle
(`join_pieces`), so the shuffle moves a few large elements, not one pickled example each. Every
failure becomes a `PartitionError` naming the partition, or a bad element's place in the user's
RDD. kit.spark.executor trains on them and re-exports these.

A task is a plain function of (partition index, iterator of elements), so it also runs without Spark:

    >>> import numpy as np
    >>> from kit.spark.elements import cut_task, join_pieces, tag_elements
    >>> pair = (np.zeros((3, 4), np.float32), np.array([1, 0, 1]))   # one element: 3 examples
    >>> cut = cut_task(per_batch=2, num_classes=2, offsets=None)
    >>> pieces = list(cut(0, tag_elements(0, iter([pair, pair]))))
    >>> [(b, first, x.shape) for b, (first, x, y) in pieces]          # (mini-batch, first example, features)
    [(0, 0, (2, 4)), (1, 2, (2, 4)), (2, 4, (2, 4))]
    >>> [x.shape for x, y in join_pieces(iter(pieces))]
    [(2, 4), (2, 4), (2, 4)]
    >>> list(cut(3, tag_elements(3, iter([pair, (np.zeros((1, 4)), np.array([1, 2]))]))))
    Traceback (most recent call last):
    kit.spark.elements.PartitionError: [kit.spark] partition 3 (element 1, prepare): ValueError: features of shape ...
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from kit.arrays.checks import check_finite
from kit.data.dataset import DataSet
from kit.files import atomic_write
from kit.spark.checkpoint import example_digest
from kit.spark.wire import task_attempt

__all__ = [
    "MARK",
    "BadElementError",
    "PartitionError",
    "batches_of",
    "check_element",
    "count_examples",
    "count_task",
    "cut_task",
    "export_records",
    "export_task",
    "join_pieces",
    "partition_error",
    "read_npz",
    "round_records",
    "row_to_pair",
    "tag_elements",
]

MARK = "[kit.spark] partition"


class PartitionError(RuntimeError):
    """A task failed on one partition; the message names it (and the round)."""


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


def _stacked(tagged: list[Any], num_classes: int) -> tuple[np.ndarray, np.ndarray, DataSet]:
    """Tagged (features, labels) pieces stacked into one mini-batch, checked as training will use
    it (finite features, labels valid for `num_classes`); a bad piece is named by where it began."""
    pairs = [_pair(source, e) for source, e in tagged]
    try:
        x = np.concatenate([p[0] for p in pairs])  # its own dtype: the network casts it, as a local fit does
        y = np.concatenate([p[1] for p in pairs])
        check_finite(x, "features")
        return x, y, DataSet(x, y, num_classes=num_classes)
    except ValueError as exc:
        if len(tagged) == 1:
            raise BadElementError(tagged[0][0], str(exc)) from None
    for one in tagged:  # which element: the same checks one by one, so the error names it
        _stacked([one], num_classes)
    raise AssertionError("a mini-batch failed that none of its elements fails")  # pragma: no cover


def batches_of(elements: list[Any], per_batch: int, num_classes: int, where: str = "") -> list[DataSet]:
    """Stack groups of `per_batch` tagged elements ((partition, position), element) into
    DataSets; features must be finite and labels valid. A bad element raises BadElementError naming
    its RDD partition and position (`where`: the round, for messages)."""
    return [_stacked(elements[i : i + per_batch], num_classes)[2] for i in range(0, len(elements), per_batch)]


def partition_error(partition: int, what: str, exc: BaseException) -> PartitionError:
    """The error the driver sees. A bad element is named by where it was in the user's RDD
    (partition, element), not by the partition kit's shuffle moved it to."""
    if isinstance(exc, BadElementError):
        (source, element), name = exc.source, "ValueError"
        return PartitionError(f"{MARK} {source} (element {element}, {what}): {name}: {exc}")
    return PartitionError(f"{MARK} {partition} ({what}): {type(exc).__name__}: {exc}")


# ---- cutting, counting and storing a partition's mini-batches ---------------------------


def count_examples(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, int, int]]:
    """The examples in a partition of tagged elements, each element's shape checked: (partition,
    examples, task attempt); where each partition's examples begin in the RDD's order."""
    try:
        n = 0
        for source, element in it:
            n += len(_pair(source, element)[0])
        yield partition, n, task_attempt()
    except Exception as exc:
        raise partition_error(partition, "prepare", exc) from exc


def _pair(source: tuple[int, int], element: Any) -> tuple[np.ndarray, np.ndarray]:
    try:
        return check_element(element, "element")
    except ValueError as exc:
        raise BadElementError(source, str(exc).removeprefix("element: ")) from None


def cut_task(per_batch: int, num_classes: int, offsets: list[int] | None) -> Any:
    """THE place mini-batches are cut: a partition's tagged elements as pieces of mini-batches,
    (b, (index of the piece's first example, features, labels)), example i of the RDD (counted
    from `offsets[partition]`; None: from 0 in each partition) in mini-batch i // per_batch.
    Every piece is checked as a mini-batch is (finite features, valid labels), naming the
    element it came from."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, tuple[int, np.ndarray, np.ndarray]]]:
        try:
            start = offsets[partition] if offsets is not None else 0
            yield from _cut(it, start, per_batch, num_classes)
        except Exception as exc:
            raise partition_error(partition, "prepare", exc) from exc

    return run


def _cut(it: Iterator[Any], i: int, per_batch: int, num_classes: int) -> Iterator[Any]:
    group: list[Any] = []  # tagged pieces of mini-batch i // per_batch, from example `first` on
    first = i
    for source, element in it:
        x, y = _pair(source, element)
        r = 0
        while r < len(x):
            take = min(len(x) - r, per_batch - i % per_batch)
            group.append((source, (x[r : r + take], y[r : r + take])))
            r, i = r + take, i + take
            if i % per_batch == 0:
                yield (i - 1) // per_batch, (first, *_stacked(group, num_classes)[:2])
                group, first = [], i
    if group:
        yield first // per_batch, (first, *_stacked(group, num_classes)[:2])


def join_pieces(it: Iterator[Any]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A worker's pieces (after the shuffle, in any order) as its mini-batches in order, the
    pieces of one mini-batch that began in different partitions concatenated."""
    pieces = sorted(it, key=lambda kv: (kv[0], kv[1][0]))
    for _, group in itertools.groupby(pieces, key=lambda kv: kv[0]):
        parts = [piece for _, piece in group]
        if len(parts) == 1:
            yield parts[0][1], parts[0][2]
        else:
            yield np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


def count_task(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, int, int, str, int]]:
    """A worker's mini-batches: (worker, examples, mini-batches, SHA-256 of them in order: the
    data's fingerprint a checkpoint keeps, task attempt)."""
    try:
        n = batches = 0
        hasher = hashlib.sha256()
        for batch in it:
            example_digest(hasher, batch)
            n, batches = n + len(batch[0]), batches + 1
        yield partition, n, batches, hasher.hexdigest(), task_attempt()
    except Exception as exc:
        raise partition_error(partition, "count", exc) from exc


def _rounds_of(it: Iterator[Any], per_round: int) -> Iterator[list[Any]]:
    return iter(lambda: list(itertools.islice(it, per_round)), [])


def round_records(per_round: int, stored_rounds: int) -> Any:
    """DIRECT: a worker's mini-batches as one record per round (worker * stored_rounds + round,
    [(features, labels), ...]), so that a round reads its own mini-batches and nothing else."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, list[Any]]]:
        try:
            for k, batches in enumerate(_rounds_of(it, per_round)):
                yield partition * stored_rounds + k, batches
        except Exception as exc:
            raise partition_error(partition, "cache", exc) from exc

    return run


def export_records(per_round: int, stored_rounds: int) -> Any:
    """EXPORT into Spark's storage: a worker's mini-batches of a round as one record
    (worker * stored_rounds + round, .npz bytes, no pickle)."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, bytes]]:
        try:
            for k, batches in enumerate(_rounds_of(it, per_round)):
                out = io.BytesIO()
                _save_npz(out, batches)
                yield partition * stored_rounds + k, out.getvalue()
        except Exception as exc:
            raise partition_error(partition, "export", exc) from exc

    return run


def export_task(directory: str, per_round: int) -> Any:
    """EXPORT to a directory: a worker's mini-batches of each round as one .npz file (no pickle).
    Yields (worker, round, path, examples so far, SHA-256 of them in order: count_task's at the
    end, task attempt)."""

    def run(partition: int, it: Iterator[Any]) -> Iterator[tuple[int, int, str, int, str, int]]:
        try:
            n, hasher = 0, hashlib.sha256()
            for k, batches in enumerate(_rounds_of(it, per_round)):
                for batch in batches:
                    example_digest(hasher, batch)
                    n += len(batch[0])
                path = os.path.join(directory, f"w{partition}_r{k}.npz")
                with atomic_write(path, "wb", what="export") as f:  # a retried attempt never tears a good file
                    _save_npz(f, batches)
                yield partition, k, path, n, hasher.hexdigest(), task_attempt()
        except Exception as exc:
            raise partition_error(partition, "export", exc) from exc

    return run


def _save_npz(target: Any, batches: list[tuple[np.ndarray, np.ndarray]]) -> None:
    arrays = {f"{name}{i}": a for i, (x, y) in enumerate(batches) for name, a in (("x", x), ("y", y))}
    np.savez(target, count=np.int64(len(batches)), **arrays)


def read_npz(source: str | bytes) -> list[tuple[np.ndarray, np.ndarray]]:
    """A round's mini-batches from an .npz file (a path) or its bytes (no pickle)."""
    with np.load(io.BytesIO(source) if isinstance(source, bytes) else source, allow_pickle=False) as f:
        return [(f[f"x{i}"], f[f"y{i}"]) for i in range(int(f["count"]))]


def row_to_pair(row: Any) -> tuple[np.ndarray, np.ndarray]:
    """A DataFrame row (features: array or ml Vector, label: a class number, or a one-hot array
    or Vector) as a one-example pair. The label keeps its value: the DataSet that batches it
    applies kit.labels' rule (1.9 was truncated to class 1 here), and a refusal names the row."""
    x, y = row[0], row[1]
    x = np.asarray(x.toArray() if hasattr(x, "toArray") else x)
    return x[None], np.asarray(y.toArray() if hasattr(y, "toArray") else y)[None]
