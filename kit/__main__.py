"""Command line: `python -m kit info`, `bench NAME`, `chapters DIR`, `lab`, `book` (`-h` says each in a line).

The console script `kit` is the same command. A bad setting in the environment (kit.settings)
is one line on stderr and exit status 2, as a bad argument is; so is a command whose extra is not
installed (`lab` needs the `lab` extra, `book` the `book` extra, `bench spark` the `spark` extra:
the line names the pip command that installs it), a `lab --dir` that does not exist, and a
`chapters DIR` that already holds a chapter (kit never overwrites one you may have edited).

Where the chapters come from: the checkout kit runs from (its notebooks/), else the copy every
wheel carries (kit/chapters/, from setup.py's build step). `lab` outside a checkout opens
./notebooks, copying the wheel's chapters there first when it does not exist.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

import kit
from kit import bench as benchmarks
from kit import book as chapters_book
from kit import settings
from kit.core.devices import host_device_count
from kit.measurement import tables
from kit.monitor import readings
from kit.spark import spark_missing


def info_lines() -> list[str]:
    """What `python -m kit info` prints, as lines (the chapters print it too)."""
    choice = kit.backend.current()
    lines = [
        f"kit {version()} on Python {platform.python_version()} ({platform.system()} {platform.machine()})",
        f"backend: {choice.name} ({choice.reason})",
        f"GPU: {choice.gpu_reason}",
        f"NumPy {np.__version__}" + _cupy_version(),
        f"default dtype: {kit.get_default_dtype().name}",
        f"devices ({host_device_count()} simulated on the host, KIT_HOST_DEVICES):"
        if host_device_count() > 1
        else "physical devices:",
    ]
    lines += [f"  {d.describe()}" for d in kit.devices()]
    workers = kit.logical_devices(2)
    lines.append("logical devices (example split of the default device into 2):")
    lines += [f"  {d.describe()}" for d in workers]
    lines += blas_lines()
    free, total = kit.Device("cpu:0").memory_info()
    lines.append(f"host memory: {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB available")
    lines.append(f"process RSS: {readings.rss_bytes() / 2**20:.0f} MiB")
    for g in readings.gpu_memory():
        lines.append(f"  {g}")
    return tables.wrap("\n".join(lines)).splitlines()  # no line wider than a notebook's column


def _cupy_version() -> str:
    ok, _ = kit.backend.gpu_status()
    if not ok:
        return ", CuPy not usable"
    return f", CuPy {kit.backend.cupy().__version__}"


def blas_lines() -> list[str]:
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not pools:
        return ["BLAS: none found by threadpoolctl"]
    return [
        f"BLAS: {p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads, {p.get('threading_layer')})"
        for p in pools
    ]


class ChaptersNotFoundError(FileNotFoundError):
    """No chapter notebooks where `lab`, `book` and `chapters` look (a kit copied without its build)."""


class ChaptersExistError(FileExistsError):
    """`python -m kit chapters DIR` where DIR already holds a chapter: kit overwrites none."""


CHAPTER_GLOB = "[0-9][0-9]_*.ipynb"  # the chapters' file names (setup.py copies the same into a wheel)
ROOT = settings.ROOT  # the checkout, when kit runs from one
PACKAGED = Path(__file__).resolve().parent / "chapters"  # where a wheel carries them

# what each command imports beyond kit's own dependencies: (the extra that installs it, import names)
NEEDS = {
    "lab": ("lab", ("jupyterlab", "ipykernel")),
    "book": ("book", tuple(chapters_book.MODULES)),
    "bench spark": ("spark", ("pyspark",)),
    "bench d2l": ("bench", ("torch",)),  # the d2l table is kit beside PyTorch
}


def missing_extra(command: str) -> str | None:
    """The one-line reason `command` cannot run here (its extra's modules absent), else None."""
    extra, modules = NEEDS.get(command, (None, ()))
    absent = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module blocked with None
            found = False
        if not found:
            absent.append(module)
    if not absent:
        return None
    hint = settings.install_hint(extra)
    return f"`{command}` needs {', '.join(absent)}, not installed here: {hint}"


def _chapters_in(folder: Path) -> list[Path]:
    return sorted(folder.glob(CHAPTER_GLOB)) if folder.is_dir() else []


def chapters_source() -> Path:
    """Where this kit's chapters are: the checkout's notebooks/, else the wheel's kit/chapters/.

    Raises ChaptersNotFoundError, naming both places and what to do, when neither holds any."""
    for candidate in (ROOT / "notebooks", PACKAGED):
        if _chapters_in(candidate) and (candidate == PACKAGED or settings.is_checkout()):
            return candidate
    raise ChaptersNotFoundError(
        f"no chapters here: this kit ({Path(__file__).resolve().parent}) is neither in a checkout of kit "
        f"(no {ROOT / 'notebooks'}) nor an installed wheel of {settings.DISTRIBUTION} (no {PACKAGED}): "
        "install kit from a wheel (built in a checkout with `python -m build`), whose "
        "`python -m kit chapters DIR` copies them out, or pass --dir DIR (lab) / --notebooks DIR (book) "
        "to a folder of chapter notebooks"
    )


def notebooks_dir() -> Path:
    """The folder `lab` and `book` open: the checkout's notebooks/, else ./notebooks when it exists,
    else the chapters this kit carries (a wheel's kit/chapters/, read-only: `lab` copies them first)."""
    if settings.is_checkout() and _chapters_in(ROOT / "notebooks"):
        return ROOT / "notebooks"
    if (Path.cwd() / "notebooks").is_dir():
        return Path.cwd() / "notebooks"
    return chapters_source()


def copy_chapters(target: Path) -> list[Path]:
    """Copy this kit's chapters into `target` (created with its parents); returns the copies.

    A chapter already in `target` is never overwritten: ChaptersExistError names them, before
    anything is copied."""
    source = chapters_source()
    chapters = _chapters_in(source)
    target = Path(os.path.realpath(target)) if Path(target).is_symlink() else Path(target)  # a link: its folder
    if target.exists() and not target.is_dir():
        raise ChaptersExistError(f"{target} is a file, not a folder: give a folder for the chapters")
    there = [p.name for p in chapters if (target / p.name).exists()]
    if there:
        raise ChaptersExistError(
            f"{target} already holds {', '.join(there)}: kit overwrites no chapter (you may have edited it); "
            "choose another folder, or move those files away first"
        )
    target.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(path, target / path.name)) for path in chapters]


def lab_directory(given: str | None) -> tuple[Path, Path | None]:
    """The folder `lab` opens, and where the wheel's chapters must be copied first (None: nothing
    to copy). --dir must exist; without it: notebooks_dir(), the wheel's chapters going to ./notebooks."""
    if given is not None:
        folder = Path(given)
        if not folder.is_dir():
            what = "is a file, not a folder" if folder.exists() else "does not exist"
            raise ChaptersNotFoundError(
                f"--dir {given!r} {what}: give an existing folder, or copy the chapters there first "
                f"(python -m kit chapters {shlex.quote(given)})"
            )
        return folder.resolve(), None
    folder = notebooks_dir()
    if folder == PACKAGED:  # inside site-packages: open a copy the reader owns
        return Path.cwd() / "notebooks", folder
    return folder, None


def lab_command(directory: Path, extra: list[str] | None = None, euid: int | None = None) -> list[str]:
    """The JupyterLab command line. Jupyter refuses to start as root ("Running as root is not
    recommended"), which containers and many cloud notebooks are: add --allow-root there."""
    euid = os.geteuid() if euid is None and hasattr(os, "geteuid") else euid
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={directory}"]
    if euid == 0:
        cmd.append("--allow-root")
    return cmd + list(extra or [])


def version() -> str:
    """The installed distribution's version (importlib.metadata), else the source's kit.__version__."""
    return settings.distribution_version() or kit.__version__


def _bench_help() -> str:
    width = max(len(name) for name in benchmarks.BENCHMARKS)
    return "benchmarks:\n" + "\n".join(
        f"  {name.ljust(width)}  {description}" for name, (_, description) in benchmarks.BENCHMARKS.items()
    )


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="kit from a shell: backend and devices, benchmarks, JupyterLab on the chapters, the book.",
    )
    parser.add_argument("--version", action="version", version=f"{settings.DISTRIBUTION} {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="backend, versions, devices, BLAS, memory")
    bench = sub.add_parser(
        "bench",
        help="benchmarks: ratios taken side by side, medians of repeats",
        description="Benchmarks: ratios taken side by side, medians of repeats.",
        epilog=_bench_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("name", choices=list(benchmarks.BENCHMARKS), help="which benchmark (listed below)")
    bench.add_argument("--quick", action="store_true", help="fewer repeats (smoke runs); KIT_QUICK=1 does the same")
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON (its directory must exist)")
    bench.add_argument(
        "--standalone",
        action="store_true",
        help="spark only: the side-by-side with TorchDistributor on a standalone cluster this starts (2 one-core "
        "workers in private mount namespaces), 10 epochs (1 with --quick)",
    )
    bench.add_argument("--epochs", type=int, metavar="N", help="spark only: the side-by-side's epochs")
    bench.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="spark only: the side-by-side once a seed (0..N-1): timings' medians and spread, accuracies' mean",
    )
    bench.add_argument(
        "--models",
        metavar="NAMES",
        help="spark only: the rounds table's models, comma-separated, from mlp and resnet18 (default both)",
    )
    bench.add_argument(
        "--examples",
        type=int,
        metavar="N",
        help="spark only: the side-by-side's training examples, its test set half as many (default 10,000; "
        "1,024 with --quick)",
    )
    chapters = sub.add_parser(
        "chapters",
        help="copy the chapter notebooks into a folder (a wheel carries them)",
        description="Copy the chapter notebooks (NN_name.ipynb) into DIR; a chapter already there is kept.",
    )
    chapters.add_argument("dir", nargs="?", default="notebooks", help="where to copy them (default ./notebooks)")
    lab = sub.add_parser("lab", help="JupyterLab on the chapters (works as root)")
    lab.add_argument(
        "--dir", default=None, help="directory to open (default: the chapters; outside a checkout ./notebooks)"
    )
    lab.add_argument("--print", action="store_true", help="print the command instead of running it")
    book = sub.add_parser("book", help="build the chapters into a static HTML book (offline, the book extra)")
    book.add_argument("--out", default="build/book", help="output directory (default build/book)")
    book.add_argument("--notebooks", default=None, help="folder of chapter notebooks (default: the chapters)")
    book.add_argument(
        "--repository",
        default=None,
        metavar="URL",
        help="the repository's GitHub address (https://github.com/<owner>/<name>): adds Colab and Binder links",
    )
    book.add_argument("--branch", default="main", help="the branch those links open (default main)")
    return parser


def _error(prog: str, message: str) -> int:
    """argparse's convention for a bad input: one line on stderr, exit status 2, no traceback."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    prog = settings.command_name() or "python -m kit"  # the console script says its own name
    parser = _parser(prog)
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        found = settings.load()  # checked at import too; read again in case the environment changed
        missing = _needs(args)
        if missing:
            return _error(prog, missing)
        return _run(args, rest, found, prog)
    except settings.SettingError as exc:
        return _error(prog, str(exc))
    except (benchmarks.OutputPathError, benchmarks.BenchOptionError) as exc:
        return _error(f"{prog} bench", str(exc))
    except (ChaptersNotFoundError, ChaptersExistError) as exc:
        return _error(f"{prog} {args.command}", str(exc))


def _needs(args: argparse.Namespace) -> str | None:
    command = args.command if args.command != "bench" else f"bench {args.name}"
    if args.command == "lab" and args.print:
        return None  # printing the command needs nothing installed
    missing = missing_extra(command)
    if missing is None and command == "bench spark":  # PySpark is there: Java too?
        why = spark_missing()
        return f"`bench spark` cannot start Spark here: {why}" if why else None
    return missing


def _run(args: argparse.Namespace, rest: list[str], found: settings.Settings, prog: str) -> int:
    if args.command == "info":
        print("\n".join(info_lines()))
        return 0
    if args.command == "chapters":
        copies = copy_chapters(Path(args.dir))
        opener = f"{prog} lab --dir {shlex.quote(args.dir)}"
        print(f"{len(copies)} chapters copied to {Path(args.dir)}: open them with `{opener}`")
        return 0
    if args.command == "lab":
        folder, copy_from = lab_directory(args.dir)
        cmd = lab_command(folder, rest)
        if args.print:
            if copy_from is not None:
                print(f"(not copied yet: `{prog} lab` first copies the chapters to {folder})", file=sys.stderr)
            print(" ".join(cmd))
            return 0
        if copy_from is not None:
            copies = copy_chapters(folder)
            print(f"{len(copies)} chapters copied to {folder} (from {copy_from}); opening them", file=sys.stderr)
        # become JupyterLab (no child process): stopping `python -m kit lab` stops the server
        os.execv(cmd[0], cmd)
    if args.command == "book":
        source = Path(args.notebooks) if args.notebooks else notebooks_dir()
        try:
            index = chapters_book.build_book(source, Path(args.out), repository=args.repository, branch=args.branch)
        except (FileNotFoundError, FileExistsError, ValueError) as exc:
            return _error(f"{prog} book", str(exc))
        print(f"book written: {index}")
        return 0
    given = {k: getattr(args, k) for k in benchmarks.SPARK_ONLY}
    options = benchmarks.options_for(args.name, **given)  # refused before anything
    json_path = benchmarks.check_json_path(args.json) if args.json else None  # before minutes of benchmark
    result = benchmarks.run(args.name, quick=args.quick or found.quick, **options)
    print(benchmarks.format_result(result))
    if json_path is not None:
        benchmarks.write_json(result, json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
