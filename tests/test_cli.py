import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import kit
from kit import bench as benchmarks
from kit import settings
from kit.__main__ import info_lines, main, version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_info_names_backend_devices_blas_and_memory():
    lines = info_lines()
    text = " ".join(" ".join(lines).split())  # a long line is wrapped at words: read it as one
    for needle in ("backend: ", "physical devices:", "cpu:0", "logical", "NOT a separate device", "BLAS", "RSS"):
        assert needle in text
    assert max(map(len, lines)) <= 100, "a line wider than a notebook's column"


def test_python_m_kit_info_runs():
    out = subprocess.run([sys.executable, "-m", "kit", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "physical devices:" in out.stdout


def test_bench_workspaces_quick_reports_zero_allocations(tmp_path, capsys):
    path = tmp_path / "ws.json"
    assert main(["bench", "workspaces", "--quick", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    rows = {r["regime"]: r for r in result["rows"]}
    assert rows["workspace"]["kit_heap_allocs_per_iter"] == 0
    assert rows["plain"]["kit_heap_allocs_per_iter"] > 10
    assert rows["caching"]["cache_hits_per_iter"] == rows["caching"]["kit_heap_allocs_per_iter"]
    assert "regime" in capsys.readouterr().out
    assert result["run"]["kit"] == version() and result["run"]["distribution"] == settings.DISTRIBUTION


def test_version_comes_from_the_distribution_else_the_source(capsys, monkeypatch):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"{settings.DISTRIBUTION} {version()}"
    assert version() == (settings.distribution_version() or kit.__version__)
    monkeypatch.setattr(settings, "distribution_version", lambda: None)  # a checkout on sys.path, not installed
    assert version() == kit.__version__


def test_bench_help_lists_every_benchmark_with_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "-h"])
    out = capsys.readouterr().out
    assert list(benchmarks.BENCHMARKS) == [
        "arrays",
        "workspaces",
        "train",
        "parallel",
        "spark",
        "d2l",
        "precision",
        "memory",
    ]
    for name, (_, description) in benchmarks.BENCHMARKS.items():
        assert "\n" not in description and len(description) < 100
        assert any(line.split() == [name, *description.split()] for line in out.splitlines()), name


def _must_not_run(name, quick=False):
    raise AssertionError(f"benchmark {name} ran although its --json path is unusable")


def test_json_into_a_missing_directory_fails_before_the_benchmark_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(benchmarks, "run", _must_not_run)
    missing = tmp_path / "no" / "such" / "out.json"
    assert main(["bench", "arrays", "--quick", "--json", str(missing)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"python -m kit bench: error: --json {str(missing)!r}: the directory {str(missing.parent)!r} does not exist; "
        f"create it first (mkdir -p {missing.parent}) or write the file somewhere that exists"
    )
    assert main(["bench", "arrays", "--json", str(tmp_path)]) == 2  # a directory is not a file
    assert f"--json {str(tmp_path)!r} is a directory" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_bench_json_stores_the_load_as_a_number_and_the_run(tmp_path, capsys):
    path = tmp_path / "arrays.json"
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    assert main(["bench", "arrays", "--quick", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    load = result["summary"]["machine_load_by_others"]
    assert isinstance(load, float) and 0 <= load <= 1  # a fraction, not "75%"
    assert f"machine_load_by_others: {load:.0%}" in capsys.readouterr().out  # printed as a percentage
    run = result["run"]
    assert (run["python"], run["numpy"], run["kit"]) == (platform.python_version(), np.__version__, version())
    assert before <= datetime.datetime.fromisoformat(run["utc"]) <= datetime.datetime.now(datetime.UTC)
    assert run["utc"].endswith("+00:00")
    commit = run["git_commit"]
    assert commit is None or len(commit.removesuffix("-dirty")) == 40  # a checkout here; None from a wheel
    assert not list(tmp_path.glob("*.tmp*"))  # the atomic write left nothing behind


def test_a_bad_setting_is_one_line_and_exit_2_from_main(monkeypatch, capsys):
    monkeypatch.setenv("KIT_QUICK", "maybe")
    monkeypatch.setattr(benchmarks, "run", _must_not_run)
    assert main(["bench", "arrays"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m kit: error: KIT_QUICK='maybe' is not a yes/no value")


@pytest.mark.parametrize(("value", "quick"), [("yes", True), ("TRUE", True), ("1", True), ("no", False), ("", False)])
def test_kit_quick_yes_is_quick_mode(monkeypatch, capsys, value, quick):
    seen = []
    monkeypatch.setenv("KIT_QUICK", value)
    monkeypatch.setattr(benchmarks, "run", lambda name, quick: seen.append(quick) or {"benchmark": name})
    monkeypatch.setattr(benchmarks, "format_result", lambda result: "")
    assert main(["bench", "arrays"]) == 0
    assert seen == [quick]


# Runs kit's command line in a fresh Python in which the named modules cannot be imported
# (sys.modules[name] = None makes `import name` fail and find_spec say "absent"), as on a
# machine without that extra: argv[1] is the comma-separated names, the rest is the command.
_WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from kit.__main__ import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _kit_without(modules, *args, cwd=None, env=None):
    cmd = [sys.executable, "-c", _WITHOUT, ",".join(modules) or "-", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize(
    ("modules", "args", "extra"),
    [
        (["sphinx", "myst_nb"], ["book", "--out", "{tmp}/book"], "book"),
        (["jupyterlab"], ["lab", "--no-browser"], "lab"),
        (["pyspark"], ["bench", "spark", "--quick"], "spark"),
        (["torch"], ["bench", "d2l", "--quick"], "bench"),
    ],
    ids=["book", "lab", "bench-spark", "bench-d2l"],
)
def test_a_command_without_its_extra_names_the_extra_in_one_line(tmp_path, modules, args, extra):
    """The pip command works today (kit is not on PyPI yet): in a checkout, the checkout's extra."""
    out = _kit_without(modules, *[a.format(tmp=tmp_path) for a in args])
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.splitlines()  # one line, no traceback
    command = " ".join(args[:2]) if args[0] == "bench" else args[0]
    assert line == (
        f"python -m kit: error: `{command}` needs {', '.join(modules)}, not installed here: "
        f'pip install -e "{REPO}[{extra}]"'
    )
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    assert not (tmp_path / "book").exists()


def test_lab_print_needs_no_extra(tmp_path):
    out = _kit_without(["jupyterlab"], "lab", "--print", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert f"--ServerApp.root_dir={tmp_path}" in out.stdout


@pytest.fixture
def installed_kit(tmp_path):
    """kit as a wheel installs it: the package alone, no notebooks/ beside it (PYTHONPATH wins over
    the checkout's editable install, which Python consults after the path)."""
    site = tmp_path / "site"
    shutil.copytree(Path(kit.__file__).parent, site / "kit", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    return work, dict(os.environ, PYTHONPATH=str(site))


def test_lab_and_book_outside_a_checkout_say_where_the_chapters_are(installed_kit):
    """A kit that is neither a checkout nor a built wheel (a copied package) has no chapters: the line
    says so and names the remedies, and --dir DIR and ./notebooks both work."""
    work, env = installed_kit
    probe = subprocess.run(  # the copy is the kit that runs
        [sys.executable, "-c", "import kit; print(kit.__file__)"], capture_output=True, text=True, cwd=work, env=env
    )
    assert probe.stdout.startswith(env["PYTHONPATH"]), probe.stdout + probe.stderr
    for args in (["lab", "--print"], ["book", "--out", str(work / "book")], ["chapters", str(work / "mine")]):
        out = _kit_without([], *args, cwd=work, env=env)
        assert out.returncode == 2, out.stdout + out.stderr
        (line,) = out.stderr.splitlines()
        assert line.startswith(f"python -m kit {args[0]}: error: no chapters here: this kit ("), line
        assert "neither in a checkout of kit" in line and "`python -m kit chapters DIR` copies them out" in line
        assert "the repository" not in line  # kit has no public address to send anyone to
    elsewhere = work / "my-chapters"
    elsewhere.mkdir()  # the message's remedy for lab: --dir DIR
    out = _kit_without([], "lab", "--print", "--dir", str(elsewhere), cwd=work, env=env)
    assert out.returncode == 0 and f"--ServerApp.root_dir={elsewhere}" in out.stdout, out.stderr
    (work / "notebooks").mkdir()  # the chapters fetched beside it: lab opens them
    out = _kit_without([], "lab", "--print", cwd=work, env=env)
    assert out.returncode == 0 and f"--ServerApp.root_dir={work / 'notebooks'}" in out.stdout, out.stderr


@pytest.fixture
def wheel_layout(installed_kit):
    """kit as its wheel installs it: the package with its chapters in kit/chapters/ (setup.py's
    build step), no checkout beside it."""
    work, env = installed_kit
    packaged = Path(env["PYTHONPATH"]) / "kit" / "chapters"
    packaged.mkdir()
    for path in CHAPTERS:
        shutil.copyfile(path, packaged / path.name)
    return work, env, packaged


def test_chapters_copies_the_wheels_chapters_out_and_lab_and_book_read_them(wheel_layout):
    work, env, packaged = wheel_layout
    out = _kit_without([], "chapters", "mine", cwd=work, env=env)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.strip() == f"{len(CHAPTERS)} chapters copied to mine: open them with `python -m kit lab --dir mine`"
    )
    assert sorted(p.name for p in (work / "mine").iterdir()) == [p.name for p in CHAPTERS]
    for path in CHAPTERS:
        assert (work / "mine" / path.name).read_bytes() == path.read_bytes(), path.name
    out = _kit_without([], "lab", "--print", "--dir", "mine", cwd=work, env=env)  # the printed remedy runs
    assert out.returncode == 0 and f"--ServerApp.root_dir={work / 'mine'}" in out.stdout, out.stderr
    # lab with no ./notebooks: it will open a copy there (site-packages is not the reader's to edit)
    out = _kit_without([], "lab", "--print", cwd=work, env=env)
    assert out.returncode == 0 and f"--ServerApp.root_dir={work / 'notebooks'}" in out.stdout, out.stderr
    assert f"first copies the chapters to {work / 'notebooks'}" in out.stderr
    assert not (work / "notebooks").exists()  # --print copies nothing
    # the book reads the wheel's chapters where they are (`book` builds from notebooks_dir())
    probe = "from kit.__main__ import notebooks_dir; print(notebooks_dir())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=work, env=env)
    assert out.stdout.strip() == str(packaged), out.stdout + out.stderr


@pytest.mark.parametrize("where", ["checkout", "wheel"])
def test_chapters_never_overwrites_a_chapter(tmp_path, wheel_layout, where):
    """From a checkout or a wheel: a folder that already holds one chapter is refused whole, before
    anything is copied, naming the file; the remedy (another folder) works."""
    work, env, _ = wheel_layout
    env = env if where == "wheel" else None
    target = work / "mine"
    target.mkdir()
    (target / CHAPTERS[2].name).write_text("my edits")
    out = _kit_without([], "chapters", str(target), cwd=work, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.splitlines()
    assert line == (
        f"python -m kit chapters: error: {target} already holds {CHAPTERS[2].name}: kit overwrites no chapter "
        "(you may have edited it); choose another folder, or move those files away first"
    )
    assert (target / CHAPTERS[2].name).read_text() == "my edits" and len(list(target.iterdir())) == 1
    out = _kit_without([], "chapters", str(work / "other"), cwd=work, env=env)
    assert out.returncode == 0 and len(list((work / "other").glob("*.ipynb"))) == len(CHAPTERS), out.stderr
    (work / "a-file").write_text("")
    out = _kit_without([], "chapters", str(work / "a-file"), cwd=work, env=env)
    assert out.returncode == 2 and "is a file, not a folder" in out.stderr, out.stderr


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_lab_dir_that_is_not_a_folder_is_kits_one_line(tmp_path, kind):
    """Jupyter's own error came out before (a traceback from the server); kit's line names the remedy."""
    given = tmp_path / "no-such"
    if kind == "file":
        given.write_text("")
    for args in (["lab", "--dir", str(given)], ["lab", "--print", "--dir", str(given)]):
        out = _kit_without([], *args)
        assert out.returncode == 2, out.stdout + out.stderr
        (line,) = out.stderr.splitlines()
        what = "does not exist" if kind == "missing" else "is a file, not a folder"
        assert line == (
            f"python -m kit lab: error: --dir {str(given)!r} {what}: give an existing folder, or copy the "
            f"chapters there first (python -m kit chapters {given})"
        )
    if kind == "missing":  # the remedy, as printed, then lab opens the folder
        assert _kit_without([], "chapters", str(given)).returncode == 0
        out = _kit_without([], "lab", "--print", "--dir", str(given))
        assert out.returncode == 0 and f"--ServerApp.root_dir={given}" in out.stdout, out.stderr


def test_book_refuses_to_overwrite_a_folder_that_is_not_a_book(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["book", "--out", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"python -m kit book: error: {tmp_path} is not empty and holds no earlier book: choose another --out"
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_bench_spark_without_java_says_so_in_one_line():
    """PySpark installed but no Java: one line naming what is missing, exit 2, no traceback."""
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java-home"}
    r = subprocess.run(
        [sys.executable, "-m", "kit", "bench", "spark", "--quick"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "JAVA_HOME=/nonexistent-java-home" in lines[0] and "Traceback" not in r.stderr


def test_bench_arrays_defines_each_derived_column_in_its_header():
    """added_us and ratio are medians of per-repeat differences and ratios, not kit_us - raw_us:
    the printed table says so above the columns, one definition per column."""
    from kit import bench

    result = bench.bench_arrays(quick=True)
    text = bench.format_result(result)
    header_at = text.splitlines().index(next(line for line in text.splitlines() if line.startswith("op ")))
    above = "\n".join(text.splitlines()[:header_at])
    for column in ("raw_us", "kit_us", "added_us", "ratio", "spread", "reliable"):
        assert f"  {column}: " in above, column
    assert "not the difference of the two medians" in " ".join(above.split())
    _goals_point_at_printed_warnings(result, text)


def _goals_point_at_printed_warnings(result, text):
    """A goal line that says "see the warnings" has warnings printed to see, and they are the
    rows' own: every flagged row's reasons appear, none is printed when no row is flagged."""
    summary = result["summary"]
    pointing = [k for k, v in summary.items() if "see the warnings" in str(v)]
    flagged = [r for r in result["rows"] if r.get("reliable") == "NO"]
    if pointing:  # a goal points at warnings: they are there, printed
        assert flagged and summary["warnings"] != "none" and f"warnings: {summary['warnings']}" in text
    if not flagged:  # nothing flagged: no goal points anywhere, no warnings
        assert not pointing and summary["warnings"] == "none"
    # each goal is flagged by the rows it reads, and only by those
    small = [r for r in result["rows"] if r["elements"] == 100]
    assert ("see the warnings" in summary["goal_small"]) == any(r["reliable"] == "NO" for r in small)


def _array_row(op, elements, ratios, added):
    return {
        "op": op,
        "elements": elements,
        "ratio": float(np.median(ratios)),
        "added_us": float(np.median(added)),
        "reliable": "yes",
        "warnings": [],
        "ratio_per_repeat": ratios,
        "added_us_per_repeat": added,
    }


@pytest.mark.parametrize(
    ("large_ratios", "verdict", "shown"),
    [
        # one list per op, one ratio per repeat; the median over ops in each repeat: 1.00, 1.01, 1.03
        # -> 0-3 %, on both sides of the 2 % goal
        ([[1.00, 1.01, 1.03], [1.00, 1.01, 1.03], [1.05, 1.00, 1.01]], "not shown either way", "0-3"),
        ([[1.00, 1.01, 1.01], [1.00, 1.01, 1.00], [1.01, 1.00, 1.01]], "-> met", "0-1"),
        ([[1.03, 1.04, 1.05], [1.03, 1.06, 1.03], [1.10, 1.03, 1.03]], "-> NOT met", "3-4"),
    ],
)
def test_the_array_goals_print_the_range_over_repeats_and_no_verdict_the_noise_could_turn(large_ratios, verdict, shown):
    """Each goal of bench arrays is a median over ops; the same median taken repeat by repeat gives
    the range printed beside it, and a range on both sides of the limit gets no verdict."""
    from kit.bench.arrays import _arrays_summary

    rows = [_array_row(f"op{i}", 1_000_000, ratios, [1.0, 1.0, 1.0]) for i, ratios in enumerate(large_ratios)]
    rows.append(_array_row("slice view", 1_000_000, [9.0, 9.0, 9.0], [1.0, 1.0, 1.0]))  # not an op's overhead
    rows += [_array_row("add", 100, [2.0, 2.0, 2.0], [1.2, 1.4, 1.6]), _array_row("exp", 100, [2.0] * 3, [1.0] * 3)]
    summary = _arrays_summary(rows, 0.0)
    assert f"(per repeat {shown} %)" in summary["goal_large"] and verdict in summary["goal_large"], summary
    # small ops: the median over the two ops in each repeat, 1.1, 1.2, 1.3 µs, all under the 1.5 µs goal
    assert "(per repeat 1.1-1.3 µs) -> met" in summary["goal_small"], summary["goal_small"]


def test_an_array_goal_whose_figure_and_repeats_disagree_shows_nothing_either_way():
    """The figure (a median over ops of each op's median over repeats) can fall outside the range of
    the medians over ops taken repeat by repeat: here 3 % against every repeat's 1 %."""
    from kit.bench.arrays import _arrays_summary

    large = [[1.01, 1.04, 1.03], [1.03, 0.99, 1.05], [1.03, 1.03, 1.0], [1.0, 1.01, 1.0], [1.0, 0.99, 1.01]]
    rows = [_array_row(f"op{i}", 1_000_000, ratios, [1.0] * 3) for i, ratios in enumerate(large)]
    rows.append(_array_row("add", 100, [2.0] * 3, [1.0] * 3))
    summary = _arrays_summary(rows, 0.0)
    assert "3 % (per repeat 1-1 %) -> within the spread: not shown either way" in summary["goal_large"], summary


@pytest.mark.parametrize("which", ["arrays", "workspaces"])
def test_bench_progress_counts_every_timed_step_up_to_its_total(which):
    """Chapters 1 and 2 show these benchmarks' progress: every step is reported, in order, and
    the last one is the total announced from the start (a bar that stops short, or runs past
    100 %, tells the reader something false)."""
    from kit import bench

    seen = []
    getattr(bench, f"bench_{which}")(quick=True, progress=lambda done, total, note: seen.append((done, total, note)))
    done = [d for d, _, _ in seen]
    assert done == list(range(1, len(seen) + 1)) and {t for _, t, _ in seen} == {len(seen)}
    assert all(note for _, _, note in seen)


def test_chapters_into_a_link_to_a_folder_not_made_yet_keeps_the_link(tmp_path):
    """A dangling link as the target: mkdir met the link and raised FileExistsError with a traceback."""
    from kit.__main__ import copy_chapters

    link = tmp_path / "mine"
    link.symlink_to(tmp_path / "elsewhere" / "chapters")
    copied = copy_chapters(link)
    assert link.is_symlink() and len(copied) == len(list((tmp_path / "elsewhere" / "chapters").glob("*.ipynb")))
    assert len(copied) > 0
