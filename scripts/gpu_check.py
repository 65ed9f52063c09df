"""gpu-check: run kit's GPU path on a machine with a GPU and write one JSON report.

    python scripts/gpu_check.py --out report.json            # on a GPU machine, from the repo root
    python scripts/gpu_check.py --allow-cpu --quick --out r.json   # a dry run on the CPU (CI does this)

Needs a Python with kit's dependencies (pyproject.toml's) and CuPy (pytest for the test part). A
bare GPU machine's Python has CuPy but not all of kit's dependencies: gpu-check then says which are
missing and exits 2, and a venv that sees the machine's CuPy has them all:

    python3 -m venv --system-site-packages .venv-gpu && .venv-gpu/bin/pip install -e .
    PYTHON=.venv-gpu/bin/python scripts/gpu-check --out report.json

Nothing is installed or downloaded by the check itself; kit is imported from this checkout. What it
does, each part recorded with its outcome and timings:

1. the machine: GPU name, memory, driver and CUDA runtime versions, CuPy/NumPy versions, commit;
2. the GPU tests (`pytest -m gpu`, with KIT_BACKEND=cupy), and optionally the whole unit suite
   on the CuPy backend (`--full-suite`), as pass/fail counts and the failures' first lines;
3. the chapters' code cells (chapters 1-5, quick mode, KIT_BACKEND=cupy), cell by cell;
4. the benchmarks (`kit bench arrays | workspaces | train | parallel | memory`) on the GPU;
5. the physical limits: device-to-device copy bandwidth and matmul TFLOP/s (raw CuPy and kit)
   beside the datasheet;
6. with Fashion-MNIST files (`--fashion DIR` or KIT_DATA): ResNet-18 (kit's zoo form), batch
   256: plain vs plain + kit's device cache vs workspace step time, the device memory each holds
   and kit's cache hit rate; then the d2l table (`kit bench d2l`: 10 epochs, SGD lr 0.1, kit and
   PyTorch in turn each epoch, test accuracy).

The report is what data/reference_runs/*.json holds: copy it there with the device name and date.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import operator
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def missing_dependencies() -> list[str]:
    """kit's dependencies (pyproject.toml's [project].dependencies, by pip name) this Python cannot import."""
    import importlib.util
    import tomllib

    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0] for r in requirements]
    return [name for name in names if importlib.util.find_spec(name.replace("-", "_")) is None]


def missing_message(missing: list[str]) -> str:
    """One paragraph: what this Python lacks, and the commands that give the check a Python that has it."""
    return (
        f"gpu-check: {sys.executable} cannot import kit's dependencies {', '.join(missing)} (pyproject.toml); "
        "run the check with a Python that has them, e.g. a venv of this checkout that also sees the machine's "
        "CuPy: python3 -m venv --system-site-packages .venv-gpu && .venv-gpu/bin/pip install -e . && "
        "PYTHON=.venv-gpu/bin/python scripts/gpu-check --out report.json"
    )


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s", 124
    return {"returncode": code, "seconds": round(time.perf_counter() - t0, 2), "tail": out[-12000:]}


def machine(env: dict[str, str]) -> dict[str, Any]:
    import numpy as np

    import kit

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu": platform.machine(),
        "cpu_cores": os.cpu_count(),
        "backend": kit.backend.name(),
        "gpu_status": kit.backend.gpu_status()[1],
    }
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = env.get("KIT_COMMIT", "unknown (no git here; set KIT_COMMIT)")
    if kit.backend.gpu_status()[0]:
        cupy = kit.backend.cupy()
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info.update(
            cupy=cupy.__version__,
            gpu=name,
            gpu_count=cupy.cuda.runtime.getDeviceCount(),
            gpu_memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
            driver_version=cupy.cuda.runtime.driverGetVersion(),
            runtime_version=cupy.cuda.runtime.runtimeGetVersion(),
        )
    return info


def pytest_part(env: dict[str, str], full: bool, timeout: float) -> dict[str, Any]:
    # addopts emptied: nbval and pytest-timeout need not be installed on a bare GPU machine
    # modules that need what a GPU machine lacks (nbformat, pyspark) are reported, not fatal
    base = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rf"]
    base += ["--continue-on-collection-errors", "tests"]
    if not full:
        base += ["-m", "gpu"]
    result = _run(base, env, timeout)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", result["tail"])}
    failures = re.findall(r"^FAILED (.*)$", result["tail"], flags=re.M)
    return {**result, "counts": counts, "failures": failures[:50]}


def chapter_cells(notebook: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run a chapter's code cells in order in one fresh process; one record per cell."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    sources = []
    for c in cells:
        text = "".join(c["source"])
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("!", "%"))]
        sources.append("\n".join(lines))
    program = (
        "import ast, asyncio, inspect, json, sys, time, traceback\n"
        "records, ns = [], {'__name__': '__main__'}\n"
        f"cells = {json.dumps(sources)}\n"
        "for i, src in enumerate(cells):\n"
        "    t0 = time.perf_counter()\n"
        "    try:\n"
        "        code = compile(src, f'cell {i}', 'exec', flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)\n"
        "        if code.co_flags & inspect.CO_COROUTINE:  # top-level await, run as IPython runs it\n"
        "            asyncio.run(eval(code, ns))\n"
        "        else:\n"
        "            exec(code, ns)\n"
        "        records.append({'cell': i, 'ok': True, 'seconds': round(time.perf_counter() - t0, 3)})\n"
        "    except BaseException as exc:\n"
        "        line = traceback.format_exception_only(type(exc), exc)[-1].strip()\n"
        "        records.append({'cell': i, 'ok': False, 'error': line[:500]})\n"
        "try:\n"
        "    from kit import reference\n"
        "    figures, flagged = reference.reported(), reference.reported_flags()\n"
        "except Exception:\n"
        "    figures, flagged = {}, {}\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    json.dump({'records': records, 'figures': figures, 'flagged': flagged}, f, default=str)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        script, answer = Path(tmp) / "chapter.py", Path(tmp) / "cells.json"
        script.write_text(program)
        result = _run([sys.executable, str(script), str(answer)], {**env, "MPLBACKEND": "Agg"}, timeout)
        out = json.loads(answer.read_text()) if answer.exists() else {"records": [], "figures": {}}
    cells_run = out["records"]
    failed = [r for r in cells_run if not r["ok"]]
    if len(cells_run) < len(sources) and not failed:  # the process died: keep what it printed
        failed = [{"cell": len(cells_run), "ok": False, "error": result["tail"][-1500:]}]
    # the figures each chapter shows beside reference runs: kit.reference finds them here by name
    figures = out["figures"]
    return {
        "cells": len(sources),
        "ran": len(cells_run),
        "failed": failed,
        "seconds": result["seconds"],
        "figures": figures,
        # the figures the chapter showed as flagged (name -> why): a reference column marks them
        "flagged": out.get("flagged", {}),
    }


def benchmarks(quick: bool, names: list[str]) -> dict[str, Any]:
    from kit import bench

    out = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            out[name] = {"result": bench.run(name, quick=quick), "seconds": round(time.perf_counter() - t0, 1)}
        except Exception as exc:  # a benchmark that fails is a finding, not the end of the check
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
    return out


def resnet_fashion(quick: bool) -> dict[str, Any]:

    import kit
    from kit.data import ArrayIterator, DataNotFoundError, load_fashion_mnist
    from kit.nn import Adam, WorkspaceMode, resnet18

    try:
        train, test = load_fashion_mnist(limit=2048 if quick else None)
    except DataNotFoundError as exc:
        return {"skipped": str(exc)}
    dev = kit.Device("gpu:0") if kit.backend.gpu_status()[0] else kit.Device("cpu:0")
    train, test = train.to(dev), test.to(dev)
    result: dict[str, Any] = {"device": str(dev), "batch": 256, "updater": "Adam(1e-3)"}
    batch = next(iter(ArrayIterator(train, 256, shuffle=True, seed=0)))
    pool = kit.backend.cupy().get_default_memory_pool() if dev.kind == "gpu" else None
    # plain (CuPy's pool alone), plain with kit's device cache on top (its hit rate), workspaces
    regimes = {"plain": (WorkspaceMode.NONE, 0), "plain+kit cache": (WorkspaceMode.NONE, 2 << 30)}
    regimes["workspace"] = (WorkspaceMode.SEPARATE, 0)
    for label, (mode, cache_bytes) in regimes.items():
        gc.collect()
        if pool is not None:
            pool.free_all_blocks()
            kit.memory.set_max_device_cache(cache_bytes)
        kit.memory.reset_counters()
        net = resnet18(device=dev, updater=Adam(1e-3), training_workspace_mode=mode)
        warm = []
        for _ in range(4):  # the first steps: kernel compilation, workspace learning, pool growth
            t0 = time.perf_counter()
            net.fit_batch(batch)
            kit.backend.sync()
            warm.append(round((time.perf_counter() - t0) * 1e3, 2))
        hits0 = kit.memory.cache_stats()
        steps = []
        for _ in range(5 if quick else 20):
            t0 = time.perf_counter()
            net.fit_batch(batch)
            kit.backend.sync()
            steps.append((time.perf_counter() - t0) * 1e3)
        cache = kit.memory.cache_stats()
        hits, misses = cache["hits"] - hits0["hits"], cache["misses"] - hits0["misses"]
        row: dict[str, Any] = {
            "first_steps_ms": warm,
            "step_ms_median": round(statistics.median(steps), 2),
            "step_ms_min_max": [round(min(steps), 2), round(max(steps), 2)],
            "kit_cache_hit_rate_steady": round(hits / (hits + misses), 4) if hits + misses else None,
            "workspaces": [
                {k: w.get(k) for k in ("name", "capacity", "peak_used")}
                for w in kit.readings.stats()["workspaces"]
                if w.get("name", "").startswith(f"{net._name}/")
            ],
        }
        if pool is not None:  # the device memory this regime holds: the pool after its steps
            row["pool_total_bytes"] = int(pool.total_bytes())
            row["pool_used_bytes"] = int(pool.used_bytes())
        result[label] = row
        del net
    if pool is not None:
        kit.memory.set_max_device_cache(0)
    return result


# datasheet figures (dense, no sparsity) the measured ones are put beside; matched on the device name
DATASHEETS = {
    "H100 80GB HBM3": {"hbm_tb_s": 3.35, "fp32_tflops": 67.0, "fp16_tensor_tflops": 989.0, "form": "H100 SXM5"},
    "H100 PCIe": {"hbm_tb_s": 2.0, "fp32_tflops": 51.0, "fp16_tensor_tflops": 756.0, "form": "H100 PCIe"},
    "H200": {"hbm_tb_s": 4.8, "fp32_tflops": 67.0, "fp16_tensor_tflops": 989.0, "form": "H200 SXM"},
}


def _event_seconds(cupy: Any, fn: Any, number: int) -> float:
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(number):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / 1e3 / number


def _gb_s(secs: list[float], nbytes: int) -> dict[str, Any]:
    """A copy's GB/s (bytes read + bytes written) over the repeats: median, lowest, highest."""
    gbs = [2 * nbytes / s / 1e9 for s in secs]
    return {"median": round(statistics.median(gbs), 1), "min": round(min(gbs), 1), "max": round(max(gbs), 1)}


def _interleaved(cupy: Any, raw: Any, wrapped: Any, number: int, repeats: int = 5) -> tuple[list[float], list[float]]:
    """Seconds per call of `raw` and of `wrapped`, timed in turn within each of `repeats` repeats
    (so a drift of the clock or of the GPU's state reaches both alike)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        a.append(_event_seconds(cupy, raw, number))
        b.append(_event_seconds(cupy, wrapped, number))
    return a, b


def physical_limits() -> dict[str, Any]:
    """Device-to-device copy bandwidth and matmul throughput, raw CuPy beside kit, with the datasheet."""
    import statistics

    import kit

    if not kit.backend.gpu_status()[0]:
        return {"skipped": "no GPU"}
    cupy = kit.backend.cupy()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    sheet = next((v for k, v in DATASHEETS.items() if k in name), None)
    out: dict[str, Any] = {"gpu": name, "datasheet": sheet, "method": "CUDA events, median of 5 repeats"}
    n = 1 << 28  # 1 GiB of float32
    a = cupy.ones(n, dtype=cupy.float32)
    b = cupy.empty_like(a)
    cupy.copyto(b, a)
    # the bandwidth beside the datasheet: a copy into an array allocated beforehand
    secs = [_event_seconds(cupy, functools.partial(cupy.copyto, b, a), 10) for _ in range(5)]
    out["d2d_copy_gb_s"] = _gb_s(secs, a.nbytes)
    out["d2d_copy_gb_s"].update({"bytes": a.nbytes, "counted": "read + written", "into": "an array allocated before"})
    del b
    # kit against CuPy on the same operation, allocate and copy (CuPy's a.copy() against kit's dup,
    # both through CuPy's memory pool), the two timed in turn within each repeat
    ka = kit.asarray(a)
    raw, wrapped = _interleaved(cupy, a.copy, ka.dup, 10)
    out["cupy_copy_gb_s"] = _gb_s(raw, a.nbytes)
    out["kit_dup_gb_s"] = _gb_s(wrapped, a.nbytes)
    out["copy_compared"] = "allocate and copy both ways (CuPy a.copy(), kit dup), interleaved"
    del a, ka
    for dtype in ("float32", "float16"):
        size = 8192
        x = cupy.random.random((size, size), dtype=cupy.float32).astype(dtype)
        y = cupy.random.random((size, size), dtype=cupy.float32).astype(dtype)
        kx, ky = kit.asarray(x), kit.asarray(y)
        x @ y, kx @ ky
        secs, ksecs = _interleaved(
            cupy, functools.partial(cupy.matmul, x, y), functools.partial(operator.matmul, kx, ky), 5
        )
        tf = [2 * size**3 / s / 1e12 for s in secs]
        ktf = [2 * size**3 / s / 1e12 for s in ksecs]
        out[f"matmul_{dtype}_tflops"] = {
            "size": size,
            "cupy_median": round(statistics.median(tf), 1),
            "cupy_min_max": [round(min(tf), 1), round(max(tf), 1)],
            "kit_median": round(statistics.median(ktf), 1),
            "kit_min_max": [round(min(ktf), 1), round(max(ktf), 1)],
        }
        del x, y, kx, ky
    out["interleaved"] = True  # every kit figure was timed in turn with its CuPy figure, repeat by repeat
    if sheet:
        out["fraction_of_datasheet"] = {
            "d2d_copy": round(out["d2d_copy_gb_s"]["median"] / 1e3 / sheet["hbm_tb_s"], 3),
            "matmul_float32_vs_fp32": round(out["matmul_float32_tflops"]["cupy_median"] / sheet["fp32_tflops"], 3),
            "matmul_float16_vs_tensor": round(
                out["matmul_float16_tflops"]["cupy_median"] / sheet["fp16_tensor_tflops"], 3
            ),
        }
    cupy.get_default_memory_pool().free_all_blocks()
    return out


def d2l_part(quick: bool, epochs: int) -> dict[str, Any]:
    from kit.bench.d2l import bench_d2l

    t0 = time.perf_counter()
    try:
        result = bench_d2l(quick=quick, epochs=epochs)
    except Exception as exc:
        import traceback

        return {"error": traceback.format_exc()[-3000:], "type": type(exc).__name__}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu-check.json"))
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU when no GPU is usable (dry run)")
    parser.add_argument("--quick", action="store_true", help="short benchmarks, quick chapters, a small ResNet run")
    parser.add_argument("--full-suite", action="store_true", help="also run the whole unit suite on the CuPy backend")
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: tests,chapters,bench,resnet,limits,d2l"
    )
    parser.add_argument("--d2l-epochs", type=int, default=10, help="epochs of the d2l table (kit beside PyTorch)")
    parser.add_argument("--benches", default="arrays,workspaces,train,parallel,memory", help="benchmarks to run")
    parser.add_argument("--fashion", default=None, help="directory with the four Fashion-MNIST IDX files")
    parser.add_argument("--chapters", default="0[1-6]", help="glob of the chapter numbers to run (default 0[1-6])")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per subprocess")
    args = parser.parse_args(argv)
    missing = missing_dependencies()
    if missing:  # before `import kit`, which would die in a ModuleNotFoundError
        print(missing_message(missing), file=sys.stderr)
        return 2
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.fashion:
        env["KIT_DATA"] = os.environ["KIT_DATA"] = args.fashion
    import kit

    if not kit.backend.gpu_status()[0] and not args.allow_cpu:
        print(f"no usable GPU: {kit.backend.gpu_status()[1]} (use --allow-cpu for a dry run)", file=sys.stderr)
        return 2
    if kit.backend.gpu_status()[0]:
        env["KIT_BACKEND"] = os.environ["KIT_BACKEND"] = "cupy"
    report: dict[str, Any] = {"kind": "kit gpu-check", "machine": machine(env), "parts": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every part: a cut-off run still leaves what it measured
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str))
        tmp.replace(out)

    save()  # the machine, before any part: every run leaves a report, whatever it skips
    if "tests" not in skip:
        report["parts"]["gpu_tests"] = pytest_part(env, False, args.timeout)
        save()
        if args.full_suite:
            report["parts"]["full_suite_on_backend"] = pytest_part(env, True, args.timeout)
            save()
    if "chapters" not in skip:
        chapter_env = dict(env, KIT_QUICK="1")
        report["parts"]["chapters"] = {
            nb.name: chapter_cells(nb, chapter_env, args.timeout)
            for nb in sorted((ROOT / "notebooks").glob(f"{args.chapters}_*.ipynb"))
        }
        save()
    if "bench" not in skip:
        report["parts"]["benchmarks"] = benchmarks(args.quick, args.benches.split(","))
        save()
    if "limits" not in skip:
        try:
            report["parts"]["physical_limits"] = physical_limits()
        except Exception as exc:
            report["parts"]["physical_limits"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        save()
    if "resnet" not in skip:
        try:
            report["parts"]["resnet18_fashion_mnist"] = resnet_fashion(args.quick)
        except Exception:
            import traceback

            report["parts"]["resnet18_fashion_mnist"] = {"error": traceback.format_exc()[-3000:]}
        save()
    if "d2l" not in skip:
        report["parts"]["d2l"] = d2l_part(args.quick, 1 if args.quick else args.d2l_epochs)
        save()
    print(f"gpu-check report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
