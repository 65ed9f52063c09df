"""kit.bench.kernels: the kernel alternatives the benchmark times side by side compute the same
thing as the kernel kit uses (so the timings compare like with like), exactly one of each group is
kit's, and every row gives its ratio to kit's kernel, which is 1 for kit's own."""

import numpy as np
import pytest

import kit
from kit.bench import kernels
from kit.bench.kernels import conv_forward_variants, conv_input_grad_variants, kernel_rows, maxpool_variants


def _agree(variants, skip=()):
    fns, out = variants
    results = {}
    for name, fn in fns.items():
        out[...] = np.nan
        fn()
        results[name] = out.copy()
    kit_result = next(r for name, r in results.items() if name.endswith("(kit)"))
    for name, result in results.items():
        if name not in skip:
            np.testing.assert_allclose(result, kit_result, rtol=1e-4, atol=1e-3, err_msg=name)
    return results


@pytest.mark.parametrize(
    ("c", "h", "oc", "k", "p"),
    [(3, 8, 4, 5, 0), (4, 6, 5, 3, 1), (2, 7, 3, 5, 2), (32, 5, 32, 3, 1), (24, 6, 24, 3, 0)],
)
def test_benchmarked_conv_variants_agree(c, h, oc, k, p):
    for variants, count in (
        (conv_forward_variants(3, c, h, oc, k, p), 6),
        (conv_input_grad_variants(3, c, h, oc, k, p, add_at=True), 6),
    ):
        names = list(_agree(variants))
        assert len(names) == count
        per_example = oc * c * k * k <= kit.nn.conv.PER_EXAMPLE_MAX_WEIGHTS
        (kit_name,) = [name for name in names if name.endswith("(kit)")]  # exactly one: what Conv2D does
        assert ("per example" in kit_name) == per_example


def test_benchmarked_pool_variants_agree_except_the_tie_counting_mask():
    forward, backward = maxpool_variants(3, 4, 8, 2)
    _agree(forward)
    results = _agree(backward, skip={"mask x == max, times eps (ties counted twice)"})
    mask = results["mask x == max, times eps (ties counted twice)"]
    assert not np.allclose(mask, results["offsets == o into the reshape views (kit)"])  # why it is not used


def test_the_input_gradient_without_add_at_leaves_only_that_variant_out():
    with_add_at, _ = conv_input_grad_variants(2, 3, 6, 4, 3, 1, add_at=True)
    without, _ = conv_input_grad_variants(2, 3, 6, 4, 3, 1, add_at=False)
    assert len(with_add_at) == len(without) + 1 and set(without) < set(with_add_at)
    (extra,) = set(with_add_at) - set(without)
    assert "add.at" in extra


def test_rows_give_each_variant_its_ratio_to_kits_kernel():
    x = np.random.default_rng(0).standard_normal(1000)
    out = np.empty_like(x)
    fns = {"np.multiply (kit)": lambda: np.multiply(x, 2.0, out=out), "x + x": lambda: np.add(x, x, out=out)}
    rows = kernels._rows("double", fns, number=5, repeats=3)
    assert [r["case"] for r in rows] == ["double: np.multiply (kit)", "double: x + x"]
    kit_row = rows[0]
    assert kit_row["ratio"] == 1.0 and all(r["ratio"] > 0 and r["ratio_to"] == "kit kernel" for r in rows)
    for r in rows:
        lo, hi = (float(v) for v in r["min_max_ms"].split("-"))
        assert lo <= float(f"{r['ms_per_step']:.3g}") <= hi


@pytest.mark.slow  # the whole benchmark, quick: over 10 s on a loaded 2-core machine
def test_kernel_rows_time_every_group_with_one_kit_kernel_each():
    rows = kernel_rows(quick=True)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["case"].split(": ")[0], []).append(r)
    assert len(groups) == 6  # conv forward x2, conv input gradient x2, max pooling forward and backward
    for name, group in groups.items():
        kit_rows = [r for r in group if r["case"].endswith("(kit)")]
        assert len(kit_rows) == 1 and kit_rows[0]["ratio"] == 1.0, name
        assert len(group) >= 3 and all(r["ms_per_step"] > 0 for r in group), name
