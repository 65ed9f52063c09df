"""kit as a stranger first meets it: the package's metadata and licence, the sdist (complete enough
to run its tests), environment.yml in step with pyproject, every chapter's first cell where pip
cannot install kit (kit is not on PyPI yet), scripts/gpu-check with a Python that lacks kit's
dependencies, bench train's quick run, and the README's one install for every chapter.

The wheel itself (the chapters in it, `python -m kit chapters` from a wheel-only venv) is
tests/test_wheel.py's."""

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from _builds import repo_build_lock

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
README = (REPO / "README.md").read_text()
ENVIRONMENT = (REPO / "environment.yml").read_text()
_TEXT = {"capture_output": True, "text": True, "timeout": 120}
SPEC_DEFAULT = re.compile(r'os\.environ\.get\("KIT_PIP_SPEC", ""\)\.strip\(\) or "([^"]+)"')


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]


def _run(cmd, env=None, **kw):
    """A subprocess without PYTHONPATH (a checkout on it would be the kit that runs)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, env=env, **kw)


# ---- metadata and licence ------------------------------------------------------------------------


@pytest.mark.parametrize("classifier", PROJECT.get("classifiers", []) or ["(none)"])
def test_every_classifier_is_one_pypi_knows(classifier):
    trove = pytest.importorskip("trove_classifiers", reason="the dev extra has trove-classifiers")
    assert classifier in trove.classifiers, classifier
    assert not classifier.startswith("License ::")  # PEP 639: the licence is the SPDX expression


def test_the_metadata_names_its_authors_keywords_and_the_python_ci_runs():
    keywords = PROJECT.get("keywords", [])
    assert len(keywords) >= 5 and len(set(keywords)) == len(keywords)
    (author,) = PROJECT.get("authors", [{}])
    licence = (REPO / "LICENSE").read_text()
    assert "[yyyy]" not in licence and "[name of copyright owner]" not in licence  # Apache's template, unfilled
    assert re.search(rf"^   Copyright 20\d\d {re.escape(author['name'])}$", licence, re.M), "LICENSE's appendix"
    python = re.search(r"^  - python=(\d+\.\d+)$", ENVIRONMENT, re.M).group(1)  # Binder's, the one CI tests
    classifiers = PROJECT["classifiers"]
    minors = [
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert minors == [python] and PROJECT["requires-python"] == f">={python}"
    assert "Typing :: Typed" in classifiers and (REPO / "kit" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["kit"]
    for url in PROJECT.get("urls", {}).values():  # only addresses that exist: kit has none published yet
        pytest.fail(f"[project.urls] names {url}: kit has no public address yet")


def test_the_readmes_wheel_is_the_version_pyproject_builds():
    """The README names the wheel `python -m build` writes (tests/test_wheel.py builds it by that name)."""
    wheels = set(re.findall(r"gpu_workspaces_kit-[\w.]+-py3-none-any\.whl", README))
    assert wheels == {f"gpu_workspaces_kit-{PROJECT['version']}-py3-none-any.whl"}, wheels


# ---- environment.yml and the one install ----------------------------------------------------------


@pytest.mark.parametrize("requirement", sorted({*PROJECT["dependencies"], *EXTRAS["lab"]}, key=str.lower))
def test_environment_yml_has_every_requirement_of_kit_and_its_lab_extra(requirement):
    """Binder builds environment.yml: kit's dependencies and the lab extra (chapter 7's fsspec was missing)."""
    assert f"\n  - {requirement.replace(' ', '')}\n" in ENVIRONMENT, requirement


def test_the_lab_extra_holds_the_spark_extra_and_binder_has_java():
    assert set(EXTRAS["spark"]) <= set(EXTRAS["lab"]), "chapter 7 runs from the lab install"
    assert "\n  - openjdk=17\n" in ENVIRONMENT


# import names whose distribution has another name, or comes with one the lab extra names
IMPORT_DISTRIBUTION = {"IPython": "ipykernel"}


def _chapter_imports(path: Path) -> set[str]:
    found = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            for m in re.finditer(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", "".join(cell["source"]), re.M):
                found.add(m.group(1) or m.group(2))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_the_readmes_one_install_gives_every_chapter_what_it_imports(path):
    """`pip install -e ".[lab]"` (the README's first command) had no PySpark: chapter 7 could not run."""
    block = next(b for b in re.findall(r"```bash\n(.*?)```", README, re.S) if "kit lab" in b)
    extra = re.search(r'pip install -e "\.\[(\w+)\]"', block).group(1)
    provided = {_name(r).lower() for r in [*PROJECT["dependencies"], *EXTRAS[extra]]}
    needed = set()
    for module in _chapter_imports(path):
        top = module.split(".")[0]
        if module.startswith("kit.spark"):
            needed |= {_name(r).lower() for r in EXTRAS["spark"]}
        elif top != "kit" and top not in sys.stdlib_module_names:
            needed.add(IMPORT_DISTRIBUTION.get(top, top).lower())
    assert needed <= provided, f"{path.name} imports {sorted(needed - provided)}, which `{extra}` does not install"
    if "pyspark" in needed:  # pip cannot install Java: the README says so beside the command
        section = README[README.index("## The two commands") : README.index("```bash")]
        assert "Java 17" in section and "openjdk-17-jre-headless" in section


# ---- the first cell where pip cannot install kit ------------------------------------------------


def _setup_cell(path: Path) -> str:
    return "".join(json.loads(path.read_text())["cells"][1]["source"])


def _no_index_env(**extra) -> dict[str, str]:
    """pip with no index it can reach and no local wheels: what a reader's pip meets while kit is
    not on PyPI (the install fails at once: a refused port, no retries)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/", PIP_RETRIES="0", PIP_TIMEOUT="5")
    env.update(PIP_NO_INPUT="1", **extra)
    return env


@pytest.fixture(scope="module")
def python_without_kit(tmp_path_factory):
    """A fresh venv that has pip (the base interpreter's) and no kit."""
    venv = tmp_path_factory.mktemp("no-kit") / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    probe = "import importlib.util as u; print(u.find_spec('kit'), u.find_spec('pip') is None)"
    probe = _run([python, "-c", probe], cwd=venv)  # not the checkout: '' on sys.path would find its kit
    if probe.stdout.split() != ["None", "False"]:
        pytest.skip(f"the base Python has kit, or no pip: {probe.stdout}{probe.stderr}")
    return python


def _check_words(path: Path, result, spec: str) -> None:
    text = result.stdout + result.stderr
    assert result.returncode != 0, text  # the notebook stops here
    assert "Traceback" not in text and "CalledProcessError" not in text, text
    assert f"installing {spec} ..." in result.stdout
    said = result.stderr
    assert f"kit is not installed in this kernel, and `pip install {spec}` failed:\n  ERROR: " in said, said
    for words in ("is not on PyPI yet", "KIT_PIP_SPEC", "`python -m build`", 'pip install -e ".[lab]"'):
        assert words in said, f"{path.name}: {words!r} not said"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_the_setup_cell_stops_in_words_where_pip_cannot_install_kit(path, python_without_kit, tmp_path):
    """The cell ran `subprocess.check_call(pip install gpu-workspaces-kit)`: while kit is not on PyPI,
    every reader without it got pip's failure as a CalledProcessError traceback."""
    source = _setup_cell(path)
    spec = SPEC_DEFAULT.search(source).group(1)
    assert spec == ("gpu-workspaces-kit[spark]" if path.stem.startswith("07") else "gpu-workspaces-kit")
    result = _run([python_without_kit, "-c", source], env=_no_index_env(), cwd=tmp_path)
    _check_words(path, result, spec)
    assert "No matching distribution found for" in result.stderr  # pip's own line, passed on


def test_in_a_kernel_the_setup_cell_stops_the_notebook_with_words_and_no_traceback(tmp_path, monkeypatch):
    """In JupyterLab (a real kernel, kit made unimportable), a KIT_PIP_SPEC that does not install:
    one error output, SystemExit with the words, no traceback, no IPython warning; the next cell
    never runs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    spec = str(tmp_path / "gpu_workspaces_kit-0.1.0-py3-none-any.whl")  # no such file
    monkeypatch.setenv("KIT_PIP_SPEC", spec)
    cells = ["import sys\nsys.modules['kit'] = None  # kit absent", _setup_cell(CHAPTERS[0]), "print('ran on')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute(cwd=str(tmp_path))
    outputs = nb.cells[1].outputs
    (error,) = [o for o in outputs if o.output_type == "error"]
    assert error.ename == "SystemExit" and "is not on PyPI yet" in error.evalue and "KIT_PIP_SPEC" in error.evalue
    shown = "\n".join(error.traceback) + "".join(o.get("text", "") for o in outputs)
    assert "Traceback" not in shown and "File " not in shown and "UserWarning" not in shown, shown
    assert f"No such file or directory: '{spec}'" in error.evalue  # pip's own line says why
    assert nb.cells[2].outputs == []


# ---- the sdist ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sdist_holds_every_tracked_file_runs_its_tests_and_builds_a_wheel_with_the_chapters(tmp_path):
    """The sdist had kit and little else: no tests' conftest or test packages, no notebooks, scripts or
    environment.yml. Now it holds every file git tracks; its tests run from it; its wheel has the chapters."""
    pytest.importorskip("build", reason="the dev extra has build")
    with repo_build_lock():  # the wheel's test may build from the checkout in the other process
        r = _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", tmp_path / "dist", REPO])
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("gpu_workspaces_kit-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
        archive.extractall(tmp_path / "src", filter="data")
    tracked = _run(["git", "-C", REPO, "ls-files"])
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: nothing to compare the sdist with")
    missing = sorted(set(tracked.stdout.split()) - {".gitignore"} - names)
    assert not missing, f"the sdist lacks {missing}"
    for needed in ("tests/conftest.py", "environment.yml", "scripts/gpu-check", "setup.py", ".ci/run"):
        assert needed in names, needed
    assert {f"notebooks/{p.name}" for p in CHAPTERS} <= names
    assert not [n for n in names if "__pycache__" in n or ".ipynb_checkpoints" in n or n.startswith("kit/chapters")]
    (root,) = (tmp_path / "src").iterdir()
    # its tests run from it, with its conftest and the kit it holds
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "tests/test_checks.py"]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " passed" in r.stdout, (r.stdout + r.stderr)[-3000:]
    probe = subprocess.run([sys.executable, "-c", "import kit; print(kit.__file__)"], cwd=root, env=env, **_TEXT)
    assert probe.stdout.startswith(str(root)), probe.stdout + probe.stderr
    # python -m build makes the wheel from the sdist: the chapters get in from there too
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, sdist])
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("gpu_workspaces_kit-*.whl")
    packaged = sorted(n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("kit/chapters/"))
    assert packaged == [f"kit/chapters/{p.name}" for p in CHAPTERS]


# ---- scripts/gpu-check with a Python that lacks kit's dependencies ------------------------------


@pytest.fixture(scope="module")
def python_without_dependencies(tmp_path_factory):
    venv = tmp_path_factory.mktemp("bare") / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    python = venv / "bin" / "python"
    names = [_name(r) for r in PROJECT["dependencies"]]
    probe = _run([python, "-c", f"import importlib.util as u; print([n for n in {names} if u.find_spec(n)])"])
    assert probe.stdout.strip() == "[]", probe.stdout + probe.stderr
    return python


def test_gpu_check_with_a_python_that_lacks_kits_dependencies_names_them(python_without_dependencies, tmp_path):
    """scripts/gpu-check with the system Python died in `import kit`: a ModuleNotFoundError traceback."""
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHON=str(python_without_dependencies))
    r = _run(["bash", REPO / "scripts" / "gpu-check", "--allow-cpu", "--out", out], env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert "Traceback" not in r.stderr and not out.exists()
    named = line.split("cannot import kit's dependencies ", 1)[1].split(" (pyproject.toml)", 1)[0].split(", ")
    assert named == [_name(r) for r in PROJECT["dependencies"]], line  # every one, by pip name
    assert "PYTHON=.venv-gpu/bin/python scripts/gpu-check" in line and "pip install -e ." in line
    # the remedy's last step: the same check with a Python that has them (this one) runs
    env = dict(os.environ, PYTHON=sys.executable)
    skip = "tests,chapters,bench,resnet,d2l,limits"
    r = _run(["bash", REPO / "scripts" / "gpu-check", "--allow-cpu", "--quick", "--skip", skip, "--out", out], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(out.read_text())["machine"]["python"]


# ---- bench train --quick ------------------------------------------------------------------------


def test_bench_train_quick_times_a_smaller_etl_network_and_names_it():
    """`bench train --quick` took about two minutes, the ETL rows' 784-1024-1024 network the largest part
    of it in kit/bench/train.py: the quick run trains a narrower one, and its summary says which."""
    from kit.bench.train import ETL_HIDDEN, _etl_rows
    from kit.nn import mlp

    sizes = {quick: mlp(784, hidden=hidden, n_out=10).num_params for quick, hidden in ETL_HIDDEN.items()}
    assert sizes[True] * 4 < sizes[False]
    summary = _etl_rows(quick=True)
    assert summary["etl_network"] == f"MLP 784-{'-'.join(map(str, ETL_HIDDEN[True]))}-10, 12 batches of 64 an epoch"
    assert summary["etl_epoch_ms_without_prefetch"] > 0 and summary["etl_epoch_ms_with_prefetch"] > 0
