"""Running a stored chapter's own code cell in a test, on values the test makes (each branch of a
generated sentence, without the chapter's run), and reading its cells and stored outputs."""

from __future__ import annotations

import ast
import contextlib
import io
import json
from pathlib import Path

import numpy as np

import kit
from kit import measure, prose

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def cells(chapter: str) -> list[dict]:
    """The cells of `chapter`, named by its file ("04_multi_device_training.ipynb") or its stem."""
    name = chapter if chapter.endswith(".ipynb") else f"{chapter}.ipynb"
    return json.loads((NOTEBOOKS / name).read_text())["cells"]


def cell(chapter: str, starts: str) -> str:
    """The source of the chapter's one code cell that starts with `starts`."""
    (source,) = [
        s for c in cells(chapter) if c["cell_type"] == "code" and (s := "".join(c["source"])).startswith(starts)
    ]
    return source


def source(c: dict) -> str:
    return "".join(c["source"])


def holding(chapter: str, marker: str, kind: str = "code") -> str:
    """The source of the one cell of `kind` in `chapter` that holds `marker`."""
    found = [source(c) for c in cells(chapter) if c["cell_type"] == kind and marker in source(c)]
    assert len(found) == 1, f"{chapter}: {len(found)} {kind} cells hold {marker!r}"
    return found[0]


def words(text: str) -> str:
    return " ".join(text.split())


def run(source: str, **names) -> list[str]:
    """Execute `source` with prose, measure and `names` in scope; what it displays, as text."""
    shown: list[str] = []
    env = {"display": lambda x: shown.append(str(x)), "prose": prose, "measure": measure, **names}
    exec(compile(source, "<chapter cell>", "exec"), env)
    return shown


def scope(**names) -> dict:
    """A namespace for `run_in`: kit, quick mode, measure, prose, NumPy and `names` (matplotlib off-screen)."""
    import matplotlib

    matplotlib.use("Agg")
    shown: list[str] = []
    env = {"kit": kit, "QUICK": True, "measure": measure, "prose": prose, "np": np, "_shown": shown, **names}
    env["display"] = lambda x: print(str(x))
    return env


def run_in(source: str, env: dict) -> str:
    """Run a chapter's cell in `env`: what it printed and displayed, as text."""
    out = io.StringIO()
    env.setdefault("display", lambda x: print(str(x), file=out))
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<chapter cell>", "exec"), env)
    return out.getvalue()


def output_text(output: dict) -> str:
    """A stored output as text: a stream, an error's traceback, or the Markdown or plain text shown."""
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    return "".join(data.get("text/markdown") or data.get("text/plain") or "")


def statements(source: str, keep) -> str:
    """The top-level statements of a cell's source that `keep(first line)` accepts, in order."""
    tree = ast.parse(source)
    return "\n".join(
        ast.get_source_segment(source, node)
        for node in tree.body
        if keep(ast.get_source_segment(source, node).splitlines()[0])
    )
