"""The live memory panel in a real JupyterLab, in a real (headless) Chromium.

Runs where Debian's chromium and the playwright package are installed (.ci/run installs both
when it can); skipped elsewhere. It runs chapter 2 in quick mode and reads the panel's text."""

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

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    port = free_port()
    shutil.copy(NOTEBOOKS / "02_workspaces.ipynb", tmp_path)
    env = dict(os.environ, KIT_QUICK="1")
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
        f"--ServerApp.root_dir={tmp_path}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def test_memory_panel_updates_live_in_jupyterlab(lab):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(f"{lab}/lab/tree/02_workspaces.ipynb?reset", timeout=120_000)
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            page.wait_for_function(
                "window.jupyterapp.shell.currentWidget.sessionContext.session !== null", timeout=120_000
            )
            page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.restartKernel()")
            page.wait_for_timeout(2000)
            # started, not awaited: the command's promise resolves only when every cell is done
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            text = ""
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and "cycles 100" not in text:
                page.wait_for_timeout(1000)
                page.evaluate(
                    "(async () => { const nb = window.jupyterapp.shell.currentWidget.content;"
                    " nb.activeCellIndex = 5; await nb.scrollToItem(5, 'start'); })()"
                )
                text = " | ".join(page.eval_on_selector_all(".widget-html-content", "els => els.map(e => e.innerText)"))
            assert "MLP_STEP" in text and "cycles 100" in text, text
            assert "workspace loop: 100/100" in text
            bars = page.eval_on_selector_all(".widget-hprogress", "els => els.length")
            assert bars >= 2
        finally:
            browser.close()
