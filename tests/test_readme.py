"""The README is read by strangers: its code runs as pasted, its "two commands" are two, and no
reader-facing text names our internal references (seed documents, issue numbers)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else None]


def _python_blocks() -> list[str]:
    return [code for lang, code in _BLOCK.findall(README) if lang == "python"]


def test_the_two_commands_section_shows_exactly_two():
    blocks = _BLOCK.findall(_section("The two commands"))
    assert len(blocks) == 2, [code for _, code in blocks]
    assert all(lang == "bash" for lang, _ in blocks)


def test_the_test_command_is_what_ci_runs():
    test_command = [c for _, c in _BLOCK.findall(_section("The two commands")) if "pytest" in c]
    assert len(test_command) == 1
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command[0].strip() in ci.splitlines()


@pytest.mark.slow  # each README block as pasted, in a fresh interpreter (Spark's starts a context)
@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_every_python_block_runs_as_pasted(index, tmp_path):
    code = _python_blocks()[index]
    if "kit.spark" in code:
        from kit.spark import spark_missing

        missing = spark_missing()
        if missing:
            pytest.skip(f"the README's Spark block needs Spark here: {missing}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # the checkout's kit, from a directory outside it
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, f"README block {index}:\n{code}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"


# what only we would understand: seed documents ("seed 003"), issue numbers ("issue 15"), our
# tooling's words. External references (dl4j#8023, cupy/cupy#8306, "issue #3281" of DL4J named by
# its title) are fine: a reader can follow them.
_INTERNAL = re.compile(
    r"\bseeds? ?0\d\d\b|\bthe seed's\b|\bseed documents?\b|(?<![#/\w])issues? \d+\b|\bhelper-\d+\b", re.IGNORECASE
)


def _reader_facing() -> list[tuple[str, str]]:
    texts = [
        ("README.md", README),
        ("kit/data/reference_runs/README.md", (REPO / "kit/data/reference_runs/README.md").read_text()),
    ]
    for nb_path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for i, cell in enumerate(nb["cells"]):
            outputs = "".join(
                "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                for o in cell.get("outputs", [])
            )
            texts.append((f"{nb_path.name} cell {i}", "".join(cell["source"]) + outputs))
    for path in sorted((REPO / "kit").rglob("*.py")):  # docstrings, comments and error messages
        texts.append((str(path.relative_to(REPO)), path.read_text()))
    return texts


def test_no_reader_facing_text_names_internal_references():
    found = [f"{where}: {m.group(0)!r}" for where, text in _reader_facing() for m in _INTERNAL.finditer(text)]
    assert not found, found
    assert _INTERNAL.search("as seed 003 says") and _INTERNAL.search("see issue 15")
    assert _INTERNAL.search("The seed's memory lessons") and not _INTERNAL.search("the seed was multiplied")
    assert not _INTERNAL.search("dl4j#8023") and not _INTERNAL.search("kit.seed(0)")
