"""`python -m kit bench train`: training-step costs, side by side, medians of repeats.

- MLP step: kit Network vs the same math hand-written in NumPy (goal ratio <= 1.10), and vs
  PyTorch on the CPU when it is installed;
- a conv net step (LeNet on 28 x 28);
- the three workspace modes: time, allocations per iteration, peak workspace bytes;
- ETL: an epoch behind a slow source, with and without asynchronous prefetch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kit
from kit.bench import _device_label, _side_by_side, _time
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.nn import Network, Sgd, WorkspaceMode, lenet, mlp

__all__ = ["bench_train"]


def _mlp_data(batch: int, n_in: int, n_out: int, seed: int = 0) -> DataSet:
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((batch, n_in)), rng.integers(0, n_out, batch), num_classes=n_out)


def numpy_mlp_step(x: np.ndarray, y: np.ndarray, weights: list[np.ndarray], lr: float) -> float:
    """The same math as kit's mlp(ReLU) + softmax cross-entropy + SGD, written plainly in NumPy."""
    acts = [x]
    h = x
    n = len(weights) // 2
    for i in range(n):
        w, b = weights[2 * i], weights[2 * i + 1]
        h = h @ w + b
        if i < n - 1:
            h = np.maximum(h, 0)
        acts.append(h)
    z = acts[-1]
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    loss = -(np.log(p) * y).sum() / x.shape[0]
    d = (p - y) / x.shape[0]
    for i in reversed(range(n)):
        w = weights[2 * i]
        dw, db = acts[i].T @ d, d.sum(axis=0)
        if i > 0:
            d = (d @ w.T) * (acts[i] > 0)
        weights[2 * i] -= lr * dw
        weights[2 * i + 1] -= lr * db
    return float(loss)


def _torch_step(batch: int, sizes: tuple[int, ...], n_out: int, lr: float) -> Callable[[], float] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    layers: list[Any] = []
    prev = sizes[0]
    for width in sizes[1:]:
        layers += [torch.nn.Linear(prev, width), torch.nn.ReLU()]
        prev = width
    model = torch.nn.Sequential(*layers, torch.nn.Linear(prev, n_out))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.rand(batch, sizes[0])
    y = torch.randint(0, n_out, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def bench_train(quick: bool = False) -> dict[str, Any]:
    repeats, number = (3, 5) if quick else (11, 20)
    batch, hidden, n_in, n_out, lr = 128, (512, 256), 784, 10, 0.01
    rows: list[dict[str, Any]] = []

    # ---- MLP: kit vs NumPy vs PyTorch ------------------------------------------------
    data = _mlp_data(batch, n_in, n_out)
    nets = {
        mode: mlp(n_in, hidden=hidden, n_out=n_out, updater=Sgd(lr), training_workspace_mode=mode)
        for mode in WorkspaceMode
    }
    weights = [
        p.numpy().astype(np.float32).copy()
        for layer in nets[WorkspaceMode.SEPARATE].layers
        for p in layer.params.values()
    ]
    xs, ys = data.features.numpy(), data.labels.numpy()
    fns: dict[str, Callable[[], Any]] = {
        f"kit MLP ({m.value})": (lambda n=n: n.fit_batch(data)) for m, n in nets.items()
    }
    fns["NumPy MLP (hand-written)"] = lambda: numpy_mlp_step(xs, ys, weights, lr)
    times = _side_by_side(fns, number, repeats)
    base = times["NumPy MLP (hand-written)"]
    for name, ts in times.items():
        row = {"case": name, "ms_per_step": statistics.median(ts) * 1e3}
        row["ratio_to_numpy"] = statistics.median(t / b for t, b in zip(ts, base))
        rows.append(row)
    torch_step = _torch_step(batch, (n_in, *hidden), n_out, lr)
    if torch_step is not None:
        # in blocks, not interleaved: PyTorch's OpenMP threads keep spinning for a while after
        # each call and would slow whatever ran next (and be slowed by OpenBLAS's in turn)
        t_torch = [_time(torch_step, number) for _ in range(repeats)]
        t_numpy = [_time(fns["NumPy MLP (hand-written)"], number) for _ in range(repeats)]
        rows.append(
            {
                "case": "PyTorch MLP (CPU; timed in its own block)",
                "ms_per_step": statistics.median(t_torch) * 1e3,
                "ratio_to_numpy": statistics.median(t_torch) / statistics.median(t_numpy),
            }
        )
    for mode, net in nets.items():
        before = kit.memory.heap_allocations(this_thread=True)
        net.fit_batch(data)
        peak = sum(s["peak_used"] for s in net.workspace_stats()["training"].values())
        for row in rows:
            if row["case"] == f"kit MLP ({mode.value})":
                row["heap_allocs_per_step"] = kit.memory.heap_allocations(this_thread=True) - before
                row["peak_workspace_kib"] = peak / 1024

    # ---- a conv net step -----------------------------------------------------------------
    rng = np.random.default_rng(1)
    conv_data = DataSet(rng.random((32, 1, 28, 28)), rng.integers(0, 10, 32), num_classes=10)
    conv_nets = {mode: lenet(training_workspace_mode=mode, updater=Sgd(0.01)) for mode in WorkspaceMode}
    conv_times = _side_by_side(
        {m.value: (lambda n=n: n.fit_batch(conv_data)) for m, n in conv_nets.items()}, max(2, number // 4), repeats
    )
    for mode, net in conv_nets.items():
        before = kit.memory.heap_allocations(this_thread=True)
        net.fit_batch(conv_data)
        rows.append(
            {
                "case": f"kit LeNet 32x1x28x28 ({mode.value})",
                "ms_per_step": statistics.median(conv_times[mode.value]) * 1e3,
                "heap_allocs_per_step": kit.memory.heap_allocations(this_thread=True) - before,
                "peak_workspace_kib": sum(s["peak_used"] for s in net.workspace_stats()["training"].values()) / 1024,
            }
        )

    # ---- ETL: a slow source, with and without prefetch --------------------------------------
    etl = _etl_rows(quick)
    return {
        "benchmark": "train",
        "device": _device_label(),
        "repeats": repeats,
        "columns": ["case", "ms_per_step", "ratio_to_numpy", "heap_allocs_per_step", "peak_workspace_kib"],
        "rows": [
            {
                c: r.get(c, "")
                for c in ("case", "ms_per_step", "ratio_to_numpy", "heap_allocs_per_step", "peak_workspace_kib")
            }
            for r in rows
        ],
        "summary": {
            **etl,
            "pytorch": "installed" if torch_step is not None else "not installed (pip install torch to compare)",
            "goal": "kit MLP / NumPy MLP <= 1.10",
        },
    }


class SlowSource:
    """An iterator that spends `delay` seconds producing each batch (disk, decoding, augmentation)."""

    async_supported = True

    def __init__(self, base: ArrayIterator, delay: float) -> None:
        self.base, self.delay, self.batch_size = base, delay, base.batch_size

    def __iter__(self):
        for ds in self.base:
            time.sleep(self.delay)
            yield ds


def _etl_rows(quick: bool) -> dict[str, float]:
    rng = np.random.default_rng(2)
    data = DataSet(rng.random((64 * 12, 784)), rng.integers(0, 10, 64 * 12), num_classes=10)
    out: dict[str, list[float]] = {"without prefetch": [], "with prefetch 4": []}
    # a network that needs a few ms per batch behind a source that needs 4 ms: overlap matters
    net: Network = mlp(784, hidden=(1024, 1024), n_out=10, updater=Sgd(0.01))
    src = SlowSource(ArrayIterator(data, 64), delay=0.004)
    with AsyncPrefetchIterator(src, prefetch=4) as pre:
        net.fit(src, epochs=1)
        net.fit(pre, epochs=1)
        for _ in range(2 if quick else 5):
            t0 = time.perf_counter()
            net.fit(src, epochs=1)
            out["without prefetch"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            net.fit(pre, epochs=1)
            out["with prefetch 4"].append(time.perf_counter() - t0)
    no, yes = statistics.median(out["without prefetch"]), statistics.median(out["with prefetch 4"])
    return {
        "etl_epoch_ms_without_prefetch": no * 1e3,
        "etl_epoch_ms_with_prefetch": yes * 1e3,
        "etl_source_sleep_ms_per_epoch": 12 * 4.0,
        "etl_speedup": no / yes,
    }
