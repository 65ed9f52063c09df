"""Command line: `python -m kit info`, `python -m kit bench NAME`, `python -m kit lab`, `python -m kit book`.

python -m kit info                 # backend, versions, devices, BLAS, memory
python -m kit bench -h             # the benchmarks, one line each
python -m kit bench arrays         # wrapper overhead per op vs raw NumPy
python -m kit bench workspaces     # plain vs caching allocator vs workspace
python -m kit bench arrays --quick # fewer repeats (CI, smoke runs; KIT_QUICK=1 does the same)
python -m kit lab                  # JupyterLab on the chapters (adds --allow-root when run as root)
python -m kit book                 # the chapters as a static HTML book (Sphinx), from their stored outputs
python -m kit --version            # the installed version of gpu-workspaces-kit (pip's name for kit)

The console script `kit` is the same command. A bad setting in the environment (kit.settings)
is one line on stderr and exit status 2, as a bad argument is; so is a command whose extra is not
installed (`lab` needs the `lab` extra, `book` the `book` extra, `bench spark` the `spark` extra:
the line names the pip command) and `lab` or `book` where there are no chapters (a wheel has none).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

import kit
from kit import bench as benchmarks
from kit import book as chapters_book
from kit import readings, settings, tables
from kit.devices import host_device_count
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
    """No chapter notebooks where `lab` and `book` look: a wheel install ships none."""


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
    return f"`{command}` needs {', '.join(absent)}, not installed here: {settings.install_hint(extra)}"


def notebooks_dir() -> Path:
    """The chapters: `notebooks/` of the checkout this kit comes from, else the current directory's.

    Raises ChaptersNotFoundError, saying where the chapters come from, when neither exists (a wheel
    install run outside a checkout)."""
    for candidate in (Path(__file__).resolve().parents[1] / "notebooks", Path.cwd() / "notebooks"):
        if candidate.is_dir():
            return candidate
    raise ChaptersNotFoundError(
        f"no chapters here: neither {Path(__file__).resolve().parents[1] / 'notebooks'} nor "
        f"{Path.cwd() / 'notebooks'} exists (a pip/wheel install of {settings.DISTRIBUTION} has no notebooks): "
        "the chapters are the notebooks/ folder of kit's source repository; run from the folder that holds "
        "notebooks/, or pass --dir DIR (lab) / --notebooks DIR (book)"
    )


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
    lab = sub.add_parser("lab", help="JupyterLab on the chapters (works as root)")
    lab.add_argument("--dir", default=None, help="directory to open (default: the chapters)")
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
    except benchmarks.OutputPathError as exc:
        return _error(f"{prog} bench", str(exc))
    except ChaptersNotFoundError as exc:
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
    if args.command == "lab":
        cmd = lab_command(Path(args.dir) if args.dir else notebooks_dir(), rest)
        if args.print:
            print(" ".join(cmd))
            return 0
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
    json_path = benchmarks.check_json_path(args.json) if args.json else None  # before minutes of benchmark
    result = benchmarks.run(args.name, quick=args.quick or found.quick)
    print(benchmarks.format_result(result))
    if json_path is not None:
        benchmarks.write_json(result, json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
