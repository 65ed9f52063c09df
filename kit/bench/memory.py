"""`python -m kit bench memory`: the memory of one training step, kit beside PyTorch.

For each network (the MLP 784-512-256-10, LeNet, d2l's ResNet-18 for 28 x 28 inputs) and batch,
each side trains three SGD steps in a fresh process, and the process's peak resident memory
over what it held once the model and the batch were built is read from the kernel: the peak
counter (VmHWM) is reset just before the steps (`/proc/self/clear_refs`) and read after them.
On a GPU what is compared is the device memory each allocator reserved (CuPy's pool, PyTorch's
`max_memory_reserved`; no GPU run has checked this yet). The sides take turns; the median of the
repeats is reported.

Beside the total, kit's bytes by kind, from one more instrumented step in the same process:
parameters and gradients, the updater's state, the activations kept for backward (the
ACTIVATIONS workspace at the end of the forward pass), the activation gradients and the layers'
working memory (peaks of their workspaces), and the learned arenas' room beyond their cycle. On
PyTorch's side, what autograd saves for backward (counted once per storage, through
`torch.autograd.graph.saved_tensors_hooks`). "keep" is the smaller of the two: what backward
must keep, as the leaner side shows it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

import kit
from kit import settings
from kit.bench.common import device_label
from kit.bench.d2l import torch_resnet18
from kit.data import DataSet
from kit.measurement import measure
from kit.monitor.timeline import memory_timeline
from kit.nn import Network, Sgd, WorkspaceMode, lenet, mlp, resnet18
from kit.nn.recompute import WS_RECOMPUTE
from kit.nn.workspace_mgr import WS_ALL_LAYERS_ACT, WS_LAYER_WORKING_MEM, WS_SINGLE

if TYPE_CHECKING:
    import torch

__all__ = [
    "COLUMNS",
    "MEMORY_GOAL",
    "batch_for",
    "bench_memory",
    "heap_during_step",
    "kit_breakdown",
    "kit_network",
    "step_memory",
    "torch_network",
    "torch_training_step",
]

MEMORY_GOAL = 1.0  # kit / PyTorch, peak resident growth of three training steps
MIB = 2**20
STEPS = 3

# (network, batch) rows: the workload (ResNet-18 at 16 and 64) and the small nets
CASES = (("mlp", 64), ("lenet", 64), ("resnet18", 16), ("resnet18", 64))
QUICK_CASES = (("mlp", 64), ("lenet", 64), ("resnet18", 16))


# ---- one side, in this process ------------------------------------------------------------
def _peak_reset() -> bool:
    """Reset this process's peak resident counter (Linux); False where the kernel has none."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def batch_for(net: str, batch: int, seed: int = 0) -> tuple[Any, Any]:
    """A batch of random float32 features (images for the conv nets) and class labels."""

    rng = np.random.default_rng(seed)
    shape = (batch, 784) if net == "mlp" else (batch, 1, 28, 28)
    return rng.random(shape, dtype=np.float32), rng.integers(0, 10, batch)


def kit_network(net: str, mode: str) -> Any:
    """kit's `net` in workspace `mode` ("SEPARATE", "NONE", ...; "SEPARATE recompute": ResNet-18's
    blocks recomputed in backward, kit.nn.recompute)."""

    mode, _, recompute = mode.partition(" ")
    kw: dict[str, Any] = {"updater": Sgd(0.1), "training_workspace_mode": WorkspaceMode(mode)}
    if net == "mlp":
        return mlp(784, hidden=(512, 256), n_out=10, **kw)
    if net == "lenet":
        return lenet(**kw)
    return resnet18(recompute=recompute == "recompute", **kw)


def torch_network(net: str) -> Any:
    """PyTorch's form of kit's `net`: the same layers, PyTorch's default initialisation."""
    from torch import nn

    if net == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    if net == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10),
        )  # fmt: skip
    return torch_resnet18()


def step_memory(side: str, net: str, batch: int, mode: str = "SEPARATE") -> dict[str, Any]:
    """In this process: build `net`, make the batch, reset the peak counter, train STEPS steps;
    the peak growth in bytes (and, for kit, its bytes by kind). On the CPU the growth of the
    process's peak resident memory; on a GPU (kit's default device, and CUDA for PyTorch) the
    device memory each side's allocator reserved: CuPy's pool, which holds kit's arenas and every
    block it caches, against `torch.cuda.max_memory_reserved`."""

    x, y = batch_for(net, batch)
    gpu = kit.current_device().kind != "cpu"
    with threadpool_limits(limits=1, user_api="blas"):
        if side == "kit":
            model = kit_network(net, mode)
            ds = DataSet(kit.asarray(x), kit.asarray(y), num_classes=10)
            step = lambda: model.fit_batch(ds)  # noqa: E731
        else:
            step, (model, loss_fn, tx, ty) = _torch_training(net, x, y, 0.1, "cuda" if gpu else "cpu")
        out: dict[str, Any] = {"peak_growth": _device_growth(side, step) if gpu else _resident_growth(step)}
        if side == "kit":
            out["kinds"] = kit_breakdown(model, ds)
        else:
            out["saved_for_backward"] = _torch_saved(model, loss_fn, tx, ty)
            out["params_and_grads"] = 2 * sum(p.numel() * p.element_size() for p in model.parameters())
    return out


def torch_training_step(net: str, x: np.ndarray, y: np.ndarray, lr: float = 0.1) -> Callable[[], None]:
    """A call that trains PyTorch's `net` one SGD step on (x, y), one intra-op thread, on the CPU."""
    return _torch_training(net, x, y, lr, "cpu")[0]


def _torch_training(net: str, x: np.ndarray, y: np.ndarray, lr: float, where: str) -> tuple[Callable[[], None], tuple]:
    """PyTorch's `net` on `where` (one intra-op thread), and a call that trains it one SGD step on
    (x, y); with (model, loss function, x, y as tensors)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch_network(net).to(where)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x).to(where), torch.from_numpy(y).to(where)

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        loss_fn(model(tx), ty).backward()
        opt.step()

    return step, (model, loss_fn, tx, ty)


def _resident_growth(step: Callable[[], object]) -> int:
    """Bytes the process's peak resident memory grew by over STEPS calls of `step`."""
    if not _peak_reset():
        raise RuntimeError("bench memory reads Linux's peak resident counter (/proc/self/clear_refs)")
    base = _status_kib("VmRSS")
    for _ in range(STEPS):
        step()
    return (_status_kib("VmHWM") - base) * 1024


def _device_growth(side: str, step: Callable[[], object]) -> int:
    """Bytes of device memory the side's allocator reserved beyond what it held before the steps."""
    if side == "kit":
        pool = kit.backend.cupy().get_default_memory_pool()
        base = pool.total_bytes()
        for _ in range(STEPS):
            step()
        kit.backend.sync()
        return pool.total_bytes() - base  # a pool only grows between free_all_blocks calls
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(STEPS):
        step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved() - base


def _torch_saved(model: torch.nn.Module, loss_fn: torch.nn.Module, tx: torch.Tensor, ty: torch.Tensor) -> int:
    """Bytes autograd keeps for backward over one forward pass, once per storage."""
    import torch

    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(tx), ty)
    del loss
    return sum(seen.values())


def heap_during_step(net: Network, ds: DataSet) -> dict[str, int]:
    """One training step of a NONE-mode network recorded by kit.memory_timeline: the heap bytes
    alive (allocated during the step and not yet released) at the end of the forward pass, their
    peak during backward, and what is left when backward has run. Each layer drops what it kept
    as its backward passes it, so the live bytes fall while backward runs."""

    mgr = net.train_mgr
    x, y = net.checked_batch(ds)
    with memory_timeline() as tl:
        out = net.body.forward(x, mgr, True)
        forward_end = len(tl.events)
        _score, eps = net.loss.value_and_grad(out, y, mgr)
        del out
        dx = net.body.backward(eps, mgr)
        del eps, dx
        backward_end = len(tl.events)
    live, trace = 0, []
    for e in tl.events:
        if e["workspace"] is None:
            live += e["nbytes"] if e["kind"] == "alloc" else -e["nbytes"] if e["kind"] == "release" else 0
        trace.append(live)
    return {
        "live_after_forward": trace[forward_end - 1],
        "peak_during_backward": max(trace[forward_end - 1 : backward_end]),
        "live_after_backward": trace[backward_end - 1],
    }


def kit_breakdown(net: Network, ds: DataSet) -> dict[str, int]:
    """kit's bytes of one training step by kind (after the steps that sized its workspaces)."""

    mgr = net.train_mgr
    kinds = {
        "params_and_grads": net.flat_params.data.nbytes + net.flat_grads.data.nbytes,
        "updater_state": sum(a.nbytes for a in (net.updater_state or {}).values()),
    }
    if mgr.mode.value == "NONE":  # the heap: what the recorded step held alive
        heap = heap_during_step(net, ds)
        kinds["activations_kept"] = heap["live_after_forward"]
        kinds["heap_peak_during_backward"] = heap["peak_during_backward"]
        kinds["heap_live_after_backward"] = heap["live_after_backward"]
        return kinds
    x, y = net.checked_batch(ds)
    act = mgr.workspace(WS_ALL_LAYERS_ACT if mgr.mode.value == "SEPARATE" else WS_SINGLE)
    with mgr.iteration():
        out = net.body.forward(x, mgr, True)
        kinds["activations_kept"] = act.used if act is not None else 0
        with mgr.layer_call():
            _score, eps = net.loss.value_and_grad(out, y, mgr)
        net.body.backward(eps, mgr)
    stats = mgr.stats()
    act_stats = stats.get(WS_ALL_LAYERS_ACT) or stats.get(WS_SINGLE)
    if act_stats is not None:
        kinds["activation_workspace_peak"] = act_stats["peak_used"]
        kinds["arena_room_beyond_cycle"] = sum(max(0, s["capacity"] - s["peak_used"]) for s in stats.values())
    grad_names = [n for n in stats if "ACTIVATION_GRAD" in n]
    kinds["activation_grads"] = sum(stats[n]["capacity"] for n in grad_names)
    kinds["working_memory"] = stats[WS_LAYER_WORKING_MEM]["capacity"] if WS_LAYER_WORKING_MEM in stats else 0
    kinds["recomputed_block"] = stats[WS_RECOMPUTE]["capacity"] if WS_RECOMPUTE in stats else 0
    return kinds


# ---- both sides, each in fresh processes -------------------------------------------------
def _in_fresh_process(side: str, net: str, batch: int, mode: str) -> dict[str, Any]:
    code = (
        "import json, sys; from kit.bench.memory import step_memory; "
        f"print('RESULT' + json.dumps(step_memory({side!r}, {net!r}, {batch}, {mode!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"bench memory: the {side} {net} b{batch} process failed:\n{done.stderr[-2000:]}")
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


COLUMNS = (
    "case",
    "peak_mib",
    "min_max_mib",
    "ratio",
    "activations_kept_mib",
    "activation_grads_mib",
    "working_memory_mib",
    "recomputed_block_mib",
    "arena_room_beyond_cycle_mib",
    "saved_for_backward_mib",
)
COLUMN_NOTES = {
    "peak_mib": f"peak resident growth over {STEPS} SGD steps, over the built model and batch, a fresh process (MiB)",
    "ratio": "peak / PyTorch's peak on the same network and batch",
    "activations_kept_mib": "kit: the ACTIVATIONS workspace at the end of the forward pass (NONE: heap bytes alive)",
    "activation_grads_mib": "kit: SEPARATE's activation-gradient slots",
    "working_memory_mib": "kit: the layer working-memory workspace (im2col chunks, BatchNorm's normalised input, ...)",
    "recomputed_block_mib": "kit, recompute: the workspace one block's insides are recomputed in (WS_RECOMPUTE)",
    "arena_room_beyond_cycle_mib": "kit: the learned arenas' capacity beyond their largest cycle",
    "saved_for_backward_mib": "PyTorch: the tensors autograd saves over one forward pass, once per storage",
}


def bench_memory(
    quick: bool = False,
    cases: tuple[tuple[str, int], ...] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> dict[str, Any]:
    """Peak resident growth of STEPS training steps, kit (SEPARATE, its default, NONE, and for
    ResNet-18 SEPARATE with its blocks recomputed) beside PyTorch, each run in a fresh process,
    the sides in turn. `progress(done, total)` is called after each process (a kit.widgets.Progress)."""
    cases = cases or (QUICK_CASES if quick else CASES)
    repeats = 1 if quick else 3
    has_torch = _torch_available()
    plan = [(net, batch, _modes(net)) for net, batch in cases]
    total, done = repeats * sum(len(modes) + has_torch for _, _, modes in plan), 0
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"steps": f"{STEPS} SGD steps (lr 0.1), 1x28x28 inputs (784 for the MLP), float32"}
    for net, batch, modes in plan:
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeats):  # the sides take turns
            for side, mode in [("kit", m) for m in modes] + [("torch", "NONE")] * has_torch:
                name = f"kit {mode}" if side == "kit" else "PyTorch"
                runs.setdefault(name, []).append(_in_fresh_process(side, net, batch, mode))
                done += 1
                if progress is not None:
                    progress(done, total)
        rows += _case_rows(net, batch, runs, summary)
    if not has_torch:
        summary["note"] = f"PyTorch is not installed, so no ratios: {settings.install_hint('bench')}"
    return {
        "benchmark": "memory",
        "device": device_label(),
        "repeats": repeats,
        "columns": list(COLUMNS),
        "column_notes": COLUMN_NOTES,
        "rows": rows,
        "summary": summary,
    }


def _modes(net: str) -> tuple[str, ...]:
    """kit's settings measured for `net`: its default, the heap, and for ResNet-18 recomputation."""
    return ("SEPARATE", "NONE", "SEPARATE recompute") if net == "resnet18" else ("SEPARATE", "NONE")


def _case_rows(
    net: str, batch: int, runs: dict[str, list[dict[str, Any]]], summary: dict[str, Any]
) -> list[dict[str, Any]]:
    """One row per side of one (network, batch); the goal's verdict and what backward keeps in `summary`."""
    torch_runs = runs.get("PyTorch")
    torch_peak = statistics.median(r["peak_growth"] for r in torch_runs) if torch_runs else None
    rows = []
    for variant, results in runs.items():
        peaks = [r["peak_growth"] for r in results]
        row: dict[str, Any] = dict.fromkeys(COLUMNS)
        row.update(
            case=f"{net} b{batch} {variant}",
            peak_mib=statistics.median(peaks) / MIB,
            min_max_mib=f"{min(peaks) / MIB:.1f}-{max(peaks) / MIB:.1f}",
        )
        last = results[-1]
        row.update({f"{k}_mib": v / MIB for k, v in last.get("kinds", {}).items()})
        if "saved_for_backward" in last:
            row["saved_for_backward_mib"] = last["saved_for_backward"] / MIB
        if torch_peak and variant != "PyTorch":
            row["ratio"] = statistics.median(peaks) / torch_peak
            if variant == "kit SEPARATE":  # the default training mode: the goal's row
                pairs = [r["peak_growth"] / t["peak_growth"] for r, t in zip(results, torch_runs)]
                summary[f"goal_{net}_b{batch}"] = measure.goal(
                    f"{net} b{batch}: kit (SEPARATE) / PyTorch peak memory", row["ratio"], "<=", MEMORY_GOAL, "x",
                    repeats=pairs,
                )  # fmt: skip
        rows.append(row)
    if torch_runs and "kit SEPARATE" in runs:
        kept = runs["kit SEPARATE"][-1]["kinds"]["activations_kept"]
        saved = torch_runs[-1]["saved_for_backward"]
        summary[f"kept_{net}_b{batch}"] = (
            f"for backward kit keeps {kept / MIB:.1f} MiB, PyTorch {saved / MIB:.1f} MiB "
            f"(kit / PyTorch {kept / saved:.2f})"
        )
    return rows
