"""kit.bench.train_conv: the convolution rows of `kit bench train`. Rows and goals from timings
worked by hand (kit / PyTorch per interleaved round, the median, the goal's verdict, and what a
run without PyTorch says instead); the timing and memory helpers on a tiny LeNet batch, on one
BLAS thread; PyTorch's steps fed kit's dtype."""

import numpy as np
import pytest

from kit.bench import train_conv
from kit.bench.train_conv import CONV_GOAL
from kit.measurement.measure import Timing
from kit.nn import Sgd, WorkspaceMode, lenet
from kit.settings import install_hint

KIT, TORCH = "kit LeNet step b64 (SEPARATE)", "PyTorch LeNet step b64"


def _timings(kit_s, torch_s=None, load=0.0):
    out = {KIT: Timing(KIT, kit_s, 3, load)}
    if torch_s is not None:
        out[TORCH] = Timing(TORCH, torch_s, 3, load)
    return out


def test_the_ratio_to_pytorch_is_taken_round_by_round():
    timings = _timings([0.010, 0.012, 0.011], [0.010, 0.008, 0.011])
    assert train_conv._torch_ratios(timings, KIT) == pytest.approx([1.0, 1.5, 1.0])
    assert train_conv._torch_ratios(timings, TORCH) is None  # PyTorch against itself: no row ratio
    assert train_conv._torch_ratios(_timings([0.01]), KIT) is None  # no PyTorch


def test_rows_give_kit_its_ratio_and_verdict_and_pytorch_its_time():
    rows = train_conv._versus(_timings([0.010, 0.012, 0.011], [0.010, 0.008, 0.011]))
    kit_row, torch_row = rows
    assert kit_row["case"] == KIT and kit_row["ms_per_step"] == pytest.approx(11.0)
    assert kit_row["min_max_ms"] == "10-12" and kit_row["ratio"] == pytest.approx(1.0)
    assert kit_row["ratio_to"] == "PyTorch" and kit_row["goal"] == f"<= {CONV_GOAL}: met"  # every round <= 1.5
    assert torch_row == {"case": TORCH, "ms_per_step": pytest.approx(10.0), "min_max_ms": "8-11"}


@pytest.mark.parametrize(
    ("kit_s", "torch_s", "load", "verdict"),
    [
        ([0.010, 0.011, 0.012], [0.010, 0.010, 0.010], 0.0, "-> met ("),  # 1.0-1.2x
        ([0.030, 0.031, 0.032], [0.010, 0.010, 0.010], 0.0, "-> NOT met ("),  # 3.0-3.2x
        ([0.010, 0.011, 0.012], [0.010, 0.010, 0.010], 0.99, "no verdict: kit.measure flagged"),  # a busy machine
    ],
)
def test_the_goal_line_says_met_not_met_or_no_verdict(kit_s, torch_s, load, verdict):
    line = train_conv._goal(_timings(kit_s, torch_s, load), KIT)
    assert line.startswith(f"{KIT} / PyTorch") and verdict in line and f"{CONV_GOAL}" in line


def test_without_pytorch_the_goal_says_it_was_not_measured_and_how_to_install_it():
    line = train_conv._goal(_timings([0.01, 0.01]), KIT)
    assert line == f"{KIT} / PyTorch <= {CONV_GOAL}: not measured (PyTorch not installed: {install_hint('bench')})"


def test_one_step_s_memory_on_a_tiny_lenet_batch():
    net = lenet(training_workspace_mode=WorkspaceMode.SEPARATE, updater=Sgd(0.01))
    data = train_conv._images(4, seed=0)
    assert data.features.shape == (4, 1, 28, 28) and data.features.numpy().dtype == np.float32
    for _ in range(3):  # the workspaces learn their sizes
        net.fit_batch(data)
    memory = train_conv._step_memory(net, data)
    assert memory["heap_allocs_per_step"] >= 0 and memory["peak_workspace_kib"] > 0
    assert (
        memory["peak_workspace_kib"] == sum(s["peak_used"] for s in net.workspace_stats()["training"].values()) / 1024
    )


def test_steps_are_timed_interleaved_on_one_blas_thread():
    calls = {"a": 0, "b": 0, "r": 0}

    def count(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    blas, first, second = train_conv._timed_on_one_thread(
        {"a": count("a"), "b": count("b")}, {"r": count("r")}, quick=True, torch=False
    )
    assert all(" 1 (" in name for name in blas)  # every BLAS library on one thread while timed
    assert set(first) == {"a", "b"} and set(second) == {"r"}
    assert [len(first["a"].seconds), len(second["r"].seconds)] == [3, 2]  # quick: 3 rounds, 2 for ResNet
    assert calls["a"] == calls["b"] >= 3 * 3 and calls["r"] >= 2


@pytest.mark.slow  # importing PyTorch and building its ResNet-18: over 15 s on a loaded machine
def test_pytorchs_steps_compute_in_kits_dtype_and_refuse_another():
    pytest.importorskip("torch")
    steps = train_conv._torch_conv_steps(2, 1)
    assert set(steps) == {"lenet", "resnet"}
    with pytest.raises(
        TypeError, match=r"PyTorch LeNet and ResNet-18: the baseline holds float32 beside kit's float64"
    ):
        train_conv._torch_conv_steps(2, 1, dtype=np.float64)
