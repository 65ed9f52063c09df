"""Every chapter, run top to bottom in a real JupyterLab in a real (headless) Chromium.

Runs where Debian's chromium and the playwright package are installed (.ci/run installs both
when it can); skipped elsewhere. For each chapter, in quick mode: no JavaScript error on the
page, no traceback in any output, every live panel updates while it runs and ends as its static
final state. A screenshot per chapter is kept in build/screenshots/ (KIT_ARTIFACTS overrides)."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

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
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NB = "window.jupyterapp.shell.currentWidget"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    for name in CHAPTERS:
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", root)
    port = free_port()
    env = dict(os.environ, KIT_QUICK="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--IdentityProvider.token=",
        "--LabApp.expose_app_in_browser=True",
        "--ServerApp.port_retries=0",
        f"--port={port}",
        f"--ServerApp.root_dir={root}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _state(page):
    """(code cells, cells with an execution count, cells running or queued)."""
    return page.evaluate(
        f"""() => {{
        const cells = {NB}.content.widgets.filter(c => c.model.type === 'code');
        const prompts = cells.map(c => c.node.querySelector('.jp-InputPrompt')?.innerText || '');
        return [cells.length, cells.filter(c => c.model.executionCount).length,
                prompts.filter(p => p.includes('*')).length];
    }}"""
    )


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
        # started, not awaited: the command's promise resolves only when every cell is done
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        live, deadline = set(), time.monotonic() + 600
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            live.update(page.eval_on_selector_all(".widget-html-content", "els => els.map(e => e.innerText)"))
            total, done, running = _state(page)
            if done == total and running == 0:
                break
        total, done, running = _state(page)
        assert done == total and running == 0, f"{chapter}: {done} of {total} cells ran in 600 s"
        outputs = page.eval_on_selector_all(".jp-OutputArea-output", "els => els.map(e => e.innerText)")
        tracebacks = [o for o in outputs if "Traceback (most recent call last)" in o or "Error Traceback" in o]
        assert not tracebacks, f"{chapter}: {tracebacks[0][-1500:]}"
        assert not js_errors, f"{chapter}: JavaScript errors {js_errors}"
        finals = page.eval_on_selector_all(".kit-panel", "els => els.map(e => e.innerText)")
        if CHAPTERS[chapter]:
            assert len([t for t in live if t.strip()]) >= 2, f"{chapter}: the live panels never updated: {live}"
            assert finals, f"{chapter}: no panel left its final state"
            assert page.eval_on_selector_all(".widget-hprogress", "els => els.length") == 0  # all replaced
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if finals:
            page.eval_on_selector(".kit-panel", "e => e.scrollIntoView()")
        page.screenshot(path=str(ARTIFACTS / f"{chapter}.png"))
    finally:
        page.close()
