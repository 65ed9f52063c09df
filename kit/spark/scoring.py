"""Distributed inference: a network's outputs computed on the executors, per partition, in batches
(DL4J's SparkDl4jMultiLayer.feedForwardWithKey, and output/predict over an RDD of features).

    >>> import numpy as np
    >>> from kit.spark.scoring import outputs_in_batches
    >>> from kit.nn import mlp
    >>> net = mlp(3, hidden=(4,), n_out=2, seed=0)
    >>> elements = [("a", np.ones(3)), ("b", np.zeros((2, 3)))]      # one example, or a batch of two
    >>> [(key, out.shape) for key, out in outputs_in_batches(net, iter(elements), batch_size=2, keyed=True)]
    [('a', (2,)), ('b', (2, 2))]

An element is one example (output (C,)) or a batch of n (output (n, C)); elements are stacked into
batches of `batch_size` examples and the outputs cut back per element, in order, with their keys.
`Scoring` is SparkNetwork's mixin that runs these; kit.spark.ml scores DataFrames with `outputs_of_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kit.nn.network import Network
from kit.spark.elements import partition_error
from kit.spark.executor import network_for
from kit.spark.spark_evaluation import DEFAULT_EVAL_BATCH_SIZE, check_batch_size

__all__ = ["Scoring", "outputs_in_batches", "outputs_of_rows"]


def _examples(net: Network, x: Any, position: int) -> tuple[np.ndarray, bool]:
    """(examples [n, *input_shape], whether the element was one example)."""
    x = np.asarray(x)
    if x.shape == net.input_shape:
        return x[None], True
    if x.shape[1:] == net.input_shape:
        return x, False
    raise ValueError(
        f"element {position}: features of shape {x.shape}; the network takes one example of shape "
        f"{net.input_shape} or a batch of shape (n, {', '.join(map(str, net.input_shape))})"
    )


def outputs_of_rows(net: Network, x: np.ndarray, batch_size: int) -> np.ndarray:
    """The network's output for x [n, ...], `batch_size` examples at a time: (n, *output_shape)."""
    if len(x) == 0:
        return np.zeros((0, *net.output_shape), np.dtype(net.dtype))
    return np.concatenate([net.output(x[i : i + batch_size]).numpy() for i in range(0, len(x), batch_size)])


def _flush(net: Network, pending: list[tuple[Any, np.ndarray, bool]], batch_size: int) -> Iterator[tuple[Any, Any]]:
    out = outputs_of_rows(net, np.concatenate([x for _, x, _ in pending]), batch_size)
    start = 0
    for key, x, single in pending:
        part = out[start : start + len(x)]
        start += len(x)
        yield key, (part[0].copy() if single else part.copy())


def outputs_in_batches(net: Network, it: Iterator[Any], batch_size: int, keyed: bool) -> Iterator[Any]:
    """Per element (with its key when `keyed`: (key, features) pairs), the network's output, the
    examples of consecutive elements run `batch_size` at a time."""
    pending: list[tuple[Any, np.ndarray, bool]] = []
    count = 0
    for position, element in enumerate(it):
        if keyed:
            if not isinstance(element, (tuple, list)) or len(element) != 2:
                raise ValueError(
                    f"element {position}: a {type(element).__name__}; feed_forward_with_key needs (key, features) pairs"
                )
            key, features = element
        else:
            key, features = None, element
        x, single = _examples(net, features, position)
        pending.append((key, x, single))
        count += len(x)
        if count >= batch_size:
            yield from (pair if keyed else pair[1] for pair in _flush(net, pending, batch_size))
            pending, count = [], 0
    if pending:
        yield from (pair if keyed else pair[1] for pair in _flush(net, pending, batch_size))


def _score_task(config_json: str, params_bc: Any, batch_size: int, keyed: bool, what: str) -> Any:
    def run(partition: int, it: Iterator[Any]) -> Iterator[Any]:
        try:
            net = network_for(config_json, None)
            net.set_params(params_bc.value)
            yield from outputs_in_batches(net, it, batch_size, keyed)
        except Exception as exc:
            raise partition_error(partition, what, exc) from exc

    return run


class Scoring:
    """SparkNetwork's inference: feed_forward_with_key, output, predict. Each returns an RDD
    (lazy, as Spark's transformations are) computed with the network's parameters at the call,
    sent once to the executors as a broadcast."""

    def _scored(self, rdd: Any, batch_size: int, keyed: bool, call: str) -> Any:
        check_batch_size(batch_size, call)
        if not hasattr(rdd, "mapPartitionsWithIndex"):
            wanted = "(key, features) pairs" if keyed else "features"
            raise TypeError(
                f"SparkNetwork.{call} needs an RDD of {wanted}, got {type(rdd).__name__}; for a DataFrame use "
                "kit.spark.NetworkClassificationModel's transform"
            )
        params = self.sc.broadcast(self.network.params().numpy())  # held by the RDD's function: alive with it
        return rdd.mapPartitionsWithIndex(_score_task(self.config_json, params, batch_size, keyed, call), True)

    def feed_forward_with_key(self, rdd: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> Any:
        """An RDD of (key, output) from an RDD of (key, features) (DL4J's feedForwardWithKey): the
        keys, partitions and order kept; each partition's examples run `batch_size` at a time."""
        return self._scored(rdd, batch_size, True, "feed_forward_with_key")

    def output(self, rdd: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> Any:
        """An RDD of outputs (probabilities for softmax cross-entropy) from an RDD of features, element by element."""
        return self._scored(rdd, batch_size, False, "output")

    def predict(self, rdd: Any, batch_size: int = DEFAULT_EVAL_BATCH_SIZE) -> Any:
        """An RDD of class indices (argmax of the output): an int per one-example element, an (n,) array per batch."""
        return self._scored(rdd, batch_size, False, "predict").map(_argmax)


def _argmax(out: np.ndarray) -> Any:
    return int(out.argmax()) if out.ndim == 1 else out.argmax(axis=-1)
