"""The book as a reader gets it: `kit.book.build_book` on the repository's notebooks, then the index
and chapter pages opened from file:// in a real headless Chromium with the network cut off.

Every request that is not file:// (or data:/blob:/about:) is aborted and recorded, and the test
fails if there was one: the pages must work with no network, math and search included. Skipped
only where Debian's chromium or the playwright package is absent. Two screenshots are kept in
/tmp/book_shots/ (KIT_BOOK_SHOTS overrides)."""

import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra has it)")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

from kit.book import build_book, chapter_title  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
SHOTS = Path(os.environ.get("KIT_BOOK_SHOTS", "/tmp/book_shots"))
from _chromium import ARGS  # noqa: E402  (one launch recipe for every browser test)

MATH = "04_multi_device_training"  # the chapter with display math
SEARCHED = "03_training_with_workspaces"
LOCAL = ("file:", "data:", "blob:", "about:")
SETUP_SOURCE = "kit must be importable in this kernel"  # from the first code cell of every chapter

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    out = tmp_path_factory.mktemp("book") / "site"
    start = time.perf_counter()
    index = build_book(NOTEBOOKS, out)
    print(f"\nbook built in {time.perf_counter() - start:.1f} s")
    return index.parent


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def offline(browser):
    """A page whose every non-local request is aborted; yields (page, requests that tried to leave, JS errors)."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    left, errors = [], []

    def route(r):
        if r.request.url.startswith(LOCAL):
            r.continue_()
        else:
            left.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("request", lambda r: None if r.url.startswith(LOCAL) else left.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    # a file the book does not hold (MathJax loads its parts on demand): an error, like a JS error
    page.on("requestfailed", lambda r: errors.append(f"{r.url}: {r.failure}") if r.url.startswith("file:") else None)
    yield page, left, errors
    context.close()


def _open(page, path: Path):
    page.goto(path.as_uri())
    page.wait_for_load_state("load")


def _article(page) -> str:
    return page.inner_text("article.bd-article")


def _chapters():
    return sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))


def test_book_pages_work_offline(book, offline):
    page, left, errors = offline
    _open(page, book / "index.html")
    sidebar = page.locator("nav.bd-links").inner_text()
    titles = [chapter_title(nbformat.read(p, as_version=4)) for p in _chapters()]
    assert len(titles) >= 8 and len(set(titles)) == len(titles)  # every chapter, each with its own title
    for title in titles:
        assert title in sidebar, f"the sidebar does not list {title!r}"
        assert title in _article(page), f"the index does not list {title!r}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "index.png"))

    for stem in (SEARCHED, MATH):
        _open(page, book / f"{stem}.html")
        text = _article(page)
        assert page.title().startswith(chapter_title(nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)))
        assert SETUP_SOURCE not in text and SETUP_SOURCE not in page.content(), f"{stem}: the setup cell is shown"
        assert "In [" not in text, f"{stem}: execution prompts are shown"
        assert page.locator("nav.page-toc a").count() >= 3, f"{stem}: no in-page table of contents"
        assert "Run it" in text and page.locator(f'a[href="{stem}.ipynb"]').count() == 1
        assert (book / f"{stem}.ipynb").is_file()
        stored = sum("*Figure:" in "".join(c.source) for c in nbformat.read(NOTEBOOKS / f"{stem}.ipynb", 4).cells)
        assert text.count("Figure:") >= stored > 0, f"{stem}: figure captions are missing"
    assert not left, f"requests left the machine: {left}"
    assert not errors, f"JavaScript errors: {errors}"


def test_math_is_typeset_from_the_local_mathjax(book, offline):
    page, left, errors = offline
    loaded = []
    page.on("requestfinished", lambda r: loaded.append(r.url) if "/_static/mathjax/" in r.url else None)
    _open(page, book / f"{MATH}.html")
    page.wait_for_selector("mjx-container", timeout=20_000)
    page.wait_for_function("() => !document.querySelector('.math:not(:has(mjx-container))')", timeout=20_000)
    text = _article(page)
    assert "$$" not in text and "\\begin" not in text and "\\frac" not in text, "raw TeX is visible"
    assert page.locator("mjx-container[display=true]").count() >= 1
    assert page.locator("mjx-container").count() >= 10  # inline math too ($N$, $F$, ...)
    page.locator("mjx-container[display=true]").first.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -250)")
    page.screenshot(path=str(SHOTS / f"{MATH}_math.png"))
    assert not left, f"requests left the machine: {left}"
    assert not errors, f"JavaScript errors: {errors}"
    # what the page loaded of MathJax is what the book copied (kit.book.MATHJAX_FILES), every file there
    from kit.book import MATHJAX_BUNDLE, MATHJAX_FILES

    names = sorted({url.split("/_static/mathjax/", 1)[1] for url in loaded})
    assert MATHJAX_BUNDLE in names and any(n.endswith(".woff") for n in names), names
    outside = [n for n in names if not any(n == f or n.startswith(f"{f}/") for f in MATHJAX_FILES)]
    assert not outside, f"the page loaded MathJax files the book does not copy: {outside}"
    assert all((book / "_static" / "mathjax" / n).is_file() for n in names), names


def test_search_finds_a_chapter_from_file_urls(book, offline):
    page, left, errors = offline
    _open(page, book / "search.html")
    page.goto((book / "search.html").as_uri() + "?q=prefetch")  # a word of chapter 3's
    link = page.locator(f'#search-results a[href*="{SEARCHED}.html"]')
    link.first.wait_for(timeout=20_000)
    link.first.click()
    page.wait_for_load_state("load")
    assert page.url.split("?")[0].endswith(f"{SEARCHED}.html")
    assert not left, f"requests left the machine: {left}"
    assert not errors, f"JavaScript errors: {errors}"


def test_wide_outputs_scroll_inside_their_box(book, offline):
    page, _, _ = offline
    page.set_viewport_size({"width": 900, "height": 900})
    for stem in [p.stem for p in _chapters()]:
        _open(page, book / f"{stem}.html")
        doc = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert doc[0] <= doc[1] + 1, f"{stem}: the page itself scrolls sideways ({doc})"
        wide = page.evaluate(
            """() => [...document.querySelectorAll('article table')]
                .filter(t => t.scrollWidth > t.clientWidth + 1)
                .map(t => getComputedStyle(t).overflowX)"""
        )
        assert all(o in ("auto", "scroll") for o in wide), f"{stem}: a wide table does not scroll ({wide})"


def test_every_stored_panel_fits_the_column_whole(book, offline):
    """A panel (a progress line, a timing or memory panel) is read whole in the book's column at
    900 px: its cells wrap instead of hiding the label or the figures past the edge of a box."""
    page, _, _ = offline
    page.set_viewport_size({"width": 900, "height": 900})
    panels = 0
    for stem in [p.stem for p in _chapters()]:
        _open(page, book / f"{stem}.html")
        sizes = page.evaluate(
            """() => [...document.querySelectorAll('article .kit-panel')].map(p => [
                Math.max(...[...p.querySelectorAll('table')].map(t => t.scrollWidth - t.clientWidth), 0),
                p.offsetWidth, p.closest('.cell_output').clientWidth, p.innerText.slice(0, 60)])"""
        )
        panels += len(sizes)
        cut = [s for s in sizes if s[0] > 1 or s[1] > s[2] + 1]  # a table that scrolls, a panel past its column
        assert not cut, f"{stem}: panels wider than their column: {cut}"
    assert panels >= 20, panels  # every chapter's long cells leave one


def test_stored_panels_are_static_html_and_no_widget_manager_is_loaded(book):
    html = (book / "02_workspaces.html").read_text(encoding="utf-8")
    assert "kit-panel" in html, "the stored panels are missing"
    assert "require.js" not in html and "html-manager" not in html and "widget-state" not in html
    for page in book.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|link|img)\b[^>]*(?:src|href)="(https?:[^"]+)"', text)
        assert not external, f"{page.name} loads {external}"
