"""Where Spark checkpoints live: one directory (a path, a file:// URL, or any URL fsspec opens),
its checkpoint files (`checkpoint-<round>.npz`, kit.nn.persistence's format, written to a temporary
name and moved), the two newest kept, every read checked (arrays, dtypes, shapes, the header's
hash); and worker states as JSON plus arrays, without pickle. kit.spark.checkpoint decides what a
checkpoint holds and checks a resume against it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from typing import Any

import numpy as np

from kit.nn.persistence import ModelFileError, read_model, write_model
from kit.settings import install_hint

__all__ = [
    "FORMAT",
    "KEEP",
    "CheckpointError",
    "CheckpointStore",
    "from_tree",
    "fsspec_for",
    "is_remote",
    "local_path",
    "to_tree",
]

FORMAT = "kit.spark.checkpoint/1"
KEEP = 2  # checkpoints kept: the newest, and the one before it if the newest is damaged
_NAME = re.compile(r"^checkpoint-(\d+)\.npz$")


class CheckpointError(ValueError):
    """No checkpoint to resume from, a damaged one, or one of another network or data set."""


def is_remote(directory: str) -> bool:
    return "://" in directory and not directory.startswith("file://")


def local_path(directory: str) -> str:
    return directory[len("file://") :] if directory.startswith("file://") else directory


def fsspec_for(where: str) -> Any:
    try:  # optional (the spark extra): imported when a URL needs it
        import fsspec
    except ImportError:
        raise ValueError(
            f"{where}: URLs other than file:// are opened through fsspec, which is not installed: "
            f"{install_hint('spark')} (or pip install fsspec), or give a local path or a file:// URL"
        ) from None
    return fsspec


def to_tree(value: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
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
            items.append([k, to_tree(v, arrays, f"{path}.{k}")])
        return {"__dict__": items}
    if isinstance(value, (list, tuple)):
        return {"__list__": [to_tree(v, arrays, f"{path}.{i}") for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"checkpoint: {path} is a {type(value).__name__}, which kit does not write (no pickle)")


def from_tree(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, dict):
        if "__array__" in tree:
            return arrays[tree["__array__"]]
        if "__scalar__" in tree:
            return arrays[tree["__scalar__"]][()]
        if "__dict__" in tree:
            return {k: from_tree(v, arrays) for k, v in tree["__dict__"]}
        if "__list__" in tree:
            return [from_tree(v, arrays) for v in tree["__list__"]]
    return tree


class CheckpointStore:
    """The checkpoints in one directory (local, file://, or any fsspec URL)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        if is_remote(directory):
            fsspec = fsspec_for(f"checkpoint_directory={directory!r}")
            self.fs, self.root = fsspec.core.url_to_fs(directory)
        else:
            self.fs, self.root = None, local_path(directory)

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
