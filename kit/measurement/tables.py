"""Result tables: HTML for a notebook, plain text that fits 100 columns for a terminal.

kit's results objects (compare_devices' Comparison, kit.reference's Beside) show themselves
through these two functions, so every table reads the same way: cells already formatted as
strings, a flag column drawn as a badge, notes under the table.

    >>> print(text_table(["devices", "speedup", "reliable"], [["1", "1", "yes"], ["2", "1.84", "NO"]]))
    devices | speedup | reliable
    --------+---------+---------
    1       | 1       | yes
    2       | 1.84    | NO
    >>> "overflow-x: auto" in html_table(["a"], [["1"]])   # a wide table scrolls inside its box
    True

A text table wider than `width` is printed transposed, and a long cell is wrapped at spaces.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Table", "header", "html_table", "number", "percent", "text_table", "wrap"]

WIDTH = 100
# Inline styles, not a <style> block: JupyterLab strips <style> from an untrusted notebook (every
# notebook a reader downloads), which left the tables without borders and the flag badge black.
_TABLE = "border-collapse:collapse;font-size:12px;margin:4px 0"
_CELL = "border:1px solid #ddd;padding:2px 8px;text-align:right;white-space:nowrap"
# A header is its key in words ("copied MB per epoch"), wraps at spaces, and is padded less than a
# cell, so that a table of many short numbers fits JupyterLab's notebook column
# with the file browser open; the numbers themselves never wrap.
_HEAD_BOX = ";vertical-align:bottom;background:#f5f5f5"
_HEAD = _CELL.replace("2px 8px", "2px 4px").replace("nowrap", "normal") + _HEAD_BOX
_TEXT = (
    "border:1px solid #ddd;padding:2px 8px;text-align:left;white-space:normal;word-break:keep-all;"
    "overflow-wrap:normal;min-width:8em"
)
_GREY = ";color:#999"  # a flagged row's figures
_BADGE = "background:#c00;color:#fff;border-radius:3px;padding:0 4px;font-size:11px"
_NOTES = "font-size:12px;margin:2px 0 8px 0;padding-left:18px"


def number(value: object, missing: str = "-") -> str:
    """A measured value as a table shows it: whole numbers with thousands separators, a float to 3
    significant figures below 1,000 and to the unit above, None as `missing`.

    >>> [number(v) for v in (2656000, 0.12345, 1234.5, None, True, "NO")]
    ['2,656,000', '0.123', '1,234', '-', 'True', 'NO']
    """
    if value is None:
        return missing
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return str(value)
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def percent(value: float, limit: float | None = None) -> str:
    """A share as a percentage, whole by default; beside a `limit` it checks against (a spread
    against kit.measure's ±25 %, a load against kit.load's 50 %), with as many decimals as it takes
    for the printed value to fall on the same side of the printed limit as the value itself, so a
    flagged 25.04 % never reads "25%" beside "wider than 25%".

    >>> [percent(v, 0.25) for v in (0.12, 0.2496, 0.25, 0.2504, 0.25004, 0.31)]
    ['12%', '25%', '25%', '25.04%', '25.004%', '31%']
    """
    if value != value or limit is None:  # NaN, or nothing to stand beside
        return f"{value:.0%}"
    shown_limit = round(limit * 100)
    for digits in range(6):
        text = f"{value * 100:.{digits}f}"
        if (float(text) > shown_limit) == (value > limit):
            return text + "%"
    return f"{value * 100:.6f}%"


def wrap(text: str, width: int = WIDTH) -> str:
    """Text as a notebook or a terminal shows it without breaking a word: each line longer than
    `width` is wrapped at spaces, its continuation indented two more than the line itself
    (JupyterLab breaks a too-long printed line anywhere, "works|paces"). A word longer than the
    width is left whole.

    >>> print(wrap("  a: " + "word " * 30, 40))
      a: word word word word word word word
        word word word word word word word
        word word word word word word word
        word word word word word word word
        word word
    """
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=lead,
            subsequent_indent=lead + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(out)


# A column's unit, written as the last word(s) of its key, and how a header says it.
_UNITS = {"s": "(s)", "ms": "(ms)", "us": "(µs)", "kib": "(KiB)", "mib": "(MiB)", "bytes": "(bytes)", "pct": "(%)"}


def header(key: str) -> str:
    """A column key as words for an HTML header: underscores become spaces, a unit at the end is
    put in parentheses, `_per_s` becomes "/s" (the key itself stays in the text form and in the
    header's tooltip, for the reader who indexes a row by it).

    A unit written before "per" keeps its place and is spelled as a unit: `peak_kib_per_iter`
    is "peak KiB per iter".

    >>> [header(k) for k in ("copied_MB_per_epoch", "epoch_s", "samples_per_s", "held_kib", "speedup")]
    ['copied MB per epoch', 'epoch (s)', 'samples/s', 'held (KiB)', 'speedup']
    >>> header("peak_traced_kib_per_iter")
    'peak traced KiB per iter'
    """
    words = key.split("_")
    if len(words) > 2 and words[-2:] == ["per", "s"]:
        words = [*words[:-3], words[-3] + "/s"]
    elif len(words) > 1 and words[-1].lower() in _UNITS:
        words = [*words[:-1], _UNITS[words[-1].lower()]]
    words = [
        _UNITS[w.lower()].strip("()") if i + 1 < len(words) and words[i + 1] == "per" and w.lower() in _UNITS else w
        for i, w in enumerate(words)
    ]
    return " ".join(words)


def _grid(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    cells = [list(columns)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def text_table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = (), width: int = WIDTH
) -> str:
    """The table as text no wider than `width` where it can be: as given, else transposed, else
    transposed with its cells wrapped at spaces; then the notes, each wrapped to `width`."""
    if any(len(r) != len(columns) for r in rows):
        raise ValueError(f"text_table: every row needs {len(columns)} cells, one per column {list(columns)}")
    lines = _grid(columns, rows)
    if max(map(len, lines)) > width and rows:
        # the first column's values head the columns; every other column becomes a row
        first = max(len(c) for c in columns)
        cell = max(8, (width - first - 3 * len(rows)) // len(rows))
        wrapped: list[list[str]] = []
        for name, values in zip(columns[1:], list(zip(*rows))[1:]):
            pieces = [textwrap.wrap(v, cell, break_long_words=False) or [""] for v in values]
            for k in range(max(map(len, pieces))):
                wrapped.append([name if k == 0 else ""] + [p[k] if k < len(p) else "" for p in pieces])
        lines = _grid([columns[0], *(r[0] for r in rows)], wrapped)
    for note in notes:
        lines += textwrap.wrap(note, width, break_long_words=False, subsequent_indent="  ")
    return "\n".join(lines)


def html_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    notes: Sequence[str] = (),
    flag_column: str | None = None,
    text_columns: Sequence[str] = (),
    grey: Sequence[Collection[str]] | None = None,
) -> str:
    """The table as HTML in a box that scrolls sideways when it is wide. In `flag_column` a cell
    that is not "yes" (nor a dash: nothing measured) is drawn as a red badge and the row's figures
    are greyed, or, where `grey` names a row's flagged columns (one collection per row), only
    those figures (a row whose other figures stand on clean timings keeps them); `text_columns` are
    left-aligned and wrap at spaces; a header is its key in words (`header`), wrapping at spaces,
    with the key as its tooltip (numbers never wrap). Every style is inline, so an untrusted
    notebook keeps it.

    >>> '<th title="copied_MB_per_epoch"' in html_table(["copied_MB_per_epoch"], [["114"]])
    True
    >>> ">copied MB per epoch</th>" in html_table(["copied_MB_per_epoch"], [["114"]])
    True
    """
    if any(len(r) != len(columns) for r in rows):
        raise ValueError(f"html_table: every row needs {len(columns)} cells, one per column {list(columns)}")
    body = _html_rows(columns, rows, flag_column, text_columns, grey)
    head = "".join(
        f'<th title="{html.escape(c)}" style="{_TEXT + _HEAD_BOX if c in text_columns else _HEAD}">'
        f"{html.escape(header(c))}</th>"
        for c in columns
    )
    out = (
        f'<div style="overflow-x: auto; max-width: 100%"><table class="kit-table" style="{_TABLE}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )
    return out + _html_notes(notes)


def _html_notes(notes: Sequence[str]) -> str:
    """The notes under a table as a list ("" without notes)."""
    if not notes:
        return ""
    return f'<ul class="kit-notes" style="{_NOTES}">' + "".join(f"<li>{_note_html(n)}</li>" for n in notes) + "</ul>"


def _html_rows(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    flag_column: str | None,
    text_columns: Sequence[str],
    grey: Sequence[Collection[str]] | None,
) -> list[str]:
    """One <tr> per row; a row flagged in `flag_column` is greyed (or only the columns `grey` names)."""
    flag_at = list(columns).index(flag_column) if flag_column in columns else None
    if grey is not None and len(grey) != len(rows):
        raise ValueError(f"html_table: grey names the flagged columns of each row: {len(grey)} for {len(rows)} rows")
    body = []
    for r, row in enumerate(rows):
        # a flagged row's figures are greyed: the badge says why no conclusion rests on them
        flagged = flag_at is not None and row[flag_at] not in ("yes", "", "-", "—")  # a dash: nothing measured
        greyed = set(grey[r]) if grey is not None else (set(columns) if flagged else set())
        cells = (
            _html_cell(name, value, flagged, greyed, flag_column, text_columns) for name, value in zip(columns, row)
        )
        body.append("<tr>" + "".join(cells) + "</tr>")
    return body


def _html_cell(
    name: str, value: str, flagged: bool, greyed: Collection[str], flag_column: str | None, text_columns: Sequence[str]
) -> str:
    """One <td>: a flagged row's flag as a badge, a text column left-aligned, a greyed figure grey."""
    text = html.escape(value)
    if name == flag_column and flagged:
        text = f'<span class="kit-badge" style="{_BADGE}">{text}</span>'
    if name in text_columns:
        return f'<td class="kit-text" style="{_TEXT}">{text}</td>'
    shade = _GREY if name in greyed and name != flag_column and value not in ("-", "—") else ""
    return f'<td style="{_CELL}{shade}">{text}</td>'


def _note_html(note: str) -> str:
    """A note as HTML: escaped, with `code` spans (the notes' one piece of Markdown) as <code>,
    not as literal backticks."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(note))


@dataclass
class Table:
    """A results table that shows itself: HTML in a notebook (a wide one scrolls in its box instead
    of wrapping), text no wider than 100 columns in a terminal. Cells are strings, already
    formatted; `title` heads it, `notes` follow it.

    >>> t = Table(["device", "ms"], [["cpu:0", "40.9"]], notes=["median of 5 repeats"], title="matmul")
    >>> print(t)
    matmul
    device | ms
    -------+-----
    cpu:0  | 40.9
    median of 5 repeats
    >>> "<table" in t._repr_html_() and "<b>matmul</b>" in t._repr_html_()
    True
    """

    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    title: str = ""
    flag_column: str | None = None
    text_columns: list[str] = field(default_factory=list)

    def text(self) -> str:
        body = text_table(self.columns, self.rows, self.notes)
        return f"{wrap(self.title)}\n{body}" if self.title else body

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        head = f'<div style="font-size:12px;margin:4px 0"><b>{html.escape(self.title)}</b></div>' if self.title else ""
        return head + html_table(self.columns, self.rows, self.notes, self.flag_column, self.text_columns)
