import json
import subprocess
import sys

from kit.__main__ import info_lines, main


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
