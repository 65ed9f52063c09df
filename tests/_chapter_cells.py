"""Running a stored chapter's own code cell in a test, on values the test makes (each branch of a
generated sentence, without the chapter's run)."""

import json
from pathlib import Path

from kit import measure, prose

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def cells(chapter: str) -> list[dict]:
    return json.loads((NOTEBOOKS / chapter).read_text())["cells"]


def cell(chapter: str, starts: str) -> str:
    """The source of the chapter's one code cell that starts with `starts`."""
    (source,) = [
        s for c in cells(chapter) if c["cell_type"] == "code" and (s := "".join(c["source"])).startswith(starts)
    ]
    return source


def run(source: str, **names) -> list[str]:
    """Execute `source` with prose, measure and `names` in scope; what it displays, as text."""
    shown: list[str] = []
    env = {"display": lambda x: shown.append(str(x)), "prose": prose, "measure": measure, **names}
    exec(compile(source, "<chapter cell>", "exec"), env)
    return shown
