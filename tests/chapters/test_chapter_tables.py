"""A chapter shows a table as HTML (kit.tables.Table: it fits the notebook's column, marks flags
as badges, never wraps mid-word), not as print()ed columns padded with format specs, which a
notebook wraps anywhere once they are wider than the output area."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
# a padded column header: a literal string given a width, e.g. {'req/s':>8s} or {'':16s}
_PADDED_HEADER = re.compile(r"""\{\s*(['"])[^'"]*\1\s*:\s*[<>^]?\d+s?\s*\}""")


def padded_tables(cell_source: str) -> list[str]:
    return [line.strip() for line in cell_source.splitlines() if "print" in line and _PADDED_HEADER.search(line)]


def test_the_pattern_finds_a_printed_table_header_and_nothing_else():
    assert padded_tables("""print(f"{'mode':11s} {'clients':>7s}")""")
    assert padded_tables("""print(f"{'':16s}" + "".join(x))""")
    assert not padded_tables("""print(f"{name:8s} {n:5d}")""")  # a row: values, not a header
    assert not padded_tables("""label = f"{'x':>3s}" """)  # not printed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_chapter_prints_a_padded_text_table(path):
    nb = json.loads(path.read_text())
    found = {i: padded_tables("".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"}
    found = {i: lines for i, lines in found.items() if lines}
    assert not found, f"{path.name}: show these as kit.tables.Table (HTML), not printed columns: {found}"
