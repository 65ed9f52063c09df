"""The d2l table (Dive into Deep Learning, "Concise Implementation for Multiple GPUs"): ResNet-18 on Fashion-MNIST.

    python -m kit bench d2l                 # 10 epochs, batch 256, SGD lr 0.1, kit beside PyTorch
    python -m kit bench d2l --quick         # 1 epoch on 2,048 examples (a smoke run)

kit's `zoo.resnet18` is d2l's small-input ResNet-18; PyTorch's twin is built here layer for layer.
Every side trains **epoch by epoch in turn** on the same device, so drift hits all alike; each
epoch is timed with the device synchronised at both ends, the test accuracy taken outside the
clock. On a GPU there are four sides: kit in float32 and TF32 matmuls, PyTorch in TF32 (its
default) and float32 convolutions, each PyTorch row timed against the kit row of the same
arithmetic. Weights follow d2l's recipe, N(0, 0.01) (`init='default'` keeps each library's own);
the data are the same arrays, held on the device before timing starts (d2l's DataLoader reads from
the host). The table and sentences that read a stored run are in kit.bench.d2l_table.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import kit
from kit.bench.common import device_label
from kit.bench.d2l_table import ACCURACY_GOAL, EPOCH_RATIO_GOAL, d2l_result_table, d2l_table
from kit.data import ArrayIterator, DataNotFoundError, DataSet, load_fashion_mnist
from kit.measurement import measure
from kit.nn import Network, Sgd, resnet18
from kit.training.listeners import TrainingListener

if TYPE_CHECKING:
    import torch

    from kit.core.devices import AnyDevice

__all__ = ["ACCURACY_GOAL", "EPOCH_RATIO_GOAL", "bench_d2l", "d2l_result_table", "d2l_table", "torch_resnet18"]


def torch_resnet18(num_classes: int = 10, in_channels: int = 1) -> torch.nn.Module:
    """d2l's ResNet-18 for 28 x 28 inputs in PyTorch: the architecture of kit's `zoo.resnet18`."""
    import torch
    from torch import nn

    class TorchResidual(nn.Module):  # d2l's Residual (kit.nn.Residual is kit's)
        def __init__(self, cin: int, cout: int, use_1x1conv: bool = False, stride: int = 1) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, stride=stride)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.conv3 = nn.Conv2d(cin, cout, 1, stride=stride) if use_1x1conv else None
            self.bn1, self.bn2 = nn.BatchNorm2d(cout), nn.BatchNorm2d(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (self.conv3(x) if self.conv3 is not None else x))

    blocks: list[Any] = [nn.Conv2d(in_channels, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for i, c in enumerate((64, 128, 256, 512)):
        blocks += [TorchResidual(cin, c, use_1x1conv=i > 0, stride=1 if i == 0 else 2), TorchResidual(c, c)]
        cin = c
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes))


def _class_indices(labels: np.ndarray) -> np.ndarray:
    """A DataSet's labels (one-hot rows or class numbers) as int64 class numbers for PyTorch."""
    return (labels.argmax(axis=1) if labels.ndim == 2 else labels).astype(np.int64)


D2L_INIT = "normal:0.01"  # d2l's init_weights: every Conv2d and Linear weight from N(0, 0.01)


def _torch_model(tdev: torch.device, d2l_init: bool) -> torch.nn.Module:
    """PyTorch's ResNet-18 from seed 0 on `tdev`, its weights drawn by d2l's recipe where asked."""
    import torch

    torch.manual_seed(0)
    model = torch_resnet18()
    if d2l_init:
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.normal_(m.weight, std=0.01)
    return model.to(tdev)


def _torch_tensors(data: DataSet, tdev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A DataSet's features and class numbers as PyTorch tensors on `tdev`."""
    import torch

    x = torch.as_tensor(data.features.numpy()).to(tdev)
    return x, torch.as_tensor(_class_indices(data.labels.numpy())).to(tdev)


def _torch_epoch(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, batch: int, tf32: bool, peak: list[int]
) -> Any:
    """PyTorch's epoch function: SGD over a fresh shuffle, the summed loss left on the device."""
    import torch

    tdev = x.device
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=tdev).manual_seed(0)

    def epoch() -> Any:
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
        return total  # read after the clock stops: no host read inside the timed epoch

    return epoch


def _torch_accuracy(model: torch.nn.Module, tx: torch.Tensor, ty: torch.Tensor, tf32: bool) -> Any:
    """PyTorch's test accuracy function, in batches of 1,024."""
    import torch

    def accuracy() -> float:
        torch.backends.cudnn.allow_tf32 = tf32
        model.eval()
        right = 0
        with torch.no_grad():
            for start in range(0, len(tx), 1024):
                right += int((model(tx[start : start + 1024]).argmax(1) == ty[start : start + 1024]).sum())
        return right / len(tx)

    return accuracy


def _torch_side(
    train: DataSet, test: DataSet, device_kind: str, lr: float, batch: int, tf32: bool = True, d2l_init: bool = True
) -> dict[str, Any] | None:
    """PyTorch's model, data and epoch function. `tf32=True` is PyTorch's default on a GPU:
    cuDNN convolutions in TF32 on the tensor cores; False forces float32 convolutions."""
    try:
        import torch
    except ImportError:
        return None
    tdev = torch.device("cuda:0" if device_kind == "gpu" and torch.cuda.is_available() else "cpu")
    model = _torch_model(tdev, d2l_init)
    (x, y), (tx, ty) = _torch_tensors(train, tdev), _torch_tensors(test, tdev)
    peak: list[int] = []

    def sync() -> None:
        if tdev.type == "cuda":
            torch.cuda.synchronize()

    return {
        "device": str(tdev),
        "version": torch.__version__,
        "convolutions": "TF32 (PyTorch's default)" if tf32 and tdev.type == "cuda" else "float32",
        "epoch": _torch_epoch(model, x, y, lr, batch, tf32, peak),
        "accuracy": _torch_accuracy(model, tx, ty, tf32),
        "sync": sync,
        "peak": peak,
        "examples": len(x),
    }


class _EpochLoss(TrainingListener):
    """The mean training loss of an epoch, from the scores fit already reads."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def iteration_done(self, model: Network, iteration: int, epoch: int, **info: float | None) -> None:
        self.total += info["score"] * info["batch_size"]
        self.count += info["batch_size"]


def _kit_side(net: Network, train_d: DataSet, test_d: DataSet, batch: int, precision: str) -> dict[str, Any]:
    def epoch(seed: int) -> float:
        loss = _EpochLoss()
        previous = kit.backend.set_matmul_precision(precision)
        try:
            net.fit(ArrayIterator(train_d, batch, shuffle=True, seed=seed), epochs=1, listeners=[loss])
        finally:
            kit.backend.set_matmul_precision(previous)
        return loss.total / max(loss.count, 1)

    def accuracy() -> float:
        previous = kit.backend.set_matmul_precision(precision)
        try:
            return float(net.evaluate(ArrayIterator(test_d, 1024)).accuracy())
        finally:
            kit.backend.set_matmul_precision(previous)

    label = {"highest": "float32", "high": "TF32 (kit.backend.set_matmul_precision('high'))"}[precision]
    return {"epoch": epoch, "accuracy": accuracy, "matmuls": label, "precision": precision}


# which kit side each PyTorch side is timed against: the same arithmetic on both sides
_PAIRED = {"pytorch": "kit_tf32", "pytorch_fp32": "kit"}


def _check_init(init: str) -> None:
    """Refuse an init other than d2l's recipe or each library's own."""
    if init not in ("d2l", "default"):
        raise ValueError(f"bench_d2l(init={init!r}): 'd2l' (N(0, 0.01), d2l's recipe) or 'default' (each library's)")


def _sides(
    train: DataSet, test: DataSet, dev: AnyDevice, batch: int, lr: float, init: str
) -> dict[str, dict[str, Any]]:
    """The sides that train: kit in float32 (and TF32 on a GPU), PyTorch with TF32 (and float32 on a GPU)."""
    train_d, test_d = train.to(dev), test.to(dev)
    weight_init = D2L_INIT if init == "d2l" else "he"
    sides: dict[str, dict[str, Any]] = {}
    for name, precision in (("kit", "highest"), ("kit_tf32", "high")):
        if precision == "highest" or dev.kind == "gpu":  # the CPU has no TF32
            net = resnet18(device=dev, updater=Sgd(lr), weight_init=weight_init)
            sides[name] = {"net": net, **_kit_side(net, train_d, test_d, batch, precision)}
    for name, tf32 in (("pytorch", True), ("pytorch_fp32", False)):
        side = _torch_side(train, test, dev.kind, lr, batch, tf32=tf32, d2l_init=init == "d2l")
        if side is not None and (tf32 or dev.kind == "gpu"):  # on the CPU there is no TF32 to turn off
            sides[name] = side
    return sides


def _train_in_turn(sides: dict[str, dict[str, Any]], epochs: int) -> dict[str, dict[str, list[float]]]:
    """Each epoch, every side in turn, the clock around the training only: seconds, losses, accuracies."""
    seconds: dict[str, list[float]] = {n: [] for n in sides}
    losses: dict[str, list[float]] = {n: [] for n in sides}
    accuracy: dict[str, list[float]] = {n: [] for n in sides}
    for e in range(epochs):
        for name, side in sides.items():
            is_kit = name.startswith("kit")
            wait = kit.backend.sync if is_kit else side["sync"]
            wait()
            t0 = time.perf_counter()
            loss = side["epoch"](e) if is_kit else side["epoch"]()
            wait()
            seconds[name].append(time.perf_counter() - t0)
            losses[name].append(float(loss) if is_kit else float(loss) / side["examples"])
            accuracy[name].append(side["accuracy"]())
    return {"seconds": seconds, "losses": losses, "accuracy": accuracy}


def _side_entry(
    name: str,
    side: dict[str, Any],
    runs: dict[str, dict[str, list[float]]],
    sides: dict[str, Any],
    pool: Any,
    epochs: int,
) -> dict[str, Any]:
    """One side's part of the result: its epochs, and for PyTorch its ratio to the kit side it is paired with."""
    seconds, accuracy = runs["seconds"], runs["accuracy"]
    entry: dict[str, Any] = {
        "epoch_seconds": [round(v, 3) for v in seconds[name]],
        "median_epoch_seconds": statistics.median(seconds[name]),
        "train_loss": [round(v, 4) for v in runs["losses"][name]],
        "test_accuracy_per_epoch": [round(v, 4) for v in accuracy[name]],
        "test_accuracy": round(accuracy[name][-1], 4),
    }
    if name.startswith("kit"):
        entry["matmuls"] = side["matmuls"]
        if pool is not None:
            entry["device_pool_bytes"] = int(pool.total_bytes())  # both kit sides share CuPy's pool
        return entry
    entry.update(
        device=side["device"],
        version=side["version"],
        convolutions=side["convolutions"],
        peak_allocated_bytes=max(side["peak"]) if side["peak"] else None,
    )
    # the first epoch holds one-time work (kernel compilation, cuDNN autotuning, pool growth)
    steady = slice(1, None) if epochs > 2 else slice(None)
    kit_name = _PAIRED[name] if _PAIRED[name] in sides else "kit"
    ratios = [k / t for k, t in zip(seconds[kit_name][steady], seconds[name][steady])]
    entry.update(
        kit_side=kit_name,
        kit_over_this_epoch_ratio=round(statistics.median(ratios), 3),
        ratio_min_max=[round(min(ratios), 3), round(max(ratios), 3)],
    )
    return entry


def _epoch_rows(result: dict[str, Any], sides: dict[str, Any], seconds: dict[str, list[float]], epochs: int) -> list:
    """One row an epoch: every side's seconds, and each PyTorch side's ratio to its kit side."""
    rows = []
    for e in range(epochs):
        row: dict[str, Any] = {"epoch": e + 1}
        for name in sides:
            row[f"{name}_s"] = seconds[name][e]
        for name in sides:
            if not name.startswith("kit"):
                kit_name = result[name]["kit_side"]
                row[f"{kit_name}/{name}"] = seconds[kit_name][e] / seconds[name][e]
        rows.append(row)
    return rows


def _d2l_summary(result: dict[str, Any], sides: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The accuracies, the epoch-time goal against PyTorch's defaults, and (full runs) the accuracy goal."""
    summary: dict[str, Any] = {f"{n} test accuracy": result[n]["test_accuracy"] for n in sides}
    if "pytorch" in sides:
        p = result["pytorch"]
        ratio = p["kit_over_this_epoch_ratio"]
        verdict = measure.goal_verdict(ratio, "<=", EPOCH_RATIO_GOAL, tuple(p["ratio_min_max"]))
        summary["goal"] = (
            f"{p['kit_side']} epoch <= {EPOCH_RATIO_GOAL} x PyTorch's (its defaults): {ratio:.2f} x ({verdict})"
        )
    if "pytorch_fp32" in sides:
        summary["kit / PyTorch, both float32"] = result["pytorch_fp32"]["kit_over_this_epoch_ratio"]
    if not quick:
        for n in sides:
            if n.startswith("kit"):
                acc = result[n]["test_accuracy"]
                summary[f"accuracy goal ({n})"] = (
                    f"test accuracy >= {ACCURACY_GOAL}: {acc:.4f} ({'met' if acc >= ACCURACY_GOAL else 'NOT met'})"
                )
    return summary


def bench_d2l(
    quick: bool = False,
    epochs: int | None = None,
    batch: int = 256,
    lr: float = 0.1,
    limit: int | None = None,
    init: str = "d2l",
) -> dict[str, Any]:
    """kit's ResNet-18 and PyTorch's, trained in turn epoch by epoch on the current device;
    `limit` keeps the first N examples of each split (quick: 2,048). On a GPU kit trains twice,
    with float32 and with TF32 matmuls, and PyTorch twice, with TF32 (its default) and float32
    convolutions; each PyTorch row is timed against the kit row with the same arithmetic.
    `init='d2l'` draws every convolution and dense weight from N(0, 0.01) in both libraries, as
    d2l's recipe does; 'default' keeps each library's own."""
    _check_init(init)
    epochs = (1 if quick else 10) if epochs is None else epochs
    try:
        train, test = load_fashion_mnist(limit=limit if limit is not None else (2048 if quick else None))
    except DataNotFoundError as exc:
        return {"benchmark": "d2l", "skipped": str(exc)}
    dev = kit.current_device()
    sides = _sides(train, test, dev, batch, lr, init)
    pool = kit.backend.cupy().get_default_memory_pool() if dev.kind == "gpu" else None
    runs = _train_in_turn(sides, epochs)
    result: dict[str, Any] = {
        "benchmark": "d2l",
        "device": device_label(),
        "setup": f"ResNet-18 (d2l, 28x28), Fashion-MNIST {len(train)} train / {len(test)} test, batch {batch}, "
        f"SGD lr {lr}, {epochs} epoch(s), weights "
        f"{'N(0, 0.01) (d2l)' if init == 'd2l' else 'each library default'}; every side in turn each epoch, "
        "on the same device",
        "init": init,
    }
    for name, side in sides.items():
        result[name] = _side_entry(name, side, runs, sides, pool, epochs)
    rows = _epoch_rows(result, sides, runs["seconds"], epochs)
    result["rows"], result["columns"] = rows, list(rows[0])
    result["repeats"] = f"{epochs} epoch(s); one row each,"
    result["summary"] = _d2l_summary(result, sides, quick)
    return result
