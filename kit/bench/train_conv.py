"""Convolution nets in `python -m kit bench train`: kit's LeNet training step (batch 64) in each
workspace mode and ResNet-18's forward + backward (batch 16), beside PyTorch on the CPU when it
is installed. One thread each (threadpoolctl for kit's BLAS, torch.set_num_threads), rounds
interleaved, median [min-max], goal <= CONV_GOAL x PyTorch; the BLAS kernel that ran is named.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import kit
from kit.bench.common import STEP_WARMUP, min_max_ms, row_verdict, same_dtype
from kit.bench.d2l import torch_resnet18
from kit.bench.memory import torch_network
from kit.data import DataSet
from kit.measurement import measure
from kit.nn import Conv2D, Network, Sgd, WorkspaceMode, lenet, resnet18
from kit.settings import install_hint

__all__ = ["CONV_GOAL", "conv_rows"]

CONV_GOAL = 1.5  # kit / PyTorch on the CPU, LeNet step and ResNet-18 forward + backward


def _images(batch: int, seed: int) -> DataSet:
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((batch, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, batch), num_classes=10)


def _torch_conv_steps(
    lenet_batch: int, resnet_batch: int, dtype: Any = np.float32
) -> dict[str, Callable[[], object]] | None:
    """PyTorch's LeNet training step (SGD) and ResNet-18 forward + backward, the same
    architectures as kit's zoo (d2l's ResNet-18 for 28 x 28 inputs); None without PyTorch."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.manual_seed(0)
    le = torch_network("lenet")
    opt = torch.optim.SGD(le.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    lx, ly = torch.rand(lenet_batch, 1, 28, 28), torch.randint(0, 10, (lenet_batch,))

    res = torch_resnet18()  # d2l's ResNet-18, the architecture of kit's zoo.resnet18
    rx, ry = torch.rand(resnet_batch, 1, 28, 28), torch.randint(0, 10, (resnet_batch,))
    same_dtype("PyTorch LeNet and ResNet-18", dtype, lx, rx, *le.parameters(), *res.parameters())

    def lenet_step() -> None:
        opt.zero_grad(set_to_none=False)
        loss_fn(le(lx), ly).backward()
        opt.step()

    def resnet_step() -> None:
        res.zero_grad(set_to_none=False)
        loss_fn(res(rx), ry).backward()

    return {"lenet": lenet_step, "resnet": resnet_step}


def conv_rows(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """LeNet steps in each mode and ResNet-18 forward + backward, kit vs PyTorch, one thread each."""
    lenet_batch, resnet_batch = 64, 16
    torch_steps = _torch_conv_steps(lenet_batch, resnet_batch, dtype=lenet().dtype)
    lenet_data, resnet_data = _images(lenet_batch, 1), _images(resnet_batch, 2)
    lenets = {mode: lenet(training_workspace_mode=mode, updater=Sgd(0.01)) for mode in WorkspaceMode}
    resnet = resnet18(updater=Sgd(0.01))  # SEPARATE, the default training mode
    resnet_name = f"kit ResNet-18 fwd+bwd b{resnet_batch} (SEPARATE)"
    fns: dict[str, Callable[[], object]] = {
        f"kit LeNet step b{lenet_batch} ({m.value})": (lambda n=n: n.fit_batch(lenet_data)) for m, n in lenets.items()
    }
    res_fns = {resnet_name: lambda: resnet.compute_gradient_and_score(resnet_data)}
    if torch_steps is not None:
        fns[f"PyTorch LeNet step b{lenet_batch}"] = torch_steps["lenet"]
        res_fns[f"PyTorch ResNet-18 fwd+bwd b{resnet_batch}"] = torch_steps["resnet"]
    blas, lenet_t, resnet_t = _timed_on_one_thread(fns, res_fns, quick, torch_steps is not None)
    rows = _versus(lenet_t) + _versus(resnet_t)
    for mode, net in lenets.items():
        row = next(r for r in rows if r["case"] == f"kit LeNet step b{lenet_batch} ({mode.value})")
        row.update(_step_memory(net, lenet_data))
    kept = {
        name: sum(layer.kept_bytes for layer in net.layers if isinstance(layer, Conv2D))
        for name, net in (("lenet", lenets[WorkspaceMode.SEPARATE]), ("resnet18", resnet))
    }
    summary = {
        "conv_threads": f"kit BLAS threads: {', '.join(blas) or 'none found'}"
        + (", PyTorch intra-op threads: 1" if torch_steps is not None else ", PyTorch not installed"),
        "lenet_kept_columns_kib": kept["lenet"] / 1024,
        "resnet18_kept_columns_mib": kept["resnet18"] / 2**20,
    }
    summary["goal_lenet"] = _goal(lenet_t, f"kit LeNet step b{lenet_batch} (SEPARATE)")  # the default mode
    summary["goal_resnet18"] = _goal(resnet_t, resnet_name)
    warnings = sorted({w for t in (*lenet_t.values(), *resnet_t.values()) for w in t.warnings})
    if warnings:
        summary["conv_warnings"] = "; ".join(warnings)
    return rows, summary


def _timed_on_one_thread(
    fns: dict[str, Callable[[], object]], res_fns: dict[str, Callable[[], object]], quick: bool, torch: bool
) -> tuple[list[str], dict[str, measure.Timing], dict[str, measure.Timing]]:
    """The LeNet steps and the ResNet-18 passes timed interleaved, kit's BLAS and PyTorch on one
    thread each: (the BLAS libraries that ran, LeNet's timings, ResNet's)."""
    if torch:
        import torch as _torch

        torch_threads = _torch.get_num_threads()
        _torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            blas = [
                f"{p['internal_api']} {p['num_threads']} ({p.get('architecture') or 'unknown'} kernels)"
                for p in threadpool_info()
                if p["user_api"] == "blas"
            ]
            sync = kit.backend.sync
            lenet_t = measure.compare(
                fns, repeats=3 if quick else 11, number=3 if quick else 10, sync=sync, warmup=STEP_WARMUP
            )
            resnet_t = measure.compare(res_fns, repeats=2 if quick else 9, number=1, sync=sync, warmup=STEP_WARMUP)
    finally:
        if torch:
            _torch.set_num_threads(torch_threads)
    return blas, lenet_t, resnet_t


def _step_memory(net: Network, data: DataSet) -> dict[str, float]:
    """One more training step of `net`: the heap allocations it made and its workspaces' peak (KiB)."""
    before = kit.memory.heap_allocations(this_thread=True)
    net.fit_batch(data)
    return {
        "heap_allocs_per_step": kit.memory.heap_allocations(this_thread=True) - before,
        "peak_workspace_kib": sum(s["peak_used"] for s in net.workspace_stats()["training"].values()) / 1024,
    }


def _torch_ratios(timings: dict[str, measure.Timing], name: str) -> list[float] | None:
    """kit / PyTorch in each interleaved round (None without PyTorch)."""
    torch_name = next((n for n in timings if n.startswith("PyTorch")), None)
    if torch_name is None or name == torch_name:
        return None
    return [t / b for t, b in zip(timings[name].seconds, timings[torch_name].seconds)]


def _goal(timings: dict[str, measure.Timing], name: str) -> str:
    ratios = _torch_ratios(timings, name)
    if ratios is None:
        return f"{name} / PyTorch <= {CONV_GOAL}: not measured (PyTorch not installed: {install_hint('bench')})"
    reliable = all(t.reliable for t in timings.values())
    ratio = statistics.median(ratios)
    return measure.goal(f"{name} / PyTorch", ratio, "<=", CONV_GOAL, "x", reliable=reliable, repeats=ratios)


def _versus(timings: dict[str, measure.Timing]) -> list[dict[str, Any]]:
    """Rows for kit variants against the PyTorch one (when present), per-round ratios."""
    rows = []
    for name, t in timings.items():
        row: dict[str, Any] = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": min_max_ms(t.seconds)}
        ratios = _torch_ratios(timings, name)
        if ratios is not None:
            ratio = statistics.median(ratios)
            row.update(
                ratio=ratio, ratio_to="PyTorch", goal=f"<= {CONV_GOAL}: " + row_verdict(ratio, CONV_GOAL, ratios)
            )
        rows.append(row)
    return rows
