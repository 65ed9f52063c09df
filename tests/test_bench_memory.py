"""`python -m kit bench memory`: its logic on a tiny case (the MLP at batch 8, one repeat), each side
in a fresh process as the benchmark runs them; counts and directions, never a goal's figure."""

from __future__ import annotations

import json

import pytest

from kit.bench import BENCHMARKS, format_result
from kit.bench.memory import COLUMNS, bench_memory, step_memory


@pytest.fixture(scope="module")
def result():
    return bench_memory(quick=True, cases=(("mlp", 8),))


@pytest.mark.slow  # the whole benchmark, every side in fresh processes
def test_each_side_has_a_row_with_every_column(result):
    assert BENCHMARKS["memory"][0] is bench_memory
    cases = [row["case"] for row in result["rows"]]
    torch = any(c.endswith("PyTorch") for c in cases)
    assert cases[:2] == ["mlp b8 kit SEPARATE", "mlp b8 kit NONE"] and len(cases) == 2 + torch
    for row in result["rows"]:
        assert set(COLUMNS) <= set(row)
        assert row["peak_mib"] >= 0
    text = format_result(result)
    assert "peak resident growth over 3 SGD steps" in text
    json.dumps(result)  # what --json writes
    if torch:
        by = {row["case"]: row for row in result["rows"]}
        assert by["mlp b8 kit SEPARATE"]["ratio"] == pytest.approx(
            by["mlp b8 kit SEPARATE"]["peak_mib"] / by["mlp b8 PyTorch"]["peak_mib"]
        )
        assert result["summary"]["goal_mlp_b8"].startswith("mlp b8: kit (SEPARATE) / PyTorch peak memory")
        assert "for backward kit keeps" in result["summary"]["kept_mlp_b8"]
    else:
        assert "PyTorch is not installed" in result["summary"]["note"]


def test_kits_bytes_by_kind_are_the_networks_own():
    """In this process: the MLP 784-512-256-10 at batch 8 keeps its three hidden outputs' and the
    scores' bytes (ReLUs in place), and its gradients fit two slots."""
    kinds = step_memory("kit", "mlp", 8)["kinds"]
    params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert kinds["params_and_grads"] == 2 * 4 * params
    assert kinds["updater_state"] == 0  # plain SGD
    assert kinds["activations_kept"] == 4 * 8 * (512 + 256 + 10)  # each a multiple of 64 bytes
    assert kinds["activation_grads"] == 2 * 4 * 8 * 512  # two slots, the widest gradient each
