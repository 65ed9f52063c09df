"""Issue 45 item 8, in a real JupyterLab in a real (headless) Chromium: while a panel updates, the
panel itself says that its cell is still running (JupyterLab's status bar reads "Idle" from the
moment its widget manager asks the kernel for a subshell, kit.panel_live says why), a panel left
open says that its cell has ended, and the live text keeps every number beside its unit.

Skipped where Debian's chromium or the playwright package is absent, as tests/test_browser.py."""

import re
import time
from pathlib import Path

import nbformat
import pytest
from _chromium import ARGS, CHROMIUM, playwright_or_skip, serve_jupyterlab

playwright = playwright_or_skip()

from kit.monitor.panels import UNITS  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NB = "window.jupyterapp.shell.currentWidget"
TRAINING = """import kit
from kit.data import ArrayIterator, load_digits
from kit.nn import Adam, mlp
from kit.parallel import ParallelWrapper

train, _ = load_digits()
net = mlp(64, hidden=(256, 256), n_out=10, updater=Adam(2e-3), seed=0)
it = ArrayIterator(train, 32, shuffle=True, seed=0)
panel = kit.widgets.WorkerPanel(2, total_iterations=40 * len(it), title="2 workers")
with ParallelWrapper(net, workers=2, listeners=[panel]) as pw:
    pw.fit(it, epochs=40)
panel.close()"""
LEFT_OPEN = "left_open = kit.widgets.MemoryPanel()   # never closed"
BREAKABLE = re.compile(r"\d[ \t]+(?:" + "|".join(UNITS) + r")(?![\w/])")


@pytest.fixture
def lab(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TRAINING), nbformat.v4.new_code_cell(LEFT_OPEN)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, tmp_path / "panels.ipynb")
    yield from serve_jupyterlab(tmp_path, tmp_path / "settings")


def _sample(page):
    """(each cell's execution state, the badges' text, the live widgets' text, the kernel status shown)."""
    return page.evaluate(
        f"""() => [{NB}.content.widgets.map(c => c.model.executionState),
                  [...document.querySelectorAll('.kit-live')].map(e => e.innerText),
                  [...document.querySelectorAll('.widget-html-content')].map(e => e.innerText),
                  {NB}.sessionContext.kernelDisplayStatus]"""
    )


@pytest.mark.timeout(240)
def test_a_live_panel_says_its_cell_is_running_and_keeps_units_with_their_numbers(lab):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 900})
        try:
            page.goto(f"{lab}/lab/tree/panels.ipynb?reset", timeout=120_000)
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            page.wait_for_function(
                f"{NB}.sessionContext.session && {NB}.sessionContext.session.kernel "
                f"&& {NB}.sessionContext.session.kernel.status === 'idle'",
                timeout=120_000,
            )
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            while_training, texts, statuses = [], set(), set()
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                page.wait_for_timeout(200)
                states, badges, live, status = _sample(page)
                texts.update(t for t in live if t.strip())
                if states[0] == "running" and live:
                    while_training.append(badges)
                    statuses.add(status)
                if states == ["idle", "idle"] and any("ended" in b for b in badges):
                    break
            states, badges, _, _ = _sample(page)
        finally:
            page.close()
            browser.close()
    assert states == ["idle", "idle"], f"the two cells did not finish in 150 s: {states}"
    assert while_training, "the worker panel never showed while its cell ran"
    # every sample taken while the training cell ran shows its badge saying so (JupyterLab's own
    # status read {statuses} meanwhile)
    assert all(any("running" in b for b in seen) for seen in while_training), (while_training, statuses)
    # the closed panel left its static final state (no badge); the one left open says its cell ended
    assert badges == ["■ its cell has ended"], badges
    units = [t for t in texts if "\u00a0s" in t or "\u00a0ms" in t or "\u00a0B" in t or "\u00a0MiB" in t]
    assert units, f"no number with a unit seen in the live panels: {texts}"
    assert not [t for t in texts if BREAKABLE.search(t)], [t for t in texts if BREAKABLE.search(t)]
