import datetime
import json
import platform
import subprocess
import sys

import numpy as np
import pytest

import kit
from kit import bench as benchmarks
from kit import settings
from kit.__main__ import info_lines, main, version
from kit.bench.parallel import CLIENT_KINDS
from kit.nn import mlp
from kit.parallel import ParallelInference


def test_info_names_backend_devices_blas_and_memory():
    text = "\n".join(info_lines())
    for needle in ("backend: ", "physical devices:", "cpu:0", "logical", "NOT a separate device", "BLAS", "RSS"):
        assert needle in text


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
    assert list(benchmarks.BENCHMARKS) == ["arrays", "workspaces", "train", "parallel", "spark", "d2l"]
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


def test_bench_parallel_client_kinds_serve_every_request():
    """The two client kinds the parallel benchmark compares really send every request they time:
    64 threads and 64 asyncio tasks, each answer counted (no timing asserted)."""
    x = np.random.default_rng(0).random((16, 8)).astype(np.float32)
    for kind, run in CLIENT_KINDS.items():
        with ParallelInference(mlp(8, hidden=(8,), n_out=3), workers=2, inference_mode="BATCHED") as pi:
            throughput, latencies = run(pi, x, 64, 3)
            assert pi.requests_served == 64 * 3, kind
            assert len(latencies) == 64 * 3 and throughput > 0, kind
            assert max(pi.batch_sizes) > 1, kind  # 64 clients at once: requests were merged
