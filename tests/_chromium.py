"""How the real-browser tests launch Debian's chromium through playwright (headless, no network
chatter of its own), and the JupyterLab server the JupyterLab tests drive: shared by
tests/test_browser.py, tests/test_panels_browser.py and the book's tests."""

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's: .ci/run installs it, nothing downloads


def playwright_or_skip() -> ModuleType:
    """playwright's sync API; skips the calling test module where playwright or Debian's chromium
    is absent (call it at module level)."""
    sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra has it)")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed", allow_module_level=True)
    return sync


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


def serve_jupyterlab(root: Path, settings: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """A JupyterLab server for `root` on a free local port, every cell rendered (windowing off, so a
    panel that lives only briefly is still drawn); yields its address and stops it after. Its user
    settings go to `settings`; `env` adds variables (KIT_QUICK=1, ...) to the server's and kernels'.
    The checkout is on the kernels' path, as in the suite."""
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    full_env = dict(os.environ, **(env or {}), PYTHONPATH=path)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--IdentityProvider.token="]
    cmd += ["--LabApp.expose_app_in_browser=True", "--ServerApp.port_retries=0", f"--port={port}"]
    cmd += [f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=full_env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
