"""`python -m kit bench precision --quick`: counts and directions that do not depend on the clock
(bytes, accuracy, the stall case), never timings."""

from __future__ import annotations

import numpy as np
import pytest

from kit.bench import BENCHMARKS, format_result
from kit.bench.precision import ALIGN, COLUMNS, VARIANTS, bench_precision, matmul_kernel


@pytest.fixture(scope="module")
def result():
    return bench_precision(quick=True)


@pytest.mark.slow  # the whole benchmark
def test_every_precision_has_a_row_with_every_column(result):
    assert BENCHMARKS["precision"][0] is bench_precision
    assert [r["precision"] for r in result["rows"]] == list(VARIANTS)
    for row in result["rows"]:
        assert set(COLUMNS) <= set(row), set(COLUMNS) - set(row)
        assert row["reliable"] in ("yes", "NO") and len(row["ms_repeats"]) == result["repeats"]
    text = format_result(result)
    assert "activations_B" in text and "stall_mixed_drop_fraction_of_float32" in text


@pytest.mark.slow  # the whole benchmark (its fixture)
def test_float16_activations_are_half_of_float32s(result):
    by = {r["precision"]: r for r in result["rows"]}
    half = by["float32"]["activations_B"] / 2
    for name in ("float16", "mixed"):
        assert abs(by[name]["activations_B"] - half) <= ALIGN, (name, by[name]["activations_B"], half)
    # parameters + gradients + master weights + Adam's float32 state: mixed keeps float32's bytes, plain
    # float16 saves 2 + 2 of its 16 bytes per parameter
    assert by["mixed"]["kept_B"] == by["float32"]["kept_B"]
    assert by["float16"]["kept_B"] * 4 == by["float32"]["kept_B"] * 3


@pytest.mark.slow  # the whole benchmark (its fixture)
def test_mixed_precision_is_as_accurate_as_float32_and_plain_float16_stalls(result):
    by = {r["precision"]: r for r in result["rows"]}
    assert by["float32"]["digits_acc"] > 0.9
    assert abs(by["mixed"]["digits_acc"] - by["float32"]["digits_acc"]) <= 0.03
    if by["float32"]["fashion_acc"] != "skipped":
        assert abs(by["mixed"]["fashion_acc"] - by["float32"]["fashion_acc"]) <= 0.03
    else:
        assert result["summary"]["fashion"].startswith("skipped: ")
    s = result["summary"]
    assert s["stall_mixed_drop_fraction_of_float32"] > 0.9
    assert s["stall_float16_drop_fraction_of_float32"] < 0.5
    assert s["stall_float16_params_changed"] < s["stall_mixed_params_changed"]


def test_the_matmul_kernel_is_named():
    assert "float16" in matmul_kernel(np.float16)
    assert matmul_kernel("float32")
