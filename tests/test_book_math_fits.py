"""Issue 45 item 8: chapter 4's display equation was cut at the column's edge in the book. Every
display equation of every chapter (the chapters whose Markdown has one are built into a book of
their own), typeset by the book's MathJax in a real (headless) Chromium, fits its column, at the
book's desktop width (both sidebars shown: the narrowest text column) and at a phone's.

Skipped where Debian's chromium, playwright or the book extra (Sphinx, MyST-NB) is absent."""

import json
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytest.importorskip("myst_nb", reason="the book extra is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

from _chromium import ARGS  # noqa: E402

from kit.book import build_book  # noqa: E402

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WIDTHS = (1200, 400)  # px: the desktop layout's narrowest column (624 px) and a phone's (368 px)
MEASURE = """() => [...document.querySelectorAll('mjx-container[display="true"]')].map(m => {
    const math = m.querySelector('mjx-math').getBoundingClientRect();
    return [Math.round(math.width), m.clientWidth, m.textContent.slice(0, 40)]; })"""


def _with_display_math() -> list[Path]:
    """The chapters with a display equation ($$ ... $$) in a Markdown cell."""
    out = []
    for path in sorted(NOTEBOOKS.glob("[0-9]*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        if any(c["cell_type"] == "markdown" and "$$" in "".join(c["source"]) for c in cells):
            out.append(path)
    return out


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    chapters = tmp_path_factory.mktemp("chapters")
    for path in _with_display_math():
        shutil.copy(path, chapters)
    return build_book(chapters, tmp_path_factory.mktemp("book") / "site").parent


def test_chapter_4_is_among_the_chapters_measured():
    assert "04_multi_device_training.ipynb" in [p.name for p in _with_display_math()]


@pytest.mark.timeout(300)
def test_every_display_equation_fits_its_column(book):
    pages = sorted(book.glob("0*.html"))
    too_wide, counted = [], 0
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                for html in pages:
                    page.goto(html.as_uri())
                    page.wait_for_load_state("load")
                    if page.evaluate("() => !!document.querySelector('mjx-container, .math')"):
                        page.wait_for_function(
                            "() => [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-math'))",
                            timeout=60_000,
                        )
                    for math_w, column_w, text in page.evaluate(MEASURE):
                        counted += 1
                        if math_w > column_w:
                            too_wide.append(f"{html.stem} at {width} px: {math_w} px in {column_w} px: {text!r}")
                page.close()
        finally:
            browser.close()
    assert counted >= len(WIDTHS) * 2, f"only {counted} display equations measured: is MathJax typesetting?"
    assert not too_wide, "\n".join(too_wide)
