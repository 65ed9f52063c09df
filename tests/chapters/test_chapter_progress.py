"""Every long cell of a stored chapter shows progress (what it measures, how far, how long): the
reader of a live run is not left staring at a silent cell, and the stored page keeps the final
line. "Long" is read from the stored full run itself (scripts/store_chapters.py keeps how long
each cell ran, from nbclient's timestamps, as `metadata.kit.run_s`), so a cell that grew slow
fails here until it gets a `kit.widgets.Progress` or another kit panel."""

import ast
import json
from pathlib import Path

import pytest
from _chapter_cells import cells

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
LONG_S = 5.0  # the "about 5 s"


def _seconds(cell: dict) -> float | None:
    return cell.get("metadata", {}).get("kit", {}).get("run_s")


def _has_panel(cell: dict) -> bool:
    """A kit panel's final state (Progress, TimingPanel, TrainingPanel, MemoryPanel ...) is an
    HTML output of class kit-panel."""
    return any(
        'class="kit-panel"' in "".join(out.get("data", {}).get("text/html", ""))
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result")
    )


def test_every_chapter_is_checked():
    assert len(CHAPTERS) == 8


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_cell_over_five_seconds_in_the_stored_run_shows_progress(path):
    nb = json.loads(path.read_text())
    timed, silent = 0, []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        seconds = _seconds(cell)
        if seconds is None:
            continue
        timed += 1
        if seconds > LONG_S and not _has_panel(cell):
            silent.append(f"cell {i} ({seconds:.1f} s): {cell['source'][0].strip() if cell['source'] else ''}")
    assert timed, f"{path.name}: no cell has its run's timing; store it with scripts/store_chapters.py"
    assert not silent, f"{path.name}: long cells without progress:\n" + "\n".join(silent)


def test_the_check_finds_a_silent_long_cell():
    """The check can fail: a 6-second cell without a panel is found, one with a Progress line is not."""
    slow = {
        "cell_type": "code",
        "source": ["x = slow()"],
        "metadata": {"kit": {"run_s": 6.0}},
        "outputs": [],
    }
    assert _seconds(slow) == 6.0 and not _has_panel(slow)
    from kit.monitor.widgets import Progress

    bar = Progress("slow", total=1, widgets=False, display=False)
    bar.tick()
    bar.close()
    slow["outputs"] = [{"output_type": "display_data", "data": {"text/html": bar.static().html}}]
    assert _has_panel(slow)


def test_storing_keeps_each_cells_run_time_and_no_timestamps():
    """scripts/store_chapters.py turns nbclient's timestamps into the one number this check reads."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("store_chapters", NOTEBOOKS.parent / "scripts" / "store_chapters.py")
    store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(store)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = slow()")
    cell.metadata["execution"] = {
        "iopub.execute_input": "2026-11-25T10:00:00.000Z",
        "shell.execute_reply": "2026-11-25T10:00:06.04Z",
    }
    nb.cells = [cell, nbformat.v4.new_code_cell("y = 1")]
    store.normalise(nb, "Python 3")
    assert "execution" not in nb.cells[0].metadata
    assert _seconds(nb.cells[0]) == 6.0
    assert _seconds(nb.cells[1]) is None  # a cell that did not run has no time


def test_every_progress_line_of_every_chapter_closes_with_its_work():
    """A Progress closed by hand after a loop is left open (and at its last count) when the loop
    raises; in a `with` block it closes and says it stopped. Every Progress the chapters make is
    opened by a `with` statement."""
    loose = []
    chapters = sorted(path.name for path in NOTEBOOKS.glob("0*.ipynb"))
    assert len(chapters) == 8
    for chapter in chapters:
        for c in cells(chapter):
            source = "".join(c["source"])
            if c["cell_type"] != "code" or "Progress(" not in source:
                continue
            tree = ast.parse(source)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Progress":
                    opened_by_with = any(
                        isinstance(w, ast.With) and any(item.context_expr is node for item in w.items)
                        for w in ast.walk(tree)
                    )
                    if not opened_by_with:
                        loose.append(f"{chapter}: {ast.get_source_segment(source, node)[:80]}")
    assert not loose, "open these in a with block:\n" + "\n".join(loose)
