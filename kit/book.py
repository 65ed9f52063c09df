"""The chapters as a static HTML site, built offline from their stored outputs.

    python -m kit book                      # -> build/book/index.html
    python -m kit book --out site/          # elsewhere

    >>> import tempfile
    >>> from pathlib import Path
    >>> import nbformat
    >>> from kit.book import build_book, chapter_title
    >>> src = Path(tempfile.mkdtemp())             # one tiny chapter, so the example runs anywhere
    >>> cells = [nbformat.v4.new_markdown_cell("# Arrays and backends"), nbformat.v4.new_code_cell("1 + 1")]
    >>> nbformat.write(nbformat.v4.new_notebook(cells=cells), src / "01_arrays.ipynb")
    >>> index = build_book(src, src / "_build" / "book")   # python -m kit book: notebooks/ -> build/book
    >>> sorted(p.name for p in index.parent.iterdir())
    ['01_arrays.html', 'index.html']
    >>> chapter_title(nbformat.read(src / "01_arrays.ipynb", as_version=4))    # the index lists chapters by it
    'Arrays and backends'

Each chapter becomes one page (nbconvert's HTML exporter, "lab" template) showing the outputs
stored in the notebook, nothing re-executed; figures are written beside the pages as PNG files
(`NAME_files/`) and referenced from them; `index.html` lists the chapters with their titles and
links each page to the previous and next one. Needs nbconvert (the `dev` and `lab` extras); no
network at build time.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

__all__ = ["build_book", "chapter_title"]

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.5}"
    "li{margin:.6rem 0}.kit-nav{font-family:system-ui,sans-serif;padding:.5rem 1rem;background:#f4f4f4;"
    "border-bottom:1px solid #ddd}.kit-nav a{margin-right:1.5rem}"
)


def chapter_title(nb: object) -> str:
    """The first markdown heading of a notebook, without the '#'."""
    for cell in nb.cells:  # type: ignore[attr-defined]
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return "untitled"


def _summary(nb: object) -> str:
    for cell in nb.cells:  # type: ignore[attr-defined]
        if cell.cell_type == "markdown":
            m = re.search(r"\*\*What you will measure:\*\*(.+?)(\n\n|$)", cell.source, re.S)
            if m:
                return " ".join(m.group(1).split())
            paragraphs = [p for p in cell.source.split("\n\n") if p.strip() and not p.startswith(("#", "|"))]
            return " ".join(paragraphs[0].split()) if paragraphs else ""
    return ""


def build_book(notebooks: Path, out: Path) -> Path:
    """Write one HTML page per `notebooks/*.ipynb` plus `index.html` into `out`; returns the index."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.writers import FilesWriter

    chapters = sorted(Path(notebooks).glob("[0-9]*.ipynb"))
    if not chapters:
        raise FileNotFoundError(f"no chapter notebooks (NN_name.ipynb) in {notebooks}: run from a checkout of kit")
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    exporter = HTMLExporter(template_name="lab")
    exporter.register_preprocessor("nbconvert.preprocessors.ExtractOutputPreprocessor", enabled=True)
    writer = FilesWriter(build_directory=str(out))
    entries = []
    for i, path in enumerate(chapters):
        nb = nbformat.read(path, as_version=4)
        body, resources = exporter.from_notebook_node(
            nb, resources={"output_files_dir": f"{path.stem}_files", "unique_key": path.stem}
        )
        nav = ['<a href="index.html">contents</a>']
        if i > 0:
            nav.append(f'<a href="{chapters[i - 1].stem}.html">&larr; previous</a>')
        if i + 1 < len(chapters):
            nav.append(f'<a href="{chapters[i + 1].stem}.html">next &rarr;</a>')
        bar = f'<style>{_STYLE}</style><nav class="kit-nav">{"".join(nav)}</nav>'
        body = re.sub(r"(<body[^>]*>)", lambda m, bar=bar: m.group(1) + bar, body, count=1)
        writer.write(body, resources, notebook_name=path.stem)
        entries.append((path.stem, chapter_title(nb), _summary(nb)))
    items = "\n".join(
        f'<li><a href="{stem}.html">{html.escape(title)}</a><br><small>{html.escape(summary)}</small></li>'
        for stem, title, summary in entries
    )
    index = out / "index.html"
    index.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kit: the chapters</title>"
        f"<style>{_STYLE}</style></head><body><h1>kit: the chapters</h1>"
        "<p>Every number on these pages was measured when the chapter was last run and stored; "
        "run the notebooks to measure your own machine.</p>"
        f"<ol>{items}</ol></body></html>",
        encoding="utf-8",
    )
    return index
