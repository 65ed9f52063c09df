"""Every chapter, run top to bottom in a real JupyterLab in a real (headless) Chromium.

Runs where Debian's chromium and the playwright package are installed (.ci/run installs both
when it can); skipped elsewhere. For each chapter, in quick mode: no JavaScript error on the
page, no traceback in any output, every live panel updates while it runs and ends as its static
final state. A screenshot per chapter is kept in build/screenshots/ (KIT_ARTIFACTS overrides).
And every stored chapter, opened as it is committed, stays clean: JupyterLab does not mark it
modified (a kernelspec or metadata it rewrites on open would, and the reader is asked to save a
notebook they never touched)."""

import os
import shutil
import time
from pathlib import Path

import pytest
from _chromium import ARGS, CHROMIUM, playwright_or_skip, serve_jupyterlab

playwright = playwright_or_skip()

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = Path(os.environ.get("KIT_ARTIFACTS", REPO / "build" / "screenshots"))
# chapter -> whether it shows live panels (kit.widgets)
CHAPTERS = {
    "01_arrays_and_backends": False,
    "02_workspaces": True,
    "03_training_with_workspaces": True,
    "04_multi_device_training": True,
    "05_parallel_inference": False,
    "06_early_stopping": False,
}

NB = "window.jupyterapp.shell.currentWidget"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    for name in CHAPTERS:
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", root)
    pristine = root / "pristine"  # never run here, so autosave cannot rewrite them before they are checked
    pristine.mkdir()
    for path in NOTEBOOKS.glob("[0-9]*.ipynb"):
        shutil.copy(path, pristine)
    yield from serve_jupyterlab(root, tmp_path_factory.mktemp("settings"), {"KIT_QUICK": "1"})


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _state(page):
    """(code cells, cells with an execution count, cells running or queued); scrolls the running
    cell into view (JupyterLab renders only the cells near the viewport)."""
    return page.evaluate(
        f"""async () => {{
        const nb = {NB}.content;
        const cells = nb.widgets.filter(c => c.model.type === 'code');
        const running = nb.widgets.findIndex(c => c.model.type === 'code' && c.model.executionState === 'running');
        if (running >= 0) {{ await nb.scrollToItem(running, 'center'); }}
        return [cells.length, cells.filter(c => c.model.executionCount).length,
                nb.widgets.filter(c => c.model.type === 'code' && c.model.executionState === 'running').length];
    }}"""
    )


def _outputs(page):
    """Every code cell's outputs, from the notebook model (rendered or not)."""
    return page.evaluate(
        f"""() => {{
        const cells = {NB}.content.model.cells, out = [];
        for (let i = 0; i < cells.length; i++) {{
            const c = cells.get(i);
            if (c.type === 'code') out.push(c.outputs.toJSON());
        }}
        return out;
    }}"""
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_chapter_runs_in_jupyterlab(lab, browser, chapter):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    js_errors = []
    page.on("pageerror", lambda e: js_errors.append(str(e)))
    try:
        page.goto(f"{lab}/lab/tree/{chapter}.ipynb?reset", timeout=120_000)
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        page.wait_for_function(f"{NB}.sessionContext.session !== null", timeout=120_000)
        page.evaluate(f"{NB}.sessionContext.restartKernel()")
        page.wait_for_timeout(2000)
        # every text any widget shows while the chapter runs, however briefly
        page.evaluate(
            """() => { window.__kitLive = new Set();
            new MutationObserver(() => document.querySelectorAll('.widget-html-content')
                .forEach(e => window.__kitLive.add(e.innerText)))
            .observe(document.body, {subtree: true, childList: true, characterData: true}); }"""
        )
        # started, not awaited: the command's promise resolves only when every cell is done
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        deadline = time.monotonic() + 720
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            total, done, running = _state(page)
            if done == total and running == 0:
                break
        total, done, running = _state(page)
        live = set(page.evaluate("() => [...window.__kitLive]"))
        assert done == total and running == 0, f"{chapter}: {done} of {total} cells ran in 720 s ({running} running)"
        outputs = [o for cell in _outputs(page) for o in cell]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        assert not errors, f"{chapter}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        assert not js_errors, f"{chapter}: JavaScript errors {js_errors}"
        data = [o.get("data", {}) for o in outputs]
        finals = [d["text/html"] for d in data if "kit-panel" in str(d.get("text/html", ""))]
        assert not any(WIDGET in d for d in data), f"{chapter}: a live widget was left in the output"
        if CHAPTERS[chapter]:
            assert len([t for t in live if t.strip()]) >= 2, f"{chapter}: the live panels never updated: {live}"
            assert finals, f"{chapter}: no panel left its final state"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        first = next((i for i, cell in enumerate(_outputs(page)) if "kit-panel" in str(cell)), 0)
        page.evaluate(f"""async () => {{
            const nb = {NB}.content;
            const code = nb.widgets.map((c, i) => [c, i]).filter(([c]) => c.model.type === 'code');
            await nb.scrollToItem(code[{first}][1], 'start');
        }}""")
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / f"{chapter}.png"))
    finally:
        page.close()


CLEAN_WAIT_MS = 5000  # how long an opened chapter must stay unmodified once its kernel is up


@pytest.mark.timeout(300)
@pytest.mark.parametrize("chapter", sorted(p.stem for p in NOTEBOOKS.glob("[0-9]*.ipynb")))
def test_opening_a_stored_chapter_leaves_it_clean(lab, browser, chapter):
    """No dirty mark (`jp-mod-dirty` on the tab, `model.dirty`) within a few seconds of opening."""
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    try:
        page.goto(f"{lab}/lab/tree/pristine/{chapter}.ipynb?reset", timeout=120_000)
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        page.wait_for_function(f"{NB} && {NB}.context && {NB}.context.isReady", timeout=120_000)
        page.wait_for_function(  # the kernel started: the moment JupyterLab writes its kernelspec
            f"{NB}.sessionContext.session && {NB}.sessionContext.session.kernel", timeout=120_000
        )
        dirty = False
        try:
            page.wait_for_function(
                f"{NB}.context.model.dirty || !!document.querySelector('.jp-mod-dirty')", timeout=CLEAN_WAIT_MS
            )
            dirty = True
        except playwright.TimeoutError:
            pass
        if dirty:
            changed = page.evaluate(
                f"""() => {{ const m = {NB}.context.model;
                return JSON.stringify({{kernelspec: m.getMetadata('kernelspec'), keys: Object.keys(m.metadata)}}); }}"""
            )
            pytest.fail(f"{chapter}: JupyterLab marked it modified on opening (metadata now {changed})")
    finally:
        page.evaluate(f"() => {NB} && {NB}.sessionContext.shutdown()")  # seven idle kernels would slow the rest
        page.close()
