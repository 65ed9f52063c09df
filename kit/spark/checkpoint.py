"""Checkpoints of a Spark fit: the driver writes one every `checkpoint_every` rounds, and
`SparkNetwork.fit(..., resume=True)` goes on from the latest, bit for bit (a new driver after the
old one died: `SharedTrainingMaster(32, 5, checkpoint_every=10, checkpoint_directory=...)`).

A checkpoint is one model file of kit.nn.persistence (.npz without pickle, JSON header, SHA-256s),
`checkpoint-<round>.npz`, written to a temporary name and renamed. It holds everything the later
rounds depend on: parameters and updater state, the counters, where the fit stands, each
SharedTrainingMaster worker's residual, updater state and threshold, the configuration, the
master's settings and the data's fingerprint.

Where the data go needs no random state (example i to mini-batch i // batch_size_per_worker, that
to worker b % workers: kit.spark.masters), so the fingerprint (examples per worker, rounds, a
SHA-256 of every example in training order) fixes the order; resuming on other data or another
order is refused, saying what differs.

Directories: a plain path or `file://` URL, or any other URL through fsspec (the `spark` extra);
a checkpoint appears whole, and the two newest are kept. The directory and its files are
kit.spark.checkpoint_store's; what a checkpoint holds and the checks on resuming are here.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from kit.spark.checkpoint_store import (
    FORMAT,
    CheckpointError,
    CheckpointStore,
    from_tree,
    fsspec_for,
    is_remote,
    local_path,
    to_tree,
)

__all__ = ["CheckpointError", "CheckpointStore", "check_directory", "check_every", "data_fingerprint", "example_digest"]


# ---- arguments -------------------------------------------------------------------------


def check_every(owner: str, value: Any) -> int:
    """`checkpoint_every` as rounds (0: off)."""
    if value is None:
        return 0
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"{owner}(checkpoint_every={value!r}): rounds between two checkpoints, an integer >= 1 "
            "(None or 0: no checkpoints)"
        )
    return int(value)


def check_directory(owner: str, value: Any) -> str | None:
    """`checkpoint_directory` as a string: a path, a file:// URL, or a URL fsspec can open."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(
            f"{owner}(checkpoint_directory={value!r}): a directory path, a file:// URL, or a URL fsspec opens "
            "(s3://, gs://, hdfs://, ...)"
        )
    directory = os.fspath(value)
    if isinstance(directory, bytes):
        raise ValueError(f"{owner}(checkpoint_directory={value!r}): give the path as a str, not bytes")
    if is_remote(directory):
        fsspec = fsspec_for(f"{owner}(checkpoint_directory={directory!r})")
        protocol = directory.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as exc:
            raise ValueError(
                f"{owner}(checkpoint_directory={directory!r}): fsspec cannot open {protocol}:// URLs here "
                f"({exc}); install the package it names, or give a path every driver you resume from can see"
            ) from None
    elif os.path.exists(local_path(directory)) and not os.path.isdir(local_path(directory)):
        raise ValueError(
            f"{owner}(checkpoint_directory={directory!r}): that path is a file; give a directory (created if missing)"
        )
    return directory


# ---- the data's fingerprint ------------------------------------------------------------


def example_digest(hasher: Any, element: tuple[np.ndarray, np.ndarray]) -> None:
    """Add one (features, labels) element to a running SHA-256: dtypes, shapes and bytes."""
    for array in element:
        array = np.ascontiguousarray(array)
        hasher.update(f"{array.dtype.str}{array.shape}".encode())
        hasher.update(array.tobytes())


def data_fingerprint(
    per_batch: int, per_round: int, rounds: int, workers: int, digests: dict[int, tuple[int, str]]
) -> dict:
    """What the rounds of a fit are made of. `digests`: worker -> (examples, SHA-256 of its
    examples in order); a worker missing holds none."""
    ordered = [list(digests.get(w, (0, hashlib.sha256().hexdigest()))) for w in range(workers)]
    total = hashlib.sha256(json.dumps(ordered).encode()).hexdigest()
    return {
        "workers": len(ordered),
        "rounds": rounds,
        "examples_per_worker": [n for n, _ in ordered],
        "examples_per_batch": per_batch,
        "examples_per_round": per_round,
        "sha256": total,
    }


# ---- what a checkpoint holds, and checks on resuming ---------------------------------


def write(store: CheckpointStore, owner: Any, iteration: int, fingerprint: dict, position: dict[str, int]) -> str:
    """Checkpoint the fit between two rounds: `iteration` rounds done, `position` the next round
    (epoch, round of the epoch) and where the fit began (fit_start_epoch, fit_epochs)."""
    header, arrays, counters = snapshot(owner, iteration, fingerprint, position)
    return store.write(iteration, header, arrays, counters)


def snapshot(owner: Any, iteration: int, fingerprint: dict, position: dict[str, int]) -> tuple[dict, dict, dict]:
    """(header, arrays, counters) of the fit now, between two rounds."""
    net = owner.network
    with net.lock:
        arrays = {k: v.numpy().copy() for k, v in net.state_arrays().items()}
    workers = to_tree(owner.shared_worker_states, arrays, "workers")
    header = {
        "format": FORMAT,
        "network": json.loads(owner.config_json),
        "master": owner.training_master.training_settings(),
        "data": fingerprint,
        "position": position,
        "counters": {
            "iteration": iteration,
            "worker_iteration": owner.worker_iteration,
            "epoch": position["epoch"],
            "last_score": owner.last_score,
            "loss_scaler": None if net.loss_scaler is None else [float(v) for v in net.loss_scaler.state()],
        },
        "workers": workers,
    }
    return header, arrays, {"iteration": owner.worker_iteration, "epoch": position["epoch"]}


def _differences(saved: Any, given: Any, path: str = "") -> list[str]:
    if isinstance(saved, dict) and isinstance(given, dict):
        out = []
        for key in sorted(set(saved) | set(given), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in saved or key not in given:
                out.append(
                    f"{where}: {'absent' if key not in saved else saved[key]!r} in the checkpoint, "
                    f"{'absent' if key not in given else given[key]!r} here"
                )
            else:
                out.extend(_differences(saved[key], given[key], where))
        return out
    if isinstance(saved, list) and isinstance(given, list) and len(saved) == len(given):
        return [d for i, (a, b) in enumerate(zip(saved, given)) for d in _differences(a, b, f"{path}[{i}]")]
    return [] if saved == given else [f"{path}: {saved!r} in the checkpoint, {given!r} here"]


def check_matches(where: str, what: str, saved: Any, given: Any, remedy: str) -> None:
    diff = _differences(saved, given)
    if diff:
        shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
        raise CheckpointError(f"fit(resume=True): {where} was written for another {what} ({shown}). {remedy}")


def check_fresh(store: CheckpointStore, iteration: int) -> None:
    """A fit that does not resume must not write among a later run's checkpoints (the latest
    would then be another run's)."""
    later = [(n, name) for n, name in store.checkpoints() if n > iteration]
    if later:
        rounds, name = later[-1]
        raise CheckpointError(
            f"fit(): checkpoint_directory {store.directory!r} holds {store.where(name)}, written after "
            f"{rounds} rounds, beyond this network's {iteration}: continue that fit with "
            "fit(..., resume=True), or give this fit an empty directory"
        )


def load_for(store: CheckpointStore, owner: Any) -> tuple[str, dict, dict]:
    """The latest checkpoint, refused when the network or the master's settings differ."""
    where, header, arrays = store.latest()
    check_matches(
        where,
        "network",
        header["network"],
        json.loads(owner.config_json),
        "Resume with a network built from the checkpoint's configuration (the interrupted fit's layers, updater, "
        "dtype and seed), or train this one afresh with resume=False and another checkpoint_directory",
    )
    check_matches(
        where,
        "training master",
        header["master"],
        owner.training_master.training_settings(),
        "Resume with a training master of the interrupted fit's settings, or train afresh with resume=False",
    )
    return where, header, arrays


def check_data(where: str, header: dict, fingerprint: dict) -> None:
    check_matches(
        where,
        "data set",
        header["data"],
        fingerprint,
        "Resume on the interrupted fit's data: the same examples in the same order (the RDD's partitions and "
        "elements) and the same number of workers (a sha256 that differs alone: the examples or their order "
        "changed), or train afresh with resume=False",
    )


def restore(owner: Any, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Put the checkpoint's state into the SparkNetwork and its network (configuration checked)."""
    net, counters = owner.network, header["counters"]
    state = net.state_arrays()
    with net.lock:
        net.set_params(arrays["params"])
        for key, value in state.items():
            if key != "params":
                value.assign(arrays[key])
        if net.loss_scaler is not None and counters.get("loss_scaler") is not None:  # exact: powers of two, counts
            net.loss_scaler.load_state(counters["loss_scaler"])
        net.iteration, net.epoch = counters["worker_iteration"], counters["epoch"]
        net.last_score = counters["last_score"]
    owner.iteration, owner.worker_iteration = counters["iteration"], counters["worker_iteration"]
    owner.epoch, owner.last_score = counters["epoch"], counters["last_score"]
    owner.shared_worker_states = from_tree(header["workers"], arrays)
