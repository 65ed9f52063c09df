"""The chapters as a static HTML book (Sphinx + MyST-NB, the engine of Jupyter Book 1), built
offline from their stored outputs: nothing is executed and nothing is fetched, then or when read.

    python -m kit book                      # -> build/book/index.html
    python -m kit book --out site/          # elsewhere
    python -m kit book --repository URL     # a GitHub address: adds Colab and Binder links

    >>> import nbformat
    >>> from kit.book import chapter_title, prepare_chapter
    >>> cells = [nbformat.v4.new_markdown_cell("# Arrays and backends"), nbformat.v4.new_code_cell("import kit")]
    >>> nb = prepare_chapter(nbformat.v4.new_notebook(cells=cells), "01_arrays")
    >>> chapter_title(nb)                           # the page and the sidebar name it so
    'Arrays and backends'
    >>> nb.cells[2].metadata.tags                   # the setup cell: its output shown, its source not
    ['remove-input']
    >>> "Run it" in nb.cells[1].source              # how to run the page's notebook yourself
    True

What a page has: every chapter in the sidebar, its own table of contents, full-text search that
works from file://, math typeset by the offline MathJax 3 of `sphinx-mathjax-offline` (only the
files the pages load: MATHJAX_FILES), PNG figures, the stored live panels as static HTML, and a
"Run it" note. The build works on copies of the notebooks and drops saved widget state, so no page
asks a CDN for anything. Needs the `book` extra; `python -m kit book` names it when MODULES are absent.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = ["MODULES", "build_book", "chapter_title", "prepare_chapter"]

# import name -> pip name: what `python -m kit book` needs (the `book` extra in pyproject.toml);
# sphinx-mathjax-offline's import name has hyphens: Sphinx loads it by name, as an extension
MODULES = {
    "sphinx": "sphinx",
    "myst_nb": "myst-nb",
    "sphinx_book_theme": "sphinx-book-theme",
    "sphinx-mathjax-offline": "sphinx-mathjax-offline",  # MathJax 3, for math with no network
}
TITLE = "kit: the chapters"
# what the pages load of sphinx-mathjax-offline's MathJax (its other bundles, SVG output, MathML input and
# speech rules are never requested): tests/test_book_build.py fails on any file request the book cannot answer
MATHJAX_BUNDLE = "tex-chtml.js"
MATHJAX_FILES = (MATHJAX_BUNDLE, "output/chtml/fonts/woff-v2", "input/tex/extensions")
# what a reader installs to run a chapter (kit is not on PyPI yet): the `lab` extra brings JupyterLab
# and PySpark; Spark also needs Java, which pip cannot install
LAB_EXTRA = "lab"
JAVA = "Java 17 (Debian/Ubuntu: `apt-get install -y openjdk-17-jre-headless`)"

_CSS = """
/* wide tables and outputs scroll inside their own box instead of widening the page */
.bd-article table, .cell_output table { display: block; max-width: 100%; overflow-x: auto; }
.cell_output, .cell_output .output { max-width: 100%; overflow-x: auto; }
.cell_output pre { white-space: pre; }
/* kit's panels (progress, timing, memory) are laid out for JupyterLab's full-width outputs: in the
   book's narrower column their cells wrap, so a label or a figure is never cut off at the edge */
.kit-panel td { white-space: normal !important; }
.cell_output .kit-panel table { display: table; }
"""


def chapter_title(nb: NotebookNode) -> str:
    """The first markdown heading of a notebook, without the '#'."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return "untitled"


def _summary(nb: NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"\*\*What you will measure:\*\*(.+?)(\n\n|$)", cell.source, re.S)
            if m:
                return " ".join(m.group(1).split())
            paragraphs = [p for p in cell.source.split("\n\n") if p.strip() and not p.startswith(("#", "|"))]
            return " ".join(paragraphs[0].split()) if paragraphs else ""
    return ""


def _github(repository: str) -> str:
    """'owner/name' from https://github.com/owner/name(.git), the form Colab and Binder links need."""
    m = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(\.git)?/?", repository.strip())
    if not m:
        raise ValueError(
            f"--repository {repository!r} is not a GitHub address (https://github.com/<owner>/<name>): "
            "Colab and Binder open notebooks from GitHub"
        )
    return f"{m.group(1)}/{m.group(2)}"


def uses_spark(nb: NotebookNode) -> bool:
    """The chapter runs Spark (imports kit.spark or pyspark): its readers need PySpark and Java."""
    return any(
        re.search(r"^\s*(from|import)\s+(kit\.spark|pyspark)\b", c.source, re.M)
        for c in nb.cells
        if c.cell_type == "code"
    )


def _run_note(stem: str, repository: str | None, branch: str, spark: bool = False) -> str:
    if repository:
        repo = _github(repository)
        colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/notebooks/{stem}.ipynb"
        binder = f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/notebooks/{stem}.ipynb"
        where = f" [Open in Colab]({colab}) · [Launch on Binder]({binder}) (no GPU)."
    else:  # no published address to link to: say what works, invent none
        where = (
            " On Colab, upload the notebook (File > Upload notebook) and the wheel, and set `KIT_PIP_SPEC` to the "
            "wheel's path (`%env KIT_PIP_SPEC=/content/<wheel file>`) before the first cell."
        )
    java = f" This chapter runs Spark: it also needs {JAVA}." if spark else ""
    return (
        "```{admonition} Run it\n:class: tip\n"
        "This page shows the outputs stored when the chapter was last run. To measure your own machine, open "
        f'<a href="{stem}.ipynb" download>{stem}.ipynb</a> in JupyterLab with kit and its `{LAB_EXTRA}` extra '
        "(JupyterLab, and PySpark for the Spark chapter) installed: in a checkout of kit, "
        f'`pip install -e ".[{LAB_EXTRA}]"`; from a wheel (`python -m build` in a checkout makes one; kit is not '
        f'on PyPI yet), `pip install "<wheel file>[{LAB_EXTRA}]"`, and `python -m kit chapters DIR` copies every '
        "chapter out of it. The first cell installs kit where it is missing, from `KIT_PIP_SPEC` (a wheel file or "
        f"a git URL).{java}{where}\n```"
    )


def prepare_chapter(nb: NotebookNode, stem: str, repository: str | None = None, branch: str = "main") -> Any:
    """The notebook as the book shows it (the caller's copy is changed and returned): the setup cell's
    source hidden, saved widget state dropped, a "Run it" note after the first markdown cell."""
    import nbformat

    nb.metadata.pop("widgets", None)  # saved widget state would make the page load a widget manager
    code = [c for c in nb.cells if c.cell_type == "code"]
    if code:
        tags = code[0].metadata.setdefault("tags", [])
        if "remove-input" not in tags:
            tags.append("remove-input")
    first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    note = _run_note(stem, repository, branch, spark=uses_spark(nb))
    nb.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(note))
    return nb


def _conf(title: str) -> dict[str, Any]:
    """Sphinx's configuration, written out as conf.py in the build's source folder."""
    return {
        "project": title,
        "html_title": title,
        "extensions": ["myst_nb", "sphinx_book_theme"],
        "mathjax_path": f"mathjax/{MATHJAX_BUNDLE}",  # in _static/, copied by _copy_mathjax (no CDN)
        "exclude_patterns": ["_build"],
        "nb_execution_mode": "off",  # the stored outputs, never re-run
        "nb_ipywidgets_js": {},  # no require.js or widget manager from a CDN
        "nb_merge_streams": True,
        "myst_enable_extensions": ["dollarmath", "amsmath"],
        "myst_heading_anchors": 3,
        "suppress_warnings": ["myst.header", "mystnb.unknown_mime_type"],
        "html_theme": "sphinx_book_theme",
        "html_theme_options": {
            "home_page_in_toc": True,
            "show_toc_level": 2,
            "use_download_button": False,
            "use_repository_button": False,
            "use_fullscreen_button": False,
            "footer_content_items": [],
        },
        "html_context": {"default_mode": "light"},
        "html_static_path": ["_static"],
        "html_css_files": ["kit-book.css"],
        "html_copy_source": False,
        "html_show_sourcelink": False,
        "html_show_search_summary": False,  # summaries fetch() each page, which file:// forbids
        "html_last_updated_fmt": None,
    }


def build_book(
    notebooks: Path, out: Path, repository: str | None = None, branch: str = "main", quiet: bool = True
) -> Path:
    """Build every `notebooks/NN_*.ipynb` into `out` (one page each, plus index.html); returns the index.

    `out` is replaced when it holds an earlier book; a non-empty folder that does not is refused."""
    import nbformat  # noqa: F401 (_write_sources reads the chapters with it: missing, it fails before `out` is touched)

    chapters = sorted(Path(notebooks).glob("[0-9]*.ipynb"))
    if not chapters:
        raise FileNotFoundError(f"no chapter notebooks (NN_name.ipynb) in {notebooks}")
    if repository:
        _github(repository)  # a bad address fails before the build
    given = Path(out)
    out = Path(os.path.realpath(given)) if given.is_symlink() else given  # a link stays, its folder gets the book
    _check_out(out)  # before the build; the earlier book stays until the new one is whole
    with tempfile.TemporaryDirectory(prefix="kit-book-") as tmp:
        src = Path(tmp) / "src"
        _write_sources(src, chapters, repository, branch)
        # built in the temporary folder, then moved (MyST-NB writes beside its output folder)
        html = Path(tmp) / "html"
        _sphinx(src, html, Path(tmp) / "doctrees", quiet)
        _copy_mathjax(html / "_static" / "mathjax")
        for path in chapters:  # the "Run it" note links each page's notebook, stored beside it
            shutil.copy(path, html / path.name)
        out.parent.mkdir(parents=True, exist_ok=True)
        _replace(out, html)
    return given / "index.html"


def mathjax_source() -> Path:
    """The MathJax 3 folder the `sphinx-mathjax-offline` package ships (the book extra)."""
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            'the book needs MathJax from sphinx-mathjax-offline: pip install "sphinx-mathjax-offline"'
        )
    return Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"


def _copy_mathjax(target: Path) -> None:
    """Only MATHJAX_FILES of the package's MathJax: what the pages load."""
    source = mathjax_source()
    for name in MATHJAX_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, target / name)


def _check_out(out: Path) -> None:
    """`out` may hold an earlier book (replaced once the new one is built) or nothing; a non-empty
    folder that holds no book, or a file, is refused before anything is built."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out}: that is a file; the book is a folder: choose another --out")
    if out.exists() and any(out.iterdir()) and not (out / ".buildinfo").is_file():
        raise FileExistsError(f"{out} is not empty and holds no earlier book: choose another --out")


def _replace(out: Path, built: Path) -> None:
    """Put the finished book at `out`: the earlier one is moved aside first and removed only once
    the new one is in place (put back if the move fails)."""
    if not out.exists():
        shutil.move(built, out)
        return
    aside = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(aside)
    try:
        shutil.move(built, out)
    except BaseException:
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
        aside.rename(out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write_sources(src: Path, chapters: list[Path], repository: str | None, branch: str) -> None:
    """The Sphinx sources: the style sheet, each chapter prepared, the index page and conf.py."""
    import nbformat

    (src / "_static").mkdir(parents=True)
    (src / "_static" / "kit-book.css").write_text(_CSS, encoding="utf-8")
    entries = []
    for path in chapters:
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception as exc:  # the file, and what is wrong with it, before Sphinx runs
            raise ValueError(
                f"the book: chapter {str(path)!r} is not a readable notebook ({type(exc).__name__}: {exc}); "
                "restore it (git checkout -- <file>) or move it out of the notebooks folder; the earlier book is kept"
            ) from None
        nbformat.write(prepare_chapter(nb, path.stem, repository, branch), src / path.name)
        entries.append((path.stem, chapter_title(nb), _summary(nb)))
    items = "\n".join(f"1. [{title}]({stem}.ipynb)  \n   {summary}" for stem, title, summary in entries)
    toctree = "\n".join(stem for stem, _, _ in entries)
    (src / "index.md").write_text(
        f"# {TITLE}\n\nEvery number on these pages was measured when the chapter was last run and stored; "
        "run the notebooks to measure your own machine.\n\n"
        f"{items}\n\n```{{toctree}}\n:hidden:\n:caption: Chapters\n\n{toctree}\n```\n",
        encoding="utf-8",
    )
    (src / "conf.py").write_text(
        "".join(f"{key} = {value!r}\n" for key, value in _conf(TITLE).items()), encoding="utf-8"
    )


def _sphinx(src: Path, html: Path, doctrees: Path, quiet: bool) -> None:
    """Sphinx's HTML build, in a child process so that its global state and warnings stay out of the
    caller's Python; a failed build is an error."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-d", str(doctrees), str(src), str(html)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL if quiet else None)  # warnings go to stderr
    if done.returncode != 0:
        raise RuntimeError(f"the book's Sphinx build failed (exit status {done.returncode}; its messages above)")
