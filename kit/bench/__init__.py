"""Benchmarks behind `python -m kit bench NAME`: ratios taken side by side, medians of repeats.

`BENCHMARKS` names each with its one-line description (what `bench -h` lists). Timings are never
asserted in tests (shared, noisy machines); each benchmark interleaves the variants in every
repeat, so drift hits them alike, and reports the median. `--json FILE` writes the result with
the run's environment (`common.run_metadata`: versions, UTC time, git commit); its directory is
checked before the benchmark starts (`check_json_path`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kit.bench.arrays import bench_arrays
from kit.bench.common import run_metadata
from kit.bench.d2l import bench_d2l
from kit.bench.memory import bench_memory
from kit.bench.parallel import bench_parallel
from kit.bench.precision import bench_precision
from kit.bench.spark import MODELS as SPARK_MODELS  # the rounds table's, for --models
from kit.bench.spark import bench_spark
from kit.bench.train import bench_train
from kit.bench.workspaces import bench_workspaces, mlp_cycle
from kit.files import Json, atomic_write, write_target
from kit.measurement import measure, tables

__all__ = [
    "BENCHMARKS",
    "SPARK_MODELS",
    "SPARK_ONLY",
    "BenchOptionError",
    "OutputPathError",
    "bench_arrays",
    "bench_workspaces",
    "check_json_path",
    "format_result",
    "mlp_cycle",
    "options_for",
    "run",
    "write_json",
]


# ---------------------------------------------------------------------------------------


BENCHMARKS: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    "arrays": (bench_arrays, "kit op vs the same raw NumPy/CuPy op, on 100 and 1,000,000 elements"),
    "workspaces": (bench_workspaces, "one MLP step: plain vs caching allocator vs workspace (time, allocations)"),
    "train": (bench_train, "training steps: kit vs hand-written NumPy (vs PyTorch), workspace modes, data"),
    "parallel": (bench_parallel, "ParallelWrapper 1 vs 2 workers, averaging frequency; ParallelInference"),
    "spark": (bench_spark, "bytes and time a Spark round costs, beside Network.fit (needs PySpark, Java)"),
    "d2l": (bench_d2l, "d2l's ResNet-18 on Fashion-MNIST, 10 epochs, kit beside PyTorch (meant for a GPU)"),
    "precision": (bench_precision, "float32, float16 and mixed precision: bytes per cycle, step time, accuracy"),
    "memory": (bench_memory, "a training step's peak memory (MLP, LeNet, ResNet-18) by kind, kit beside PyTorch"),
}


class BenchOptionError(ValueError):
    """An option given to a benchmark that has none such, or a bad value; said before it starts."""


SPARK_ONLY = ("standalone", "epochs", "seeds", "models", "examples")


def options_for(
    name: str,
    standalone: bool = False,
    epochs: int | None = None,
    seeds: int | None = None,
    models: str | Sequence[str] | None = None,
    examples: int | None = None,
) -> dict[str, Any]:
    """The keyword options `run` passes to benchmark `name` (only spark takes `standalone`,
    `epochs`, `seeds`, `models` and `examples`), checked now: a benchmark can take minutes.
    `models`: comma-separated names from SPARK_MODELS, passed on as a tuple."""
    options = zip(SPARK_ONLY, (standalone, epochs, seeds, models, examples))
    given_at_all = {k: v for k, v in options if v is not False and v is not None}  # 0 is given (0 == False)
    if given_at_all and name != "spark":  # first: a value's remedy must not lead to this error next
        flags = " ".join(f"--{k}" for k in given_at_all)
        raise BenchOptionError(f"{flags}: only `bench spark` takes it; run `bench {name}` without it")
    for flag, value, least, example in (
        ("epochs", epochs, 1, 10),
        ("seeds", seeds, 1, 3),
        ("examples", examples, 128, 1024),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least):
            raise BenchOptionError(f"--{flag} {value}: a whole number >= {least}, e.g. --{flag} {example}")
    picked = None
    if models is not None:  # the command line's "mlp,resnet18", or the names already split (run's)
        picked = tuple(m.strip() for m in (models.split(",") if isinstance(models, str) else models))
        if not all(m in SPARK_MODELS for m in picked) or len(set(picked)) != len(picked) or not picked:
            shown = models if isinstance(models, str) else ",".join(map(str, models))
            raise BenchOptionError(
                f"--models {shown}: one or more of {', '.join(SPARK_MODELS)}, comma-separated, e.g. --models mlp"
            )
    values = dict(zip(SPARK_ONLY, (standalone, epochs, seeds, picked, examples)))
    given = {k: int(v) if isinstance(v, np.integer) else v for k, v in values.items() if v not in (False, None)}
    if standalone and picked is not None:
        raise BenchOptionError(
            "--models: the rounds table's models; --standalone runs the side-by-side alone: drop --models"
        )
    return given


def run(name: str, quick: bool = False, **options: Any) -> dict[str, Any]:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}: {', '.join(BENCHMARKS)}")
    bench, _ = BENCHMARKS[name]
    return bench(quick, **options_for(name, **options))


def _cells(result: dict[str, Json]) -> list[list[str]]:
    """Each row's values as printed: a spread as kit.measure prints it, a number with separators."""
    show = lambda c, v: measure.format_spread(v) if c == "spread" and isinstance(v, float) else tables.number(v)  # noqa: E731
    return [[show(c, row[c]) for c in result["columns"]] for row in result["rows"]]


# the summary's keys as a reader reads them under the HTML table (the JSON and the text form keep the keys)
SUMMARY_WORDS = {
    "small_added_us_median": "added per small op, median (µs)",
    "small_added_us_max": "added per small op, largest (µs)",
    "large_overhead_pct_median": "overhead on large ops, median (%)",
    "machine_load_by_others": "load by other processes while timed",
    "goal_small": "goal for small ops",
    "goal_large": "goal for large ops",
    "goal_time": "goal for time",
    "goal_allocations": "goal for allocations",
    "workspace_capacity_bytes": "workspace capacity (bytes)",
    "workspace_peak_used_bytes": "workspace peak used (bytes)",
}


def _summary(result: dict[str, Json], words: bool = False) -> list[str]:
    """The summary's lines; a machine's load printed on the right side of its limit. `words`: each
    key as words (`SUMMARY_WORDS`, else `kit.tables.header`), as the HTML table's notes show it."""

    def name(k: str) -> str:
        return SUMMARY_WORDS.get(k) or tables.header(k) if words else k

    flagged = set(result.get("summary_flagged", ()))  # figures read from a flagged row carry the flag
    return [
        f"{name(k)}: "
        + measure.flagged_figure(
            measure.format_load(v) if k.startswith("machine_load") and isinstance(v, float) else tables.number(v),
            k in flagged,
        )
        for k, v in result["summary"].items()
    ]


def format_result(result: dict[str, Json]) -> str:
    cols = result["columns"]
    lines = [f"benchmark {result['benchmark']} on {result['device']} (median of {result['repeats']} repeats)"]
    cells = _cells(result)
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    lines += [f"  {c}: {note}" for c, note in result.get("column_notes", {}).items()]  # one definition each
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    lines += _summary(result)
    return "\n".join(lines)


def result_table(result: dict[str, Json]) -> tables.Table:
    """`format_result`'s table as a `kit.tables.Table`: an HTML table in a notebook (a wide one
    scrolls instead of wrapping), the column definitions and the summary as notes under it."""
    cols = result["columns"]
    cells = _cells(result)
    notes = [f"{tables.header(c)}: {note}" for c, note in result.get("column_notes", {}).items()]  # as headed
    notes += _summary(result, words=True)
    flag = "reliable" if "reliable" in cols else None
    text = [c for c in cols[:1]]
    title = f"benchmark {result['benchmark']} on {result['device']} (median of {result['repeats']} repeats)"
    return tables.Table(list(cols), cells, notes, title, flag, text)


class OutputPathError(ValueError):
    """`--json FILE` names a file that cannot be written; said before the benchmark runs."""


def check_json_path(path: str | os.PathLike[str]) -> Path:
    """The JSON file a benchmark will write, checked now (a benchmark can take minutes): its
    directory must exist and be writable, and the path must not be a directory."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise OutputPathError(
            f"--json {str(path)!r} is a directory; give a file in it, e.g. --json {target / 'bench.json'}"
        )
    if not folder.is_dir():
        raise OutputPathError(
            f"--json {str(path)!r}: the directory {str(folder)!r} does not exist; "
            f"create it first (mkdir -p {folder}) or write the file somewhere that exists"
        )
    if not os.access(folder, os.W_OK):
        raise OutputPathError(f"--json {str(path)!r}: the directory {str(folder)!r} is not writable; choose another")
    try:  # what the write will meet: a link's target, a device or a pipe, a write-protected file
        return write_target(path, "--json")
    except OSError as exc:
        raise OutputPathError(str(exc)) from None


def write_json(result: dict[str, Json], path: str | os.PathLike[str]) -> None:
    """The result and the run's environment (versions, UTC time, git commit) under "run".
    Atomic write: a temporary file renamed over the target."""
    check_json_path(path)
    with atomic_write(path, what="--json") as f:  # kit.files: through a link, the old file whole on failure
        json.dump({**result, "run": run_metadata()}, f, indent=2)
