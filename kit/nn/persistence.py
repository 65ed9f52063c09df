"""Model files: NumPy .npz (never pickle) + a JSON header, checked end to end, written atomically.

    >>> import numpy as np
    >>> from kit.nn.persistence import read_model, write_model
    >>> config = {"layers": [{"type": "Dense", "n_out": 3}]}  # Network.save writes its whole configuration
    >>> p, m = np.arange(6, dtype=np.float32), np.zeros(6, dtype=np.float32)
    >>> write_model("net.npz", config, {"params": p, "updater_m": m}, {"iteration": 10, "epoch": 1})
    >>> config, arrays, counters = read_model("net.npz")     # ModelFileError on any mismatch
    >>> arrays["params"], counters
    (array([0., 1., 2., 3., 4., 5.], dtype=float32), {'iteration': 10, 'epoch': 1})

The header holds the configuration, the counters and a SHA-256 per array, and one more SHA-256
over all of that (`integrity`): editing the configuration inside a file (an activation, `l2`, the
updater, the dtype) is detected like a flipped bit in the parameters. It is an integrity check,
not a signature: someone who edits a file on purpose can recompute the sums, so load files you
trust (they hold no code: NumPy arrays without pickle and JSON). A write goes to a
temporary file in the same directory, is fsync'ed, then renamed over the target, so an
interrupted save leaves the previous file whole. `Network.save` / `Network.load` use this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any

import numpy as np

__all__ = ["ModelFileError", "read_model", "write_model"]


class ModelFileError(ValueError):
    """A saved model file that is corrupted, tampered with, or does not match."""


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _integrity(config: Any, counters: dict[str, Any], digests: dict[str, str]) -> str:
    text = json.dumps({"config": config, "counters": counters, "sha256": digests}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def write_model(path: str | os.PathLike, config: dict[str, Any], arrays: dict[str, np.ndarray], counters: dict) -> None:
    """Write arrays + header atomically. `arrays` must be consistent already (a snapshot)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"save({path!r}): the directory {folder!r} does not exist; create it first")
    if os.path.isdir(path):  # before anything is written: the error names the target, not a temporary file
        raise IsADirectoryError(
            f"save({path!r}): that path is a directory; give a file name inside it, e.g. "
            f"{os.path.join(path, 'model.npz')!r}"
        )
    digests = {k: _digest(v) for k, v in arrays.items()}
    meta = {
        "config": config,
        "iteration": counters["iteration"],
        "epoch": counters["epoch"],
        "sha256": digests,
        "integrity": _integrity(config, counters, digests),
    }
    payload = dict(arrays)
    payload["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_model(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, int]]:
    """(config, arrays, counters) from a file written by `write_model`, all checked."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise ModelFileError(f"{path}: not a readable kit model file ({type(exc).__name__}: {exc})") from None
    if "meta" not in arrays or "params" not in arrays:
        raise ModelFileError(f"{path}: missing 'meta' or 'params'; not a kit model file")
    try:
        meta = json.loads(arrays.pop("meta").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path}: the header is corrupted ({exc})") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path}: the header is a {type(meta).__name__}, expected a JSON object")
    config = _field(path, meta, "config", dict)
    digests = _field(path, meta, "sha256", dict)
    counters = {name: _field(path, meta, name, int) for name in ("iteration", "epoch")}
    for name, value in counters.items():
        if value < 0:
            raise ModelFileError(f"{path}: field {name!r} is {value}, expected a whole number >= 0")
    if _integrity(config, counters, digests) != _field(path, meta, "integrity", str):
        raise ModelFileError(
            f"{path}: the header (configuration, counters or checksums) does not match its SHA-256: "
            "the file was edited or corrupted"
        )
    if sorted(digests) != sorted(arrays):
        raise ModelFileError(f"{path}: arrays {sorted(arrays)} but checksums for {sorted(digests)}")
    for key, value in arrays.items():
        if digests[key] != _digest(value):
            raise ModelFileError(f"{path}: array {key!r} does not match its SHA-256: the file was modified or damaged")
    return config, arrays, counters


def _field(path: str, meta: dict[str, Any], name: str, kind: type) -> Any:
    if name not in meta:
        raise ModelFileError(f"{path}: the header has no field {name!r}; not a complete kit model file")
    value = meta[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ModelFileError(
            f"{path}: field {name!r} is {type(value).__name__} {value!r:.60}, expected {kind.__name__}"
        )
    return value
