"""Checkpoints of a Spark fit: the driver writes one every `checkpoint_every` rounds, and
`SparkNetwork.fit(..., resume=True)` goes on from the latest, bit for bit.

Usage (needs Spark, so not run as a doctest; `sc`, `net` and `rdd` as in kit.spark.network):

    tm = SharedTrainingMaster(32, 5, checkpoint_every=10, checkpoint_directory="/mnt/ckpt")
    SparkNetwork(sc, net, tm).fit(rdd, epochs=5)          # the driver dies in epoch 3 ...
    SparkNetwork(sc, fresh_net, tm).fit(rdd, epochs=5, resume=True)  # ... a new driver finishes it

A checkpoint is one model file of kit.nn.persistence (NumPy .npz without pickle, a JSON header,
a SHA-256 per array and one over the header), named `checkpoint-<round>.npz` after the loop's
round counter (SparkNetwork.iteration), written to a temporary name and renamed. It holds
everything the rounds after it depend on: the network's parameters and updater state, the
counters (rounds, updater steps, epoch), where the fit stands (epoch, next round of the epoch,
the epoch the fit began at and how many it was asked for), SharedTrainingMaster's state of every
worker (residual, updater state, threshold, as its own arrays and numbers), the network's
configuration, the master's training settings and the data's fingerprint. The header also
records each array's dtype and shape, so the integrity hash covers them.

Where the data go needs no random state: example i of the RDD goes to mini-batch
i // batch_size_per_worker and that to worker b % workers, in order (kit.spark.masters), so the
fingerprint (examples per worker, rounds, and a SHA-256 of every example's bytes, dtype and
shape in the order each worker trains on them) is what fixes the order; resuming on other data
or another order is refused, saying what differs.

Directories: a plain path or a `file://` URL (created when missing), or any other URL through
fsspec (`pip install "gpu-workspaces-kit[spark]"`): a checkpoint is written to a local temporary file, put
next to its final name and moved there (an object store's move is a copy, but the object
appears whole). The two newest checkpoints are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from typing import Any

import numpy as np

from kit.nn.persistence import ModelFileError, read_model, write_model
from kit.settings import install_hint

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "check_directory",
    "check_every",
    "data_fingerprint",
    "example_digest",
]

FORMAT = "kit.spark.checkpoint/1"
KEEP = 2  # checkpoints kept: the newest, and the one before it if the newest is damaged
_NAME = re.compile(r"^checkpoint-(\d+)\.npz$")


class CheckpointError(ValueError):
    """No checkpoint to resume from, a damaged one, or one of another network or data set."""


# ---- arguments -------------------------------------------------------------------------


def check_every(owner: str, value: Any) -> int:
    """`checkpoint_every` as rounds (0: off)."""
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"{owner}(checkpoint_every={value!r}): rounds between two checkpoints, an integer >= 1 "
            "(None or 0: no checkpoints)"
        )
    return value


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
    if _is_remote(directory):
        fsspec = _fsspec(f"{owner}(checkpoint_directory={directory!r})")
        protocol = directory.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as exc:
            raise ValueError(
                f"{owner}(checkpoint_directory={directory!r}): fsspec cannot open {protocol}:// URLs here "
                f"({exc}); install the package it names, or give a path every driver you resume from can see"
            ) from None
    elif os.path.exists(_local(directory)) and not os.path.isdir(_local(directory)):
        raise ValueError(
            f"{owner}(checkpoint_directory={directory!r}): that path is a file; give a directory (created if missing)"
        )
    return directory


def _is_remote(directory: str) -> bool:
    return "://" in directory and not directory.startswith("file://")


def _local(directory: str) -> str:
    return directory[len("file://") :] if directory.startswith("file://") else directory


def _fsspec(where: str) -> Any:
    try:  # optional (the spark extra): imported when a URL needs it
        import fsspec
    except ImportError:
        raise ValueError(
            f"{where}: URLs other than file:// are opened through fsspec, which is not installed: "
            f"{install_hint('spark')} (or pip install fsspec), or give a local path or a file:// URL"
        ) from None
    return fsspec


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


# ---- worker states as JSON + arrays ----------------------------------------------------


def _to_tree(value: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
    """A value of dicts, lists, numbers, strings, None and NumPy arrays or scalars as JSON, its
    arrays (and NumPy scalars, whose dtype matters to the arithmetic) moved into `arrays`."""
    if isinstance(value, np.ndarray):
        arrays[path] = value
        return {"__array__": path}
    if isinstance(value, np.generic):
        arrays[path] = np.asarray(value)
        return {"__scalar__": path}
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"checkpoint: a key {k!r} of {path} is neither a string nor an integer")
            items.append([k, _to_tree(v, arrays, f"{path}.{k}")])
        return {"__dict__": items}
    if isinstance(value, (list, tuple)):
        return {"__list__": [_to_tree(v, arrays, f"{path}.{i}") for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"checkpoint: {path} is a {type(value).__name__}, which kit does not write (no pickle)")


def _from_tree(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, dict):
        if "__array__" in tree:
            return arrays[tree["__array__"]]
        if "__scalar__" in tree:
            return arrays[tree["__scalar__"]][()]
        if "__dict__" in tree:
            return {k: _from_tree(v, arrays) for k, v in tree["__dict__"]}
        if "__list__" in tree:
            return [_from_tree(v, arrays) for v in tree["__list__"]]
    return tree


# ---- the store -------------------------------------------------------------------------


class CheckpointStore:
    """The checkpoints in one directory (local, file://, or any fsspec URL)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        if _is_remote(directory):
            fsspec = _fsspec(f"checkpoint_directory={directory!r}")
            self.fs, self.root = fsspec.core.url_to_fs(directory)
        else:
            self.fs, self.root = None, _local(directory)

    def _join(self, name: str) -> str:
        return os.path.join(self.root, name) if self.fs is None else f"{self.root.rstrip('/')}/{name}"

    def where(self, name: str) -> str:
        """A checkpoint's name as the user gave the directory (path or URL)."""
        return f"{self.directory.rstrip('/')}/{name}"

    def checkpoints(self) -> list[tuple[int, str]]:
        """(round, file name) of every complete checkpoint, oldest first (temporary files skipped)."""
        if self.fs is None:
            names = os.listdir(self.root) if os.path.isdir(self.root) else []
        else:
            try:
                names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]
            except FileNotFoundError:
                names = []
        found = [(int(m.group(1)), name) for name in names if (m := _NAME.match(name))]
        return sorted(found)

    def write(self, iteration: int, header: dict[str, Any], arrays: dict[str, np.ndarray], counters: dict) -> str:
        """Write one checkpoint atomically (temporary name, then rename); keep the newest KEEP."""
        name = f"checkpoint-{iteration:09d}.npz"
        header = {**header, "arrays": {k: [v.dtype.str, list(v.shape)] for k, v in arrays.items()}}
        if self.fs is None:
            os.makedirs(self.root, exist_ok=True)
            write_model(self._join(name), header, arrays, counters)  # temporary file, fsync, os.replace
        else:
            self.fs.makedirs(self.root, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="kit-checkpoint-") as local:
                path = os.path.join(local, name)
                write_model(path, header, arrays, counters)
                partial = self._join(f"{name}.tmp-{os.getpid()}")
                self.fs.put_file(path, partial)
                self.fs.mv(partial, self._join(name))
        for _, old in self.checkpoints()[:-KEEP]:
            with contextlib.suppress(OSError):
                if self.fs is None:
                    os.remove(self._join(old))
                else:
                    self.fs.rm(self._join(old))
        return self.where(name)

    def read(self, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, int]]:
        """One checkpoint, every checksum, dtype and shape checked; CheckpointError says which file."""
        where = self.where(name)
        try:
            if self.fs is None:
                header, arrays, counters = read_model(self._join(name))
            else:
                with tempfile.TemporaryDirectory(prefix="kit-checkpoint-") as local:
                    path = os.path.join(local, name)
                    self.fs.get_file(self._join(name), path)
                    header, arrays, counters = read_model(path)
        except ModelFileError as exc:
            reason = str(exc).split(": ", 1)[-1]
            raise CheckpointError(f"checkpoint {where} is damaged: {reason}. {self._older(name)}") from None
        if header.get("format") != FORMAT:
            raise CheckpointError(f"{where}: not a kit.spark checkpoint (a Network.save file?)")
        for key, (dtype, shape) in header["arrays"].items():
            got = arrays.get(key)
            if got is None or got.dtype.str != dtype or list(got.shape) != shape:
                have = "missing" if got is None else f"{got.dtype.str} {list(got.shape)}"
                raise CheckpointError(
                    f"checkpoint {where} is damaged: array {key!r} is {have}, its header says {dtype} {shape}. "
                    f"{self._older(name)}"
                )
        return header, arrays, counters

    def _older(self, name: str) -> str:
        older = [n for _, n in self.checkpoints() if n < name]
        if older:
            return f"Delete it to resume from the one before ({self.where(older[-1])})"
        return "There is no older checkpoint: delete it and train with resume=False"

    def latest(self) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
        found = self.checkpoints()
        if not found:
            raise CheckpointError(
                f"fit(resume=True): no checkpoint in {self.directory!r} (files named checkpoint-<round>.npz); "
                "train with resume=False first, with the master's checkpoint_every set, or point "
                "checkpoint_directory at the directory the interrupted fit wrote to"
            )
        name = found[-1][1]
        header, arrays, _ = self.read(name)
        return self.where(name), header, arrays


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
    workers = _to_tree(owner.shared_worker_states, arrays, "workers")
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
    owner.shared_worker_states = _from_tree(header["workers"], arrays)
