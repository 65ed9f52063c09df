"""The user's elements on the executors, before any training: tagged with where they began,
checked, stacked into mini-batches, counted, and stored one record per round (DIRECT: in Spark's
cache; EXPORT: as .npz bytes or files). Every failure becomes a `PartitionError` naming the
partition, or, for a bad element, its place in the RDD the user gave. The tasks that train and
evaluate on them are in kit.spark.executor, which re-exports these.

A task is a plain function of (partition index, iterator of elements), so it also runs without Spark:

    >>> import numpy as np
    >>> from kit.spark.elements import count_task
    >>> pair = (np.zeros((1, 4), np.float32), np.array([1]))   # one element: (features, labels)
    >>> count = count_task(per_batch=2, num_classes=3)          # elements come tagged with where they began
    >>> [(partition, n) for partition, n, sha256 in count(0, iter([((3, 0), pair), ((3, 1), pair)]))]
    [(0, 2)]
    >>> list(count(0, iter([((3, 0), pair), ((3, 1), (np.zeros((1, 4)), np.array([1, 2])))])))
    Traceback (most recent call last):
    kit.spark.elements.PartitionError: [kit.spark] partition 3 (element 1, count): ValueError: features of shape ...
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
from kit.spark.checkpoint import example_digest

__all__ = [
    "MARK",
    "BadElementError",
    "PartitionError",
    "batches_of",
    "check_element",
    "count_task",
    "export_records",
    "export_task",
    "partition_error",
    "round_records",
    "row_to_pair",
    "single_examples",
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


def partition_error(partition: int, what: str, exc: BaseException) -> PartitionError:
    """The error the driver sees. A bad element is named by where it was in the user's RDD
    (partition, element), not by the partition kit's shuffle moved it to."""
    if isinstance(exc, BadElementError):
        (source, element), name = exc.source, "ValueError"
        return PartitionError(f"{MARK} {source} (element {element}, {what}): {name}: {exc}")
    return PartitionError(f"{MARK} {partition} ({what}): {type(exc).__name__}: {exc}")


# ---- counting, caching and exporting a partition --------------------------------------


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
            raise partition_error(partition, "count", exc) from exc

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
            raise partition_error(partition, "export", exc) from exc

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
            raise partition_error(partition, "cache", exc) from exc

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
            raise partition_error(partition, "export", exc) from exc

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
