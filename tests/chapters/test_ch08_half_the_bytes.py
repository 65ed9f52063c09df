"""Chapter 8's generated sentences speak to the reader (no test tooling named), in every branch."""

from __future__ import annotations

import pytest
from _chapter_cells import cell as _cell
from _chapter_cells import run as _run

CH8 = "08_half_the_bytes.ipynb"


@pytest.mark.parametrize(("f16", "mixed", "said"), [(0.8, 0.9, "at least half of float32's."), (0.3, 0.2, "(0.20).")])
def test_ch8_no_lag_branch_speaks_to_the_reader(f16, mixed, said):
    source = _cell(CH8, "STALLED_BELOW = 0.1")
    assert "test suite" not in source and "nbval" not in source
    stall = {
        "float32": {"losses": [1.0, 0.9, 0.8]},
        "float16": {"fraction_of_float32": f16, "losses": [1.0, 0.95, 0.9], "changed": 0.5},
        "mixed": {"fraction_of_float32": mixed, "changed": 0.5, "master_changed": 0.9},
    }
    (text,) = _run(source, stall=stall, stall_lr=0.01)
    assert "did not show plain float16 falling behind: its drop is at least" in text and text.endswith(said)
