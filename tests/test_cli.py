import json
import subprocess
import sys

import numpy as np

from kit.__main__ import info_lines, main
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
