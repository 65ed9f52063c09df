"""Where a SharedTrainingMaster worker keeps its own state between rounds: on the executor.

    >>> import numpy as np, tempfile
    >>> from kit.spark.wire import SharedWorkerState
    >>> from kit.spark.worker_store import load, save
    >>> where = tempfile.mkdtemp()
    >>> save(where, "fit-1", 0, SharedWorkerState(np.ones(3, np.float32), tau=1e-3, rounds=4))
    >>> load(where, "fit-1", 0, 4).tau, load(where, "fit-1", 0, 3), load(where, "fit-1", 1, 4)
    (0.001, None, None)

A worker's residual and updater state are three arrays the size of the parameters: sent to the
driver and back every round they would outweigh the messages. The round's task finds them here, in
the executor's per-application files directory, saved under the number of rounds the worker has
done, so a retried task starts from exactly what the failed one did and a stale copy is never taken
for a current one. A task whose executor lacks the file goes on from the driver's copy (refreshed
at each epoch's end, at checkpoints and on a worker's first round); the stats say which
(`state_from`). Files are NumPy .npz (no pickle), written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import zipfile

import numpy as np

from kit.files import atomic_write
from kit.spark.wire import SharedWorkerState

__all__ = ["executor_directory", "load", "save"]


def executor_directory() -> str:
    """This executor's directory for the application's files (Spark removes it with the
    application); outside a Spark task, the system's temporary directory."""
    try:
        from pyspark import SparkFiles

        root = SparkFiles._root_directory  # set in every Python worker Spark starts
    except ImportError:  # pragma: no cover - executors have PySpark
        root = None
    return root or tempfile.gettempdir()


def _path(directory: str, token: str, worker: int, rounds: int) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", token):
        raise ValueError(f"worker_store: a token of letters, digits, '_', '.' and '-', got {token!r}")
    return os.path.join(directory, "kit-shared-workers", token, f"worker{worker}-round{rounds}.npz")


def save(directory: str, token: str, worker: int, state: SharedWorkerState) -> None:
    """Keep `state` (after its `rounds` rounds) on this executor; older files of the worker but
    the previous round's (a retried round starts from it) are removed."""
    path = _path(directory, token, worker, state.rounds)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = {"tau": state.tau, "last_dense": state.last_dense, "last_sparsity": state.last_sparsity}
    meta.update(rounds=state.rounds, scaler=None if state.scaler is None else list(state.scaler))
    arrays = {"residual": state.residual, **{f"u_{k}": v for k, v in state.updater.items()}}
    text = json.dumps(meta, default=float)  # before the file opens: a value JSON cannot hold leaves nothing behind
    with atomic_write(path, "wb", what="worker_store.save") as f:  # a reader sees the whole file or none
        np.savez(f, meta=np.array(text), **arrays)
    for old in range(state.rounds - 2, -1, -1):
        stale = _path(directory, token, worker, old)
        if not os.path.exists(stale):
            break
        with contextlib.suppress(OSError):
            os.remove(stale)


def load(directory: str, token: str, worker: int, rounds: int) -> SharedWorkerState | None:
    """The worker's state after `rounds` rounds, if this executor holds it; else None."""
    path = _path(directory, token, worker, rounds)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            updater = {k[2:]: z[k] for k in z.files if k.startswith("u_")}
            residual = z["residual"]
    except (
        OSError,
        KeyError,
        ValueError,
        EOFError,
        zipfile.BadZipFile,
    ):  # not here (or not whole): the driver's copy is used
        return None
    scaler = None if meta["scaler"] is None else tuple(meta["scaler"])
    return SharedWorkerState(
        residual, meta["tau"], meta["last_dense"], meta["last_sparsity"], meta["rounds"], updater, scaler
    )
