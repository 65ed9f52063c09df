"""kit as Colab gets it: a wheel (built as the README says, `python -m build`), installed with a normal
pip install into a fresh venv outside the repository; its chapters copied out of it with
`python -m kit chapters DIR`, then one run from there in quick mode (its first cell installs kit from
KIT_PIP_SPEC, as it does on Colab, and the chapter loads the digits shipped as package data).

Dependencies come from pip's configured index/cache (PyPI or a mirror); skipped when pip cannot
reach one."""

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from _builds import repo_build_lock
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHAPTER = "06_early_stopping.ipynb"
DISTRIBUTION = "gpu-workspaces-kit"  # pip's name for kit (the `kit` on PyPI is someone else's)

pytestmark = pytest.mark.slow


def _run(cmd, env=None, **kw):
    """A subprocess that sees no PYTHONPATH: a checkout on it (and the egg-info a build leaves there)
    would make a fresh venv's pip find kit "already installed" and import it from the checkout."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=500, env=env, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """`python -m build` as the README says, without build isolation (offline: the dev extra has
    setuptools and trove-classifiers)."""
    pytest.importorskip("build", reason="the dev extra has build")
    out = tmp_path_factory.mktemp("wheel")
    with repo_build_lock():  # the sdist's test may build from the checkout in the other process
        r = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(REPO)])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (path,) = out.glob("gpu_workspaces_kit-*.whl")
    return path


def test_the_wheel_is_the_one_the_readme_names(wheel):
    assert f"`dist/{wheel.name}`" in (REPO / "README.md").read_text()


def test_wheel_ships_the_data_the_chapters_and_py_typed_as_package_data(wheel):
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "kit/data/digits.csv.gz" in names and "kit/data/README.md" in names and "kit/py.typed" in names
    assert not any(n.startswith(("tests/", "notebooks/", "data/")) for n in names)
    # every chapter, as stored: a wheel alone is enough to learn from (setup.py's build step)
    assert sorted(n for n in names if n.startswith("kit/chapters/")) == [f"kit/chapters/{p.name}" for p in CHAPTERS]
    for path in CHAPTERS:
        assert archive.read(f"kit/chapters/{path.name}") == path.read_bytes(), path.name


def test_wheel_metadata_names_the_distribution_and_its_licence(wheel):
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    text = archive.read(metadata).decode()
    assert f"Name: {DISTRIBUTION}\n" in text
    assert "License-Expression: Apache-2.0\n" in text and "License-File: LICENSE\n" in text  # PEP 639
    assert (
        f"Author: {PROJECT['authors'][0]['name']}\n" in text and f"Keywords: {','.join(PROJECT['keywords'])}\n" in text
    )
    assert [line[len("Classifier: ") :] for line in text.splitlines() if line.startswith("Classifier: ")] == (
        PROJECT["classifiers"]
    )
    licence = archive.read(metadata.replace("METADATA", "licenses/LICENSE")).decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence and "END OF TERMS" in licence
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "kit = kit.__main__:main" in archive.read(entry_points).decode()


KERNEL = ["ipykernel", "nbclient"]  # what running a chapter needs beside kit


def _venv_with_pip(venv: Path) -> None:
    """A fresh venv with pip in it. The venv module's own seeding (ensurepip) byte-compiles all of pip,
    most of a minute on a loaded 2-core machine; this interpreter's pip installs pip into it uncompiled
    instead (`pip --python`, pip >= 22.3), and ensurepip is the fallback where that fails."""
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    py = str(venv / "bin" / "python")
    seeded = _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-compile", "pip"])
    if seeded.returncode != 0:
        fallback = _run([py, "-m", "ensurepip"])
        assert fallback.returncode == 0, (seeded.stderr + fallback.stdout + fallback.stderr)[-3000:]


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory):
    """A fresh venv outside the repository with the wheel installed by a normal pip install (kit's own
    dependencies come with it), plus the kernel and the runner a chapter needs."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    _venv_with_pip(venv)
    # --no-compile: no .pyc written ahead for every installed module (numpy, matplotlib, IPython, ...), which
    # took most of this set-up; Python compiles what is imported when it is imported
    r = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel), *KERNEL])
    if r.returncode != 0 and "No matching distribution" in r.stderr:
        pytest.skip(f"pip cannot reach an index here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def reader(fresh_venv, tmp_path_factory):
    """A reader's folder, outside any checkout, with the chapters copied out of the installed wheel."""
    work = tmp_path_factory.mktemp("reader")
    r = _run([str(fresh_venv / "bin" / "kit"), "chapters", "chapters"], cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"{len(CHAPTERS)} chapters copied to chapters: open them with `kit lab --dir chapters`"
    return work


def test_the_console_script_says_the_installed_version(fresh_venv):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    r = _run([str(fresh_venv / "bin" / "kit"), "--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"{DISTRIBUTION} {version}", r.stdout + r.stderr
    assert _run([str(fresh_venv / "bin" / "kit"), "-h"]).stdout.startswith("usage: kit ")


def test_the_chapters_come_out_of_the_wheel_byte_for_byte(wheel, reader):
    archive = zipfile.ZipFile(wheel)
    for path in CHAPTERS:  # what the wheel carries, byte for byte
        assert (reader / "chapters" / path.name).read_bytes() == archive.read(f"kit/chapters/{path.name}"), path.name


def test_lab_without_jupyterlab_names_what_pypi_can_install(fresh_venv, reader):
    """One line whose pip command installs what the lab extra holds (from PyPI: kit itself is not
    there yet), read from the installed wheel's metadata."""
    r = _run([str(fresh_venv / "bin" / "kit"), "lab"], cwd=reader)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    # as the wheel's metadata writes them (packaging's normal form: "pandas<3,>=2.2")
    lab = [str(Requirement(req)) for req in PROJECT["optional-dependencies"]["lab"]]
    assert line.endswith(
        "pip install " + " ".join(f'"{req}"' for req in lab) + f" (the lab extra of {DISTRIBUTION})"
    ), line
    assert re.search(r"needs jupyterlab\b", line) and not (reader / "notebooks").exists()


def test_a_chapter_copied_out_runs_and_its_first_cell_installs_kit(wheel, fresh_venv, reader):
    """kit itself removed, so the chapter's first cell must install it from KIT_PIP_SPEC (the Colab path)."""
    py = fresh_venv / "bin" / "python"
    assert _run([str(py), "-m", "pip", "uninstall", "-y", "-q", DISTRIBUTION]).returncode == 0
    nb_path = reader / "chapters" / CHAPTER
    runner = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "nb.cells.append(nbformat.v4.new_code_cell('import kit; print(kit.__file__)'))\n"
        "client = NotebookClient(nb, timeout=300, kernel_name='python3')\n"
        "client.execute(cwd=sys.argv[2])\n"
        "nbformat.write(nb, sys.argv[1])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(KIT_QUICK="1", KIT_PIP_SPEC=str(wheel), PATH=f"{fresh_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    r = _run([str(py), "-c", runner, str(nb_path), str(nb_path.parent)], cwd=reader, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    nb = nbformat.read(nb_path, as_version=4)  # stream text joined into one string per output
    first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert f"installing {wheel} ..." in first and "mode: quick" in first
    where = "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()
    assert where.startswith(str(fresh_venv)), f"kit was imported from {where}, not from the venv"
