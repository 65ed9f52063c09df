"""Model files: NumPy .npz (never pickle) + a JSON header, checked end to end, written atomically.

    >>> import numpy as np
    >>> from kit.nn.persistence import read_model, write_model
    >>> config = {"layers": [{"type": "Dense", "n_out": 3}]}  # Network.save writes its whole configuration
    >>> p, m = np.arange(6, dtype=np.float32), np.zeros(6, dtype=np.float32)
    >>> write_model("net.npz", config, {"params": p, "updater_m": m}, {"iteration": 10, "epoch": 1})
    >>> config, arrays, counters = read_model("net.npz")     # ModelFileError on any mismatch
    >>> arrays["params"], counters
    (array([0., 1., 2., 3., 4., 5.], dtype=float32), {'iteration': 10, 'epoch': 1})

The header holds the configuration, the counters, a SHA-256 per array (over its dtype and shape as
well as its bytes) and one more over all of that (`integrity`): an edited configuration is detected
like a flipped bit in the parameters. It is an integrity check, not a signature: load files you
trust (they hold no code). Writes are atomic (kit.files). `Network.save` / `Network.load` use this.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from kit.files import atomic_write

__all__ = ["ModelFileError", "read_model", "write_model"]


class ModelFileError(ValueError):
    """A saved model file that is corrupted, tampered with, or does not match."""


FORMAT = 2  # 2: each array's checksum covers its dtype and shape too (1: its bytes only)


def _digest(array: np.ndarray, fmt: int = FORMAT) -> str:
    """The SHA-256 of everything that decides an array's values: its bytes, and (format 2) its
    dtype and shape, so the same bytes read as another type or shape do not pass."""
    h = hashlib.sha256()
    if fmt >= 2:
        h.update(f"{array.dtype.str}{tuple(array.shape)}|".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def _integrity(config: Any, counters: dict[str, Any], digests: dict[str, str]) -> str:
    text = json.dumps({"config": config, "counters": counters, "sha256": digests}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def write_model(path: str | os.PathLike, config: dict[str, Any], arrays: dict[str, np.ndarray], counters: dict) -> None:
    """Write arrays + header atomically (kit.files.atomic_write: through a symbolic link, the previous
    file whole if the write fails). `arrays` must be consistent already (a snapshot)."""
    digests = {k: _digest(v) for k, v in arrays.items()}
    meta = {
        "format": FORMAT,
        "config": config,
        "iteration": counters["iteration"],
        "epoch": counters["epoch"],
        "sha256": digests,
        "integrity": _integrity(config, counters, digests),
    }
    payload = dict(arrays)
    payload["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with atomic_write(path, "wb", what="save") as f:  # the errors name the target, never the temporary file
        np.savez(f, **payload)


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
    fmt = meta.get("format", 1)  # files written before format 2 checked each array's bytes only
    if fmt not in (1, FORMAT):
        raise ModelFileError(f"{path}: model file format {fmt!r}; this kit reads formats 1 and {FORMAT}")
    for key, value in arrays.items():
        if digests[key] != _digest(value, fmt):
            raise ModelFileError(
                f"{path}: array {key!r} ({value.dtype}, shape {value.shape}) does not match its SHA-256: its "
                "values, type or shape were modified or damaged"
            )
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
