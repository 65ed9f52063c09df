"""Run chapters top to bottom in full mode and store them as a reader opens them.

    python scripts/store_chapters.py notebooks/02_workspaces.ipynb [more chapters ...]

Each chapter runs in a fresh kernel from the notebooks/ directory (KIT_QUICK unset: full mode),
then is stored so that opening it in JupyterLab changes nothing: the kernelspec names the
installed python3 kernel by its own display name, and no widget state is kept (the panels store
their final state as static output; the live widgets' model state is of no use to a reader and
was 115 KB in three chapters). A chapter that fails is left as it was and the script exits 1.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from datetime import datetime
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient


def kernel_display_name() -> str:
    return KernelSpecManager().get_kernel_spec("python3").display_name


def run_seconds(execution: dict) -> float | None:
    """How long a cell ran, from nbclient's timestamps (input received to reply sent), to 0.1 s."""
    start, end = execution.get("iopub.execute_input"), execution.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(end) - parse(start)).total_seconds(), 1)


def normalise(nb: nbformat.NotebookNode, display_name: str) -> None:
    """What a reader's JupyterLab would change on open, changed already: the kernelspec's display
    name, no widget state, no execution timestamps (each code cell keeps only how long it ran, in
    `metadata.kit.run_s`, which tests/chapters/test_chapter_progress.py reads), and an id on every cell
    (nbformat 4.5; a cell inserted by a script may have none, and JupyterLab would add one)."""
    nb.metadata["kernelspec"] = {"display_name": display_name, "language": "python", "name": "python3"}
    nb.metadata.pop("widgets", None)
    seen = set()
    for cell in nb.cells:
        seconds = run_seconds(cell.metadata.pop("execution", None) or {})
        if seconds is not None:
            cell.metadata["kit"] = {"run_s": seconds}
        if not cell.get("id") or cell["id"] in seen:
            cell["id"] = uuid.uuid4().hex[:8]
        seen.add(cell["id"])
    nb.nbformat, nb.nbformat_minor = 4, max(nb.nbformat_minor, 5)


def store(path: Path, timeout: int = 1800) -> None:
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "KIT_QUICK"}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    normalise(nb, kernel_display_name())
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".ipynb")
    os.close(fd)
    nbformat.write(nb, tmp)
    os.replace(tmp, path)  # atomic: a failed run above never reaches here


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    failed = []
    for name in argv:
        path = Path(name)
        print(f"running {path} ...", flush=True)
        try:
            store(path)
        except Exception as exc:  # report every chapter, then fail
            failed.append(f"{path}: {type(exc).__name__}: {str(exc)[:500]}")
            print(f"FAILED {path}", flush=True)
        else:
            print(f"stored {path}", flush=True)
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
