"""scripts/gpu_check.py: the GPU check must not rot between the sessions that have a GPU, so its
dry run (--allow-cpu) runs here: the report has every part, and the parts ran for real."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # the whole gpu-check script, every part, in a subprocess
def test_gpu_check_dry_run_writes_a_complete_report(tmp_path):
    out = tmp_path / "report.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--allow-cpu", "--quick"]
    cmd += ["--chapters", "01", "--skip", "bench,resnet,d2l", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    machine = report["machine"]
    assert machine["backend"] in ("numpy", "cupy") and machine["python"] and machine["commit"]
    tests = report["parts"]["gpu_tests"]
    assert tests["returncode"] in (0, 5) or tests["counts"].get("failed", 0) == 0, tests["tail"]
    assert sum(tests["counts"].values()) > 0  # pytest really collected the suite
    chapter = report["parts"]["chapters"]["01_arrays_and_backends.ipynb"]
    assert chapter["ran"] == chapter["cells"] > 5 and chapter["failed"] == []
    # the figures chapter 1 shows beside reference runs, recorded for kit.reference to find by name
    assert "float16 speed / float32 speed" in chapter["figures"]
    assert isinstance(chapter["figures"]["float16 speed / float32 speed"], float)


def test_gpu_check_refuses_to_pretend_without_a_gpu(tmp_path):
    import pytest

    import kit

    if kit.backend.gpu_status()[0]:
        pytest.skip("a GPU is usable here: nothing to refuse")
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(tmp_path / "r.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no usable GPU" in proc.stderr
    assert not (tmp_path / "r.json").exists()
