"""The rendered book: `python -m kit book` builds every chapter into a static HTML page from its
stored outputs, offline, with every figure it references present beside it."""

import html.parser
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("nbconvert", reason="the book needs nbconvert (the dev or lab extra)")

from kit.__main__ import main

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# chapters 1-6 and 8 share the setup cell and the exercise format (chapter 7, Spark, has its own)
CORE = [
    NOTEBOOKS / f"{name}.ipynb"
    for name in (
        "01_arrays_and_backends",
        "02_workspaces",
        "03_training_with_workspaces",
        "04_multi_device_training",
        "05_parallel_inference",
        "06_early_stopping",
        "08_half_the_bytes",
    )
]


class _Refs(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


def _refs(path: Path) -> _Refs:
    parser = _Refs()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.mark.slow  # a whole Sphinx build of the book
def test_book_has_every_chapter_and_every_figure(tmp_path, capsys):
    out = tmp_path / "book"
    assert main(["book", "--out", str(out)]) == 0
    assert "book written" in capsys.readouterr().out
    chapters = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    assert len(chapters) >= 6
    index = _refs(out / "index.html")
    for nb_path in chapters:
        page = out / f"{nb_path.stem}.html"
        assert page.is_file(), f"no page for {nb_path.name}"
        assert f"{nb_path.stem}.html" in index.links
        refs = _refs(page)
        files = [src for src in refs.images if not src.startswith(("data:", "http"))]
        for src in files:
            assert (out / src).is_file(), f"{page.name} references {src}, which is missing"
        nb = json.loads(nb_path.read_text())
        stored = sum(1 for c in nb["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
        assert len(files) == stored, f"{page.name}: {len(files)} figures on the page, {stored} stored"
        text = page.read_text(encoding="utf-8")
        assert "VBox(children=" not in text and "HTML(value=" not in text, f"raw widget repr in {page.name}"
    _only_the_mathjax_the_pages_load(out)


def _only_the_mathjax_the_pages_load(out: Path) -> None:
    """The book copied all 24 MB of sphinx-mathjax-offline's MathJax (every bundle, SVG output, speech
    rules); the pages load one bundle, its fonts and, on demand, TeX extensions: only those are copied
    (tests/test_book_build.py checks in Chromium that every file the pages request is there)."""
    from kit.book import MATHJAX_BUNDLE, MATHJAX_FILES, mathjax_source

    copied = out / "_static" / "mathjax"
    source = mathjax_source()
    files = sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file())
    wanted = sorted(
        p.relative_to(source).as_posix()
        for name in MATHJAX_FILES
        for p in ([source / name] if (source / name).is_file() else (source / name).rglob("*"))
        if p.is_file()
    )
    assert files == wanted
    for name in files:
        assert (copied / name).read_bytes() == (source / name).read_bytes(), name
    assert f'src="_static/mathjax/{MATHJAX_BUNDLE}' in (out / "04_multi_device_training.html").read_text()
    size = sum((copied / name).stat().st_size for name in files)
    whole = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    assert size < whole / 5, f"{size} of MathJax's {whole} bytes copied"


def _requirements(extra: str) -> set[str]:
    import re
    import tomllib

    project = tomllib.loads((NOTEBOOKS.parent / "pyproject.toml").read_text())["project"]
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0] for r in project["optional-dependencies"][extra]}


@pytest.mark.parametrize("nb_path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem[:2])
def test_the_run_it_note_gives_an_install_that_works_today_and_runs_the_chapter(nb_path):
    """The note said `pip install "gpu-workspaces-kit[lab]"` (not on PyPI; and the lab extra had no
    PySpark, which chapter 7 imports) and sent readers to "the repository's address" (kit has none)."""
    import nbformat

    from kit.book import LAB_EXTRA, prepare_chapter, uses_spark

    nb = prepare_chapter(nbformat.read(nb_path, as_version=4), nb_path.stem)
    (note,) = [c.source for c in nb.cells if "Run it" in c.source]
    flat = " ".join(note.split())
    assert f'`pip install -e ".[{LAB_EXTRA}]"`' in flat and f'`pip install "<wheel file>[{LAB_EXTRA}]"`' in flat
    assert "`python -m build`" in flat and "`python -m kit chapters DIR`" in flat and "KIT_PIP_SPEC" in flat
    assert 'pip install "gpu-workspaces-kit' not in flat and "the repository" not in flat
    spark = uses_spark(nb)
    assert spark == (nb_path.stem == "07_training_on_spark"), nb_path.name  # the chapter that imports kit.spark
    needs = {"jupyterlab", "ipykernel"} | ({"pyspark", "fsspec"} if spark else set())
    assert needs <= _requirements(LAB_EXTRA), f"the {LAB_EXTRA} extra lacks {needs - _requirements(LAB_EXTRA)}"
    assert ("Java 17" in flat) == spark


def test_stored_chapters_show_no_raw_widget_reprs():
    """Opening a committed chapter shows final panel states, never a widget's text fallback."""
    for nb_path in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for i, cell in enumerate(nb["cells"]):
            for o in cell.get("outputs", []):
                data = o.get("data", {})
                assert WIDGET_VIEW not in data, f"{nb_path.name} cell {i}: a live widget output was stored"
                plain = "".join(data.get("text/plain", ""))
                assert "VBox(children=" not in plain and "HTML(value=" not in plain, f"{nb_path.name} cell {i}"


def _code(nb):
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_every_chapter_installs_kit_from_the_one_setting_the_readme_names():
    """The first cell installs from KIT_PIP_SPEC, else from PyPI under the distribution name
    (never the stranger's `kit`), as the README says; no placeholder location is left."""
    from kit.settings import DISTRIBUTION

    readme = (NOTEBOOKS.parent / "README.md").read_text()
    assert "ORG/REPO" not in readme
    for nb_path in CORE:
        setup = _code(json.loads(nb_path.read_text()))[0]
        assert "ORG/REPO" not in setup and "KIT_SOURCE" not in setup, nb_path.name
        default = setup.split('os.environ.get("KIT_PIP_SPEC", "").strip() or "', 1)[1].split('"', 1)[0]
        assert default.split("[")[0] == DISTRIBUTION, f"{nb_path.name} installs {default}"
        assert f"`{default}`" in readme, f"{nb_path.name} installs {default}; the README does not say so"
        assert "QUICK = kit.settings.quick()" in setup, nb_path.name


def test_every_chapter_checks_outputs_and_ends_with_exercises():
    for nb_path in CORE:
        nb = json.loads(nb_path.read_text())
        checked = [  # nbval compares these cells' output: tagged, so the reader sees no marker in the code
            "".join(c["source"])
            for c in nb["cells"]
            if c["cell_type"] == "code" and "nbval-check-output" in c["metadata"].get("tags", [])
        ]
        assert len(checked) >= 3, f"{nb_path.name}: {len(checked)} cells tagged nbval-check-output"
        markers = [c for c in nb["cells"] if "NBVAL_" in "".join(c["source"])]
        assert not markers, f"{nb_path.name}: an nbval marker in a cell's source (readers see it): use the cell tag"
        markdown = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
        assert any("\n## Exercises\n" in f"\n{m}\n" for m in markdown), f"{nb_path.name} has no exercises"
        assert any("check(" in src for src in checked), f"{nb_path.name}: exercises without an automatic check"


def test_chapters_are_stored_as_jupyterlab_keeps_them():
    """Opening a chapter changes nothing: its kernelspec is the installed python3 kernel's own
    (JupyterLab rewrites a stale display name at once, and the chapter turns "unsaved"), and no
    live widget state is stored (the panels keep their final state as static HTML output)."""
    from jupyter_client.kernelspec import KernelSpecManager

    display_name = KernelSpecManager().get_kernel_spec("python3").display_name
    for nb_path in CORE:
        meta = json.loads(nb_path.read_text())["metadata"]
        assert meta.get("kernelspec") == {"display_name": display_name, "language": "python", "name": "python3"}, (
            f"{nb_path.name}: {meta.get('kernelspec')}; store it with scripts/store_chapters.py"
        )
        assert "widgets" not in meta, f"{nb_path.name} stores widget state; store it with scripts/store_chapters.py"
        nb = json.loads(nb_path.read_text())
        ids = [c.get("id") for c in nb["cells"]]
        assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5) and all(ids) and len(set(ids)) == len(ids), (
            f"{nb_path.name}: a cell without a unique id (JupyterLab would add one); "
            "store it with scripts/store_chapters.py"
        )
        timed = [i for i, c in enumerate(nb["cells"]) if "execution" in c.get("metadata", {})]
        assert not timed, f"{nb_path.name}: cells {timed} keep timestamps; store it with scripts/store_chapters.py"


def _printed_lines(cell: dict) -> list[str]:
    """The monospaced lines a cell's outputs show: streams, and plain text with no richer form."""
    lines = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            lines += "".join(out["text"]).splitlines()
        elif "data" in out and set(out["data"]) == {"text/plain"}:
            lines += "".join(out["data"]["text/plain"]).splitlines()
    return lines


def test_no_printed_line_is_wider_than_a_notebook_column():
    """JupyterLab breaks a printed line that does not fit anywhere, mid-word ("works|paces"); a line
    of at most kit.tables.WIDTH characters fits the column with the file browser open. Long
    messages are printed through kit.prose.show, which wraps at words."""
    from kit.measurement.tables import WIDTH

    wide = [
        f"{path.name} cell {i}: {len(line)} chars: {line[:60]}..."
        for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
        for i, cell in enumerate(json.loads(path.read_text())["cells"])
        for line in _printed_lines(cell)
        if len(line) > WIDTH
    ]
    assert not wide, "print these through kit.prose.show (and re-store the chapter):\n" + "\n".join(wide)


def test_show_wraps_an_error_at_words_and_keeps_every_word(capsys):
    from kit.measurement.prose import show
    from kit.measurement.tables import WIDTH

    message = "ArrayOverwrittenError: " + " ".join(f"word{i}" for i in range(60))
    show(ValueError(message), "short line")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("ValueError: ArrayOverwrittenError: word0")
    assert printed[-1] == "short line" and len(printed) > 3
    assert all(len(line) <= WIDTH for line in printed)
    assert " ".join(printed[:-1]).split() == ["ValueError:", *message.split()]


# a Markdown table cell cannot wrap a token with no space in it: the longest token of each cell,
# summed over a row, is the row's narrowest width (chapter 5's DL4J row, a builder chain in one code
# span, summed 133 and pushed the kit column past the notebook's edge)
ROW_TOKENS = 110


def test_no_markdown_table_is_wider_than_the_column():
    import re

    wide = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            for line in "".join(cell["source"]).split("\n"):
                if not line.startswith("|") or set(line) <= set("|-: "):
                    continue
                cells = line.strip().strip("|").split("|")
                tokens = [max((len(w) for w in re.sub(r"[`*]", "", x).split()), default=0) for x in cells]
                if sum(tokens) > ROW_TOKENS:
                    wide.append(f"{path.name} cell {i}: {sum(tokens)}: {line[:80]}")
    assert not wide, "break these rows' code spans (a code block beside the table):\n" + "\n".join(wide)


def test_an_unreadable_chapter_is_named_and_the_earlier_book_is_kept(tmp_path):
    """The book was deleted before building: one unreadable chapter then left no book, and the error
    did not name the file."""
    pytest.importorskip("nbformat")
    from kit.book import build_book

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01_good.ipynb").write_text(
        '{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# One"}], "metadata": {}, '
        '"nbformat": 4, "nbformat_minor": 5}'
    )
    (notebooks / "02_bad.ipynb").write_text('{"cells": [')  # cut off mid-write
    out = tmp_path / "book"
    out.mkdir()
    (out / ".buildinfo").write_text("earlier")
    (out / "index.html").write_text("<p>the earlier book</p>")
    with pytest.raises(ValueError, match=r"chapter '.*02_bad\.ipynb' is not a readable notebook") as info:
        build_book(notebooks, out)
    assert "the earlier book is kept" in str(info.value)
    assert (out / "index.html").read_text() == "<p>the earlier book</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book", "notebooks"]


def _one_chapter(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01_one.ipynb").write_text(
        '{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# One"}], "metadata": {}, '
        '"nbformat": 4, "nbformat_minor": 5}'
    )
    return notebooks


def test_an_out_that_is_a_file_is_refused_before_building(tmp_path):
    from kit.book import build_book

    out = tmp_path / "book.html"
    out.write_text("mine")
    with pytest.raises(NotADirectoryError, match=r"--out .*book\.html: that is a file; the book is a folder"):
        build_book(_one_chapter(tmp_path), out)
    assert out.read_text() == "mine"


def test_an_out_that_is_a_link_stays_a_link_and_its_folder_gets_the_book(tmp_path):
    """`--out` a link to an earlier book became a real folder beside the old book, and a link named
    .out.old-PID was left behind."""
    pytest.importorskip("nbformat")
    from kit.book import build_book

    target = tmp_path / "books" / "v1"
    target.mkdir(parents=True)
    (target / ".buildinfo").write_text("earlier")
    (target / "index.html").write_text("<p>the earlier book</p>")
    link = tmp_path / "book"
    link.symlink_to(target)
    index = build_book(_one_chapter(tmp_path), link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert index == link / "index.html" and "the earlier book" not in index.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book", "books", "notebooks"]
    assert sorted(p.name for p in (tmp_path / "books").iterdir()) == ["v1"]
