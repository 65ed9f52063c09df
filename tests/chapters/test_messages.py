"""Chapters 1-3 print errors and long messages through prose.show (a print()ed exception is one long
line a notebook breaks mid-word), and their Markdown names no development tooling."""

import re

import pytest
from _chapter_cells import cells as _cells

CHAPTERS = ["01_arrays_and_backends", "02_workspaces", "03_training_with_workspaces"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_errors_and_long_messages_go_through_show_and_no_dev_reference_is_left(chapter):
    for i, cell in enumerate(_cells(chapter)):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code":
            # an exception printed with print() is one long line that a notebook breaks mid-word
            assert not re.search(r"print\([^)]*(?<!type\()\b(e|exc|err)\b[,)]", src), (
                f"{chapter} cell {i}: print an error with prose.show"
            )
        else:
            assert "scripts/gpu-check" not in src and "GPU check" not in src, (
                f"{chapter} cell {i}: say 'the reference runs'"
            )
            assert not re.search(r"\bcommit\b", src), (
                f"{chapter} cell {i}: a reference run is labelled with GPU and date"
            )
