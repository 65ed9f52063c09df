"""One build from the checkout at a time: `python -m build` on the repository writes its egg-info and
build/ there, and CI's two test processes (pytest-xdist) may run the wheel's and the sdist's files at
once. An advisory lock on a file under build/ (ignored by git) keeps the two builds apart."""

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def repo_build_lock() -> Iterator[None]:
    """Held while a test builds from the repository; released when the block ends, or the process does."""
    lock = REPO / "build" / ".tests-build.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
