"""Every file kit writes (model files, Spark checkpoints and stats, benchmark JSON, memory traces)
goes through `atomic_write`: written to a temporary file beside its target, flushed to disk,
then renamed over it, so a failed or interrupted write leaves the previous file whole.

    >>> import os, tempfile
    >>> from kit.files import atomic_write
    >>> folder = tempfile.mkdtemp()
    >>> with atomic_write(os.path.join(folder, "notes.txt")) as f:
    ...     _ = f.write("kept")
    >>> open(os.path.join(folder, "notes.txt")).read()
    'kept'

A symbolic link is written through (the link stays a link); permissions are what `open` gives (a
new file's from the umask, an existing file keeps its own). A target that is a directory, in a
missing directory, write-protected or not a regular file (a device, a pipe) is refused before
anything is written, naming the path and the remedy; an error while writing names the target.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TypeAlias

__all__ = ["Json", "atomic_write", "write_target"]

# a value as json.load reads it back: what kit's reports and result files are made of
Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"


def write_target(path: str | os.PathLike[str], what: str = "write") -> Path:
    """The file a write to `path` must replace: the path itself, or where its symbolic link points;
    checked to be a file name in a directory that exists. `what` names the call in errors."""
    given = Path(path)
    target = Path(os.path.realpath(given)) if given.is_symlink() else given
    if os.fspath(path).endswith(("/", os.sep)) and not target.is_dir():
        raise NotADirectoryError(
            f"{what}({os.fspath(path)!r}): a path ending in {os.sep!r} names a directory; give the file's name "
            f"without it, e.g. {os.fspath(path).rstrip('/' + os.sep)!r}"
        )
    if given.exists() and not given.is_dir() and not given.is_file():  # stat through the link: /dev/stdout's pipe
        raise FileExistsError(
            f"{what}({os.fspath(path)!r}): {str(target)!r} is not a regular file (a device, a pipe or a socket), "
            "and replacing it would lose it; give the name of a file"
        )
    if target.is_file() and not os.access(target, os.W_OK):
        raise PermissionError(
            f"{what}({os.fspath(path)!r}): {str(target)!r} is write-protected, as open() would find it; make it "
            f"writable (chmod u+w {target}) or write another file"
        )
    if target.is_dir():
        raise IsADirectoryError(
            f"{what}({os.fspath(path)!r}): that path is a directory; give a file name inside it, e.g. "
            f"{os.path.join(os.fspath(path), 'model.npz')!r}"
        )
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{what}({os.fspath(path)!r}): the directory {str(folder)!r} does not exist; create it first "
            f"(mkdir -p {folder}) or write the file somewhere that exists"
        )
    return target


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask sets it to read it)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", what: str = "write", **open_kw: str | int | None
) -> Iterator[IO]:
    """A file object to write `path`'s new contents to; they replace the old ones only when the
    block ends without an exception (then flushed, fsync'ed and renamed into place)."""
    target = write_target(path, what)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _named(exc, path, what) from None
    try:
        # mkstemp makes 0600; a file kit writes gets what open() would give: an existing file keeps its mode
        os.chmod(tmp, (target.stat().st_mode & 0o7777) if target.is_file() else 0o666 & ~_umask())
        with os.fdopen(fd, mode, **open_kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (tmp, None):  # name the file written, not the temporary
            raise _named(exc, path, what) from None
        raise


def _named(exc: OSError, path: str | os.PathLike[str], what: str) -> OSError:
    """`exc` again, naming the file kit was writing (the OS names the hidden temporary beside it, or nothing)."""
    return type(exc)(exc.errno, f"{what}({os.fspath(path)!r}): {exc.strerror or exc}; nothing was changed")
