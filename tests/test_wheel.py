"""kit as Colab gets it: a wheel, installed with a normal pip install into a fresh venv outside
the repository, then a chapter run from there in quick mode (its first cell installs kit from
KIT_PIP_SPEC, as it does on Colab, and the chapter loads the digits shipped as package data).

Dependencies come from pip's configured index/cache (PyPI or a mirror); skipped when pip cannot
reach one."""

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTER = "06_early_stopping.ipynb"
DISTRIBUTION = "gpu-workspaces-kit"  # pip's name for kit (the `kit` on PyPI is someone else's)

pytestmark = pytest.mark.slow


def _run(cmd, env=None, **kw):
    """A subprocess that sees no PYTHONPATH: a checkout on it (and the egg-info a build leaves there)
    would make a fresh venv's pip find kit "already installed" and import it from the checkout."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob("gpu_workspaces_kit-*.whl")
    return path


def test_wheel_ships_the_data_as_package_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "kit/data/digits.csv.gz" in names and "kit/data/README.md" in names
    assert not any(n.startswith(("tests/", "notebooks/", "data/")) for n in names)


def test_wheel_metadata_names_the_distribution_and_its_licence(wheel):
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    text = archive.read(metadata).decode()
    assert f"Name: {DISTRIBUTION}\n" in text
    assert "License-Expression: Apache-2.0\n" in text and "License-File: LICENSE\n" in text  # PEP 639
    licence = archive.read(metadata.replace("METADATA", "licenses/LICENSE")).decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence and "END OF TERMS" in licence
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "kit = kit.__main__:main" in archive.read(entry_points).decode()


def test_chapter_runs_from_a_fresh_venv_outside_the_repo(wheel, tmp_path):
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py = venv / "bin" / "python"
    # the kernel and the runner; kit's own dependencies come with the wheel ...
    r = _run([str(py), "-m", "pip", "install", "-q", str(wheel), "ipykernel", "nbclient"])
    if r.returncode != 0 and "No matching distribution" in r.stderr:
        pytest.skip(f"pip cannot reach an index here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    # the console script says the installed distribution's version, and its own name in its usage
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    r = _run([str(venv / "bin" / "kit"), "--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"{DISTRIBUTION} {version}", r.stdout + r.stderr
    assert _run([str(venv / "bin" / "kit"), "-h"]).stdout.startswith("usage: kit ")
    # ... then kit itself is removed, so the chapter's first cell must install it (the Colab path)
    assert _run([str(py), "-m", "pip", "uninstall", "-y", "-q", DISTRIBUTION]).returncode == 0
    work = tmp_path / "reader"
    work.mkdir()
    nb_path = work / CHAPTER
    nb_path.write_text((REPO / "notebooks" / CHAPTER).read_text())
    runner = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "nb.cells.append(nbformat.v4.new_code_cell('import kit; print(kit.__file__)'))\n"
        "client = NotebookClient(nb, timeout=600, kernel_name='python3')\n"
        "client.execute(cwd=sys.argv[2])\n"
        "nbformat.write(nb, sys.argv[1])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(KIT_QUICK="1", KIT_PIP_SPEC=str(wheel), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    r = _run([str(py), "-c", runner, str(nb_path), str(work)], cwd=work, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    nb = nbformat.read(nb_path, as_version=4)  # stream text joined into one string per output
    first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert f"installing {wheel} ..." in first and "mode: quick" in first
    where = "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()
    assert where.startswith(str(venv)), f"kit was imported from {where}, not from the venv"
