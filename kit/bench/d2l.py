"""The d2l table (seed 004, "Concise Implementation for Multiple GPUs"): ResNet-18 on Fashion-MNIST.

    python -m kit bench d2l                 # 10 epochs, batch 256, SGD lr 0.1, kit beside PyTorch
    python -m kit bench d2l --quick         # 1 epoch on 2,048 examples (a smoke run)

d2l trains its small-input ResNet-18 (3x3 stem, no max-pool, four stages of two residual blocks)
on Fashion-MNIST with minibatch SGD, lr 0.1, batch 256, for 10 epochs and reports a test accuracy
of about 0.91-0.92. kit's `zoo.resnet18` is that network; PyTorch's twin is built here layer for
layer. The two train **epoch by epoch in turn** on the same device, so drift in the machine hits
both alike, and each epoch's time is taken with the device synchronised at both ends. Each keeps
its own default weight initialisation (d2l draws N(0, 0.01) for both); the data are the same
arrays, shuffled per epoch by each library's own generator, held on the device before timing starts
(d2l's DataLoader reads from the host: its epoch times include that copy).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

import kit
from kit.bench.common import _device_label
from kit.data import ArrayIterator, DataNotFoundError, load_fashion_mnist
from kit.nn import Sgd, resnet18
from kit.reference import run_label

__all__ = ["bench_d2l", "d2l_table", "torch_resnet18"]

EPOCH_RATIO_GOAL = 1.5  # the goal: kit's epoch time at most 1.5 x PyTorch's on the same device
ACCURACY_GOAL = 0.91  # d2l reports about 0.91-0.92 after 10 epochs


def torch_resnet18(num_classes: int = 10, in_channels: int = 1) -> Any:
    """d2l's ResNet-18 for 28 x 28 inputs in PyTorch: the architecture of kit's `zoo.resnet18`."""
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, cin: int, cout: int, use_1x1conv: bool = False, stride: int = 1) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, stride=stride)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.conv3 = nn.Conv2d(cin, cout, 1, stride=stride) if use_1x1conv else None
            self.bn1, self.bn2 = nn.BatchNorm2d(cout), nn.BatchNorm2d(cout)

        def forward(self, x: Any) -> Any:
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (self.conv3(x) if self.conv3 is not None else x))

    blocks: list[Any] = [nn.Conv2d(in_channels, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for i, c in enumerate((64, 128, 256, 512)):
        blocks += [Residual(cin, c, use_1x1conv=i > 0, stride=1 if i == 0 else 2), Residual(c, c)]
        cin = c
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes))


def _class_indices(labels: np.ndarray) -> np.ndarray:
    """A DataSet's labels (one-hot rows or class numbers) as int64 class numbers for PyTorch."""
    return (labels.argmax(axis=1) if labels.ndim == 2 else labels).astype(np.int64)


def _torch_side(
    train: Any, test: Any, device_kind: str, lr: float, batch: int, tf32: bool = True
) -> dict[str, Any] | None:
    """PyTorch's model, data and epoch function. `tf32=True` is PyTorch's default on a GPU:
    cuDNN convolutions in TF32 on the tensor cores (kit's CuPy matmuls run in full float32);
    False forces float32 convolutions, like for like with kit."""
    try:
        import torch
    except ImportError:
        return None
    tdev = torch.device("cuda:0" if device_kind == "gpu" and torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = torch_resnet18().to(tdev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.as_tensor(train.features.numpy()).to(tdev)
    y = torch.as_tensor(_class_indices(train.labels.numpy())).to(tdev)
    tx = torch.as_tensor(test.features.numpy()).to(tdev)
    ty = torch.as_tensor(_class_indices(test.labels.numpy())).to(tdev)
    gen = torch.Generator(device=tdev).manual_seed(0)
    peak: list[int] = []

    def sync() -> None:
        if tdev.type == "cuda":
            torch.cuda.synchronize()

    def epoch() -> float:
        torch.backends.cudnn.allow_tf32 = tf32  # a process-wide flag: set for each side's epoch
        if tdev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        model.train()
        order = torch.randperm(len(x), device=tdev, generator=gen)
        total = torch.zeros((), device=tdev)
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        if tdev.type == "cuda":
            peak.append(torch.cuda.max_memory_allocated())
        return float(total) / len(x)

    def accuracy() -> float:
        torch.backends.cudnn.allow_tf32 = tf32
        model.eval()
        right = 0
        with torch.no_grad():
            for start in range(0, len(tx), 1024):
                right += int((model(tx[start : start + 1024]).argmax(1) == ty[start : start + 1024]).sum())
        return right / len(tx)

    return {
        "device": str(tdev),
        "version": torch.__version__,
        "convolutions": "TF32 (PyTorch's default)" if tf32 and tdev.type == "cuda" else "float32",
        "epoch": epoch,
        "accuracy": accuracy,
        "sync": sync,
        "peak": peak,
    }


def bench_d2l(
    quick: bool = False, epochs: int | None = None, batch: int = 256, lr: float = 0.1, limit: int | None = None
) -> dict[str, Any]:
    """kit's ResNet-18 and PyTorch's, trained in turn epoch by epoch on the current device;
    `limit` keeps the first N examples of each split (quick: 2,048)."""
    epochs = (1 if quick else 10) if epochs is None else epochs
    try:
        train, test = load_fashion_mnist(limit=limit if limit is not None else (2048 if quick else None))
    except DataNotFoundError as exc:
        return {"benchmark": "d2l", "skipped": str(exc)}
    dev = kit.current_device()
    train_d, test_d = train.to(dev), test.to(dev)
    net = resnet18(device=dev, updater=Sgd(lr))
    sides: dict[str, dict[str, Any]] = {}
    for name, tf32 in (("pytorch", True), ("pytorch_fp32", False)):
        side = _torch_side(train, test, dev.kind, lr, batch, tf32=tf32)
        if side is not None and (tf32 or dev.kind == "gpu"):  # on the CPU there is no TF32 to turn off
            sides[name] = side
    seconds: dict[str, list[float]] = {"kit": [], **{n: [] for n in sides}}
    losses: dict[str, list[float]] = {n: [] for n in sides}
    pool = kit.backend.cupy().get_default_memory_pool() if dev.kind == "gpu" else None
    for e in range(epochs):  # each epoch: kit, then each PyTorch variant, in turn
        kit.backend.sync()
        t0 = time.perf_counter()
        net.fit(ArrayIterator(train_d, batch, shuffle=True, seed=e), epochs=1)
        kit.backend.sync()
        seconds["kit"].append(time.perf_counter() - t0)
        for name, side in sides.items():
            side["sync"]()
            t0 = time.perf_counter()
            losses[name].append(side["epoch"]())
            side["sync"]()
            seconds[name].append(time.perf_counter() - t0)
    kit_acc = float(net.evaluate(ArrayIterator(test_d, 1024)).accuracy())
    result: dict[str, Any] = {
        "benchmark": "d2l",
        "device": _device_label(),
        "setup": f"ResNet-18 (d2l, 28x28), Fashion-MNIST {len(train)} train / {len(test)} test, batch {batch}, "
        f"SGD lr {lr}, {epochs} epoch(s); kit and PyTorch in turn each epoch, on the same device",
        "kit": {
            "epoch_seconds": [round(v, 3) for v in seconds["kit"]],
            "median_epoch_seconds": statistics.median(seconds["kit"]),
            "test_accuracy": round(kit_acc, 4),
            "matmuls": "float32 (CuPy's default: no TF32)" if dev.kind == "gpu" else "float32",
        },
    }
    if pool is not None:
        result["kit"]["device_pool_bytes"] = int(pool.total_bytes())
    # the first epoch holds one-time work (kernel compilation, cuDNN autotuning, pool growth)
    steady = slice(1, None) if epochs > 2 else slice(None)
    for name, side in sides.items():
        ratios = [k / t for k, t in zip(seconds["kit"][steady], seconds[name][steady])]
        result[name] = {
            "device": side["device"],
            "version": side["version"],
            "convolutions": side["convolutions"],
            "epoch_seconds": [round(v, 3) for v in seconds[name]],
            "median_epoch_seconds": statistics.median(seconds[name]),
            "train_loss": [round(v, 4) for v in losses[name]],
            "test_accuracy": round(side["accuracy"](), 4),
            "peak_allocated_bytes": max(side["peak"]) if side["peak"] else None,
            "kit_over_this_epoch_ratio": round(statistics.median(ratios), 3),
            "ratio_min_max": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    rows = []
    for e in range(epochs):
        row: dict[str, Any] = {"epoch": e + 1, "kit_s": seconds["kit"][e]}
        for name in sides:
            row[f"{name}_s"] = seconds[name][e]
            row[f"kit/{name}"] = seconds["kit"][e] / seconds[name][e]
        rows.append(row)
    result["rows"], result["columns"] = rows, list(rows[0])
    result["repeats"] = f"{epochs} epoch(s); one row each,"
    summary: dict[str, Any] = {"kit test accuracy": result["kit"]["test_accuracy"]}
    for name in sides:
        summary[f"{name} test accuracy"] = result[name]["test_accuracy"]
    if "pytorch" in sides:
        ratio = result["pytorch"]["kit_over_this_epoch_ratio"]
        summary["goal"] = (
            f"kit epoch <= {EPOCH_RATIO_GOAL} x PyTorch's (its defaults): {ratio:.2f} x "
            f"({'met' if ratio <= EPOCH_RATIO_GOAL else 'NOT met'})"
        )
    if "pytorch_fp32" in sides:
        summary["kit / PyTorch with float32 convolutions"] = result["pytorch_fp32"]["kit_over_this_epoch_ratio"]
    if not quick:
        summary["accuracy goal"] = (
            f"kit test accuracy >= {ACCURACY_GOAL}: {kit_acc:.4f} ({'met' if kit_acc >= ACCURACY_GOAL else 'NOT met'})"
        )
    result["summary"] = summary
    return result


def _gb(n: Any) -> str:
    return f"{n / 1e9:.1f} GB" if isinstance(n, (int, float)) else "—"


def d2l_table(report: dict[str, Any]) -> str:
    """The d2l table of one reference run (`kit/data/reference_runs/*.json`), with the sentences
    that read it, every number taken from the report."""
    d = report.get("parts", {}).get("d2l")
    if not d or "kit" not in d:
        return f"{run_label(report)}: no d2l table in this run"
    rows = [("kit (CuPy; float32 matmuls)", d["kit"], _gb(d["kit"].get("device_pool_bytes")) + " held by CuPy's pool")]
    for key, label in (("pytorch", "TF32 convolutions, its default"), ("pytorch_fp32", "float32 convolutions")):
        if key in d:
            side = d[key]
            version = side["version"].split("+")[0]
            rows.append(
                (f"PyTorch {version} ({label})", side, _gb(side.get("peak_allocated_bytes")) + " peak allocated")
            )
    head = ("", "epoch, median s", "test accuracy", "GPU memory")
    cells = [(n, f"{s['median_epoch_seconds']:.2f}", f"{s['test_accuracy']:.4f}", m) for n, s, m in rows]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(4)]
    lines = [f"{d['setup']}", f"on {run_label(report)}", ""]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in [head, *cells]]
    lines.append("-" * len(lines[-1]))
    acc = d["kit"]["test_accuracy"]
    reach = "reaches" if acc >= ACCURACY_GOAL else "falls short of"
    text = [f"kit's test accuracy after the last epoch, {acc:.4f}, {reach} d2l's {ACCURACY_GOAL}."]
    if "pytorch" in d:
        p = d["pytorch"]
        r = p["kit_over_this_epoch_ratio"]
        met = "met" if r <= EPOCH_RATIO_GOAL else "NOT met"
        text.append(
            f"PyTorch reached {p['test_accuracy']:.4f} on the same data. kit's epoch took {r:.2f} x PyTorch's with "
            f"PyTorch's defaults (epochs 2 on; spread {p['ratio_min_max'][0]:.2f}-{p['ratio_min_max'][1]:.2f} x; "
            f"goal <= {EPOCH_RATIO_GOAL} x: {met})."
        )
    if "pytorch_fp32" in d:
        r32 = d["pytorch_fp32"]["kit_over_this_epoch_ratio"]
        text.append(
            f"With float32 convolutions in PyTorch too the ratio is {r32:.2f} x: the gap between PyTorch's two rows "
            "is what TF32 on the tensor cores buys it here, and kit's CuPy matmuls run in float32."
        )
    text += _several_device_rows(report)
    return "\n".join(lines + text)


def _several_device_rows(report: dict[str, Any]) -> list[str]:
    """The rows for more than one device, from the run's `kit bench parallel`, labelled for what they are."""
    par = report.get("parts", {}).get("benchmarks", {}).get("parallel", {}).get("result")
    if not par:
        return []
    rows = {r["case"]: r for r in par["rows"]}
    two = next((r for c, r in rows.items() if c.endswith(", 2 workers")), None)
    host = next((r for c, r in rows.items() if c.endswith(", 2 simulated host devices")), None)
    gpus = report.get("machine", {}).get("gpu_count", 1)
    if gpus > 1 or two is None or host is None:
        return []
    mode = "quick mode, " if report["parts"]["benchmarks"]["parallel"].get("quick") else ""
    return [
        f"This run had {gpus} GPU, so there is no 2-GPU row: the several-device figures are `kit bench parallel`'s "
        f"({mode}an MLP, not this ResNet): 2 workers on two logical slots of the one GPU ran at "
        f"{two['speedup_vs_1']:.2f} x one worker's samples/s, and 2 simulated host devices (the CPU) at "
        f"{host['speedup_vs_1']:.2f} x."
    ]
