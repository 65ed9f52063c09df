"""`python -m kit lab`: JupyterLab on the chapters, also as root (containers, cloud notebooks)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import kit
from kit.__main__ import lab_command, notebooks_dir

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


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


def _serve(cmd, port, cwd=None, env=None, path="api/contents"):
    """Start `cmd` (a JupyterLab on `port`), wait (bounded) for its REST API; returns (the process, the
    answer to `path`). The caller terminates the process."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    body, deadline = "", time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as r:
                body = r.read().decode()
            break
        except OSError:
            time.sleep(0.5)
    return proc, body


LAB_ARGS = ["--no-browser", "--ServerApp.port_retries=0", "--IdentityProvider.token="]


def test_python_m_kit_lab_serves_the_chapters():
    """Started exactly as the README says, as whoever runs the tests (root in CI containers)."""
    pytest.importorskip("jupyterlab")
    port = _free_port()
    proc, body = _serve([sys.executable, "-m", "kit", "lab", f"--port={port}", *LAB_ARGS], port)
    try:
        assert proc.poll() is None, f"jupyter lab exited (euid {os.geteuid()}): {proc.stderr.read()[-2000:]}"
        assert "01_arrays_and_backends.ipynb" in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_lab_outside_a_checkout_copies_the_wheels_chapters_and_serves_them(tmp_path):
    """kit as a wheel installs it (the package with kit/chapters/, no checkout): `python -m kit lab`
    in an empty folder copies the chapters into ./notebooks and JupyterLab serves them from there."""
    pytest.importorskip("jupyterlab")
    site = tmp_path / "site"
    shutil.copytree(Path(kit.__file__).parent, site / "kit", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "kit" / "chapters").mkdir()
    for path in CHAPTERS:
        shutil.copyfile(path, site / "kit" / "chapters" / path.name)
    work = tmp_path / "work"
    work.mkdir()
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(site))
    cmd = [sys.executable, "-m", "kit", "lab", f"--port={port}", *LAB_ARGS]
    proc, body = _serve(cmd, port, cwd=work, env=env)
    try:
        assert proc.poll() is None, f"jupyter lab exited: {proc.stderr.read()[-2000:]}"
        served = sorted(item["name"] for item in json.loads(body)["content"])
        assert served == [p.name for p in CHAPTERS], served  # its root is the copy, ./notebooks
        assert sorted(p.name for p in (work / "notebooks").iterdir()) == served
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert f"{len(CHAPTERS)} chapters copied to {work / 'notebooks'}" in proc.stderr.read()
