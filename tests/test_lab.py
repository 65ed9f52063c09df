"""`python -m kit lab`: JupyterLab on the chapters, also as root (containers, cloud notebooks)."""

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from kit.__main__ import lab_command, notebooks_dir


def test_lab_command_adds_allow_root_only_for_root():
    assert "--allow-root" in lab_command(notebooks_dir(), euid=0)
    assert "--allow-root" not in lab_command(notebooks_dir(), euid=1000)
    cmd = lab_command(notebooks_dir(), ["--port=9999"], euid=1000)
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"] and cmd[-1] == "--port=9999"
    assert any(a.endswith("notebooks") for a in cmd)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_python_m_kit_lab_serves_the_chapters():
    """Started exactly as the README says, as whoever runs the tests (root in CI containers)."""
    pytest.importorskip("jupyterlab")
    port = _free_port()
    args = ["--no-browser", f"--port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token="]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit", "lab", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        body, deadline = "", time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents", timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert proc.poll() is None, f"jupyter lab exited (euid {os.geteuid()}): {proc.stderr.read()[-2000:]}"
        assert "01_arrays_and_backends.ipynb" in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)
