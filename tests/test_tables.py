"""kit.tables: the HTML and text forms of every results table."""

from __future__ import annotations

import pytest

from kit.measurement.reference import Beside
from kit.measurement.tables import html_table, text_table


def test_a_narrow_table_prints_as_given():
    out = text_table(["a", "b"], [["1", "2"]])
    assert out.splitlines()[0] == "a | b" and out.splitlines()[2] == "1 | 2"


def test_a_wide_table_is_transposed_and_wrapped_at_spaces_never_inside_a_word():
    columns = [f"column_{i}" for i in range(12)]
    rows = [[f"value {i} " * 3 for i in range(12)], ["x" * 5] * 12]
    out = text_table(columns, rows, notes=["a long note " * 20])
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100
    assert lines[0].split()[0] == "column_0"  # the first column heads the others
    assert sum(1 for line in lines if line.startswith("column_")) == 12  # one line (or more) per other column
    words = {w for line in lines for w in line.replace("|", " ").split()}
    assert {"value", "xxxxx", "long", "note"} <= words  # wrapped at spaces: every word whole


def test_html_escapes_cells_draws_flags_as_badges_and_scrolls():
    page = html_table(["name", "ok"], [["<b>x</b>", "yes"], ["y", "NO"]], notes=["n & m"], flag_column="ok")
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert page.count('class="kit-badge"') == 1 and "n &amp; m" in page
    assert "overflow-x: auto" in page


def test_html_styles_are_inline_so_an_untrusted_notebook_keeps_them():
    # JupyterLab strips <style> blocks from untrusted notebooks: borders, alignment and the badge
    # must survive in each element's own style attribute
    page = html_table(["kind", "x", "ok"], [["a b", "1", "NO"]], notes=["n"], flag_column="ok", text_columns=["kind"])
    assert "<style" not in page
    assert 'class="kit-badge" style="background:#c00;color:#fff' in page
    assert '<td class="kit-text" style="border:1px solid #ddd;padding:2px 8px;text-align:left' in page
    assert '<td style="border:1px solid #ddd;padding:2px 8px;text-align:right' in page
    assert '<table class="kit-table" style="border-collapse:collapse' in page
    assert '<ul class="kit-notes" style="' in page
    assert "kit-badge" not in html_table(["x", "ok"], [["1", "—"], ["2", "yes"]], flag_column="ok")  # nothing measured


def test_rows_of_the_wrong_length_are_refused_naming_the_columns():
    with pytest.raises(ValueError, match=r"2 cells, one per column \['a', 'b'\]"):
        text_table(["a", "b"], [["1"]])
    with pytest.raises(ValueError, match="one per column"):
        html_table(["a", "b"], [["1", "2", "3"]])


def test_beside_has_both_forms():
    table = Beside(
        ["quantity", "your machine (cpu:0, numpy)", "NVIDIA H100 80GB HBM3 (2026-11-24, commit 6481dc3)"],
        [["matmul TFLOP/s (float32, n=4096)", 0.0123, 51.2]],
        note="a note",
    )
    assert max(len(line) for line in table.text().splitlines()) <= 100
    assert "0.0123" in table.text() and "51.2" in table.text() and "a note" in table.text()
    assert "<table" in table._repr_html_() and "51.2" in table._repr_html_()


def test_table_shows_html_in_a_notebook_and_text_in_a_terminal():
    from kit.measurement.tables import Table

    t = Table(["device", "ms", "reliable"], [["cpu:0", "40.9", "NO"]], notes=["n"], title="t", flag_column="reliable")
    assert str(t) == repr(t) == t.text() and t.text().splitlines()[0] == "t"
    page = t._repr_html_()
    assert "<b>t</b>" in page and 'class="kit-badge"' in page and "<style" not in page


def test_a_benchmark_result_becomes_a_table_with_its_column_notes_and_summary():
    from kit.bench import result_table

    result = {
        "benchmark": "workspaces",
        "device": "cpu:0",
        "repeats": 7,
        "columns": ["regime", "ms_per_iter", "spread", "ratio_to_plain"],
        "column_notes": {"ratio_to_plain": "within each repeat, then the median"},
        "rows": [{"regime": "plain", "ms_per_iter": 41.5, "spread": 0.71, "ratio_to_plain": 1.0}],
        "summary": {"machine_load_by_others": 0.5, "goal": "x"},
    }
    t = result_table(result)
    assert t.rows == [["plain", "41.5", "±71%", "1"]]
    # the summary's keys read as words under the HTML table (read 30, N-X4)
    assert t.notes == [
        "ratio to plain: within each repeat, then the median",
        "load by other processes while timed: 50%",
        "goal: x",
    ]
    assert t.title == "benchmark workspaces on cpu:0 (median of 7 repeats)"


def test_the_d2l_table_of_a_reference_run_as_a_table():
    from kit import reference
    from kit.bench.d2l import d2l_result_table, d2l_table

    for run in reference.reference_runs():
        t = d2l_result_table(run)
        if isinstance(t, str):
            assert t == d2l_table(run)
            continue
        text = d2l_table(run)
        assert all(row[0] in text and row[1] in text for row in t.rows)
        assert all(note in text for note in t.notes)


def test_every_results_table_writes_numbers_one_way():
    """The bench table (cells and summary notes), the compare table and the reference table all
    format through kit.tables.number: a byte count of 2,656,000 never prints as 2656000."""
    from kit.bench import format_result, result_table
    from kit.training.compare import Comparison

    result = {
        "benchmark": "b",
        "device": "cpu:0",
        "repeats": 3,
        "columns": ["name", "bytes", "ms"],
        "rows": [{"name": "x", "bytes": 2656000, "ms": 1234.56}],
        "summary": {"workspace_capacity_bytes": 2656000},
    }
    table = result_table(result)
    assert table.rows == [["x", "2,656,000", "1,235"]]
    assert "workspace capacity (bytes): 2,656,000" in table.notes
    assert "2656000" not in format_result(result) and "2,656,000" in format_result(result)
    row = {"devices": 1, "kind": "physical cpu:0", "reliable": True, "epoch_s": 1234.5, "warnings": []}
    assert "1,234" in Comparison(rows=[row]).table()
    assert "2,656,000" in Beside(["quantity", "here"], [["bytes", 2656000]]).text()


def test_headers_are_words_with_the_key_as_tooltip():
    page = html_table(["held_kib", "samples_per_s", "kind"], [["1", "2", "a"]], text_columns=["kind"])
    assert ">held (KiB)</th>" in page and ">samples/s</th>" in page and 'title="held_kib"' in page


def test_code_spans_in_notes_are_code_not_backticks():
    page = html_table(["a"], [["1"]], notes=["the figures are `kit bench parallel`'s, <not html>"])
    assert "<code>kit bench parallel</code>" in page and "`" not in page and "&lt;not html&gt;" in page


def test_a_flagged_rows_figures_are_greyed():
    page = html_table(["x", "ok"], [["1.5", "yes"], ["0.97", "NO"]], flag_column="ok")
    cells = page.split("<td")
    clean = next(c for c in cells if ">1.5<" in c)
    flagged = next(c for c in cells if ">0.97<" in c)
    assert "color:#999" in flagged and "color:#999" not in clean
