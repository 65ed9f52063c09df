"""A chapter's check cells (tagged `check` or `remove-input`) hold the exercises' answers in their
code: the book removes that code, and JupyterLab must fold it (`jupyter.source_hidden`), so a
learner opening the notebook does not read an answer on the way to the exercise."""

from pathlib import Path

import nbformat
import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_check_cell_is_folded_in_jupyterlab(path):
    nb = nbformat.read(path, 4)
    checks = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and {"check", "remove-input"} & set(cell.metadata.get("tags", []))
    ]
    unfolded = [i for i in checks if not nb.cells[i].metadata.get("jupyter", {}).get("source_hidden")]
    assert checks and unfolded == [], f"{path.name}: check cells {unfolded} show their code in JupyterLab"
