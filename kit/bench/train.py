"""`python -m kit bench train`: training-step costs, side by side, medians of repeats.

- MLP step at batch 64 and 128: kit Network in each workspace mode (and the default with replay
  off) vs the same math hand-written in NumPy, one BLAS thread each (goal ratio <= MLP_GOAL), and
  vs PyTorch on the CPU when it is installed;
- the three workspace modes: time, allocations per iteration, peak workspace bytes;
- MLP inference at batch 1 and 256 beside NumPy (kit/bench/train_inference.py, its goals there);
- convolution nets against PyTorch on the CPU (the `bench` extra; kit/bench/train_conv.py);
- the kernel alternatives behind Conv2D and MaxPool2D (kit/bench/kernels.py);
- ETL: an epoch behind a slow source, with and without asynchronous prefetch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import kit
from kit.bench.common import STEP_WARMUP, device_label, min_max_ms, row_verdict, same_dtype, time_calls
from kit.bench.kernels import kernel_rows
from kit.bench.memory import torch_network
from kit.bench.train_conv import conv_rows
from kit.bench.train_inference import inference_rows
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.measurement import measure
from kit.nn import Network, Sgd, WorkspaceMode, mlp
from kit.nn.replay import replay_off
from kit.settings import install_hint

__all__ = ["bench_train", "same_dtype"]

COLUMNS = (
    "case",
    "ms_per_step",
    "min_max_ms",
    "ratio",
    "ratio_to",
    "heap_allocs_per_step",
    "peak_workspace_kib",
    "goal",
)


def _mlp_data(batch: int, n_in: int, n_out: int, seed: int = 0) -> DataSet:
    """float32 features and one-hot rows (the labels take the features' dtype): the network's dtype,
    so the hand-written NumPy step computes in float32 as kit does (float64 features made it compute
    in float64, 4x slower, and the ratio to it meaningless) and kit casts nothing."""
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((batch, n_in), dtype=np.float32), rng.integers(0, n_out, batch), num_classes=n_out)


def numpy_mlp_step(
    x: np.ndarray, y: np.ndarray, weights: list[np.ndarray], lr: float, update_in_place: bool = False
) -> float:
    """The same math as kit's mlp(ReLU) + softmax cross-entropy + SGD, written plainly in NumPy
    (`w -= lr * dw`, a temporary per array). `update_in_place`: `dw *= lr; w -= dw` instead, the
    update as kit's Sgd writes it (over the gradient): the same numbers, no temporary."""
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
        if update_in_place:
            dw *= lr
            db *= lr
            weights[2 * i] -= dw
            weights[2 * i + 1] -= db
        else:
            weights[2 * i] -= lr * dw
            weights[2 * i + 1] -= lr * db
    return float(loss)


def _torch_step(batch: int, lr: float, dtype: Any = np.float32) -> Callable[[], float] | None:
    """PyTorch's MLP 784-512-256-10 (kit.bench.memory.torch_network): one SGD step on a random batch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    model = torch_network("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.rand(batch, 784)
    y = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    same_dtype("PyTorch MLP", dtype, x, *model.parameters())

    def step() -> float:
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def bench_train(quick: bool = False) -> dict[str, Any]:
    # 21 interleaved repeats: the MLP goal is a few per cent, and its median's interval narrows with n
    repeats, number = (3, 5) if quick else (21, 20)
    batch, hidden, n_in, n_out, lr = 128, (512, 256), 784, 10, 0.01
    rows: list[dict[str, Any]] = []
    # ---- MLP: kit vs NumPy (batch 64 and 128, every workspace mode, one BLAS thread each) ---------
    torch_step = _torch_step(batch, lr, dtype=mlp(n_in, hidden=hidden, n_out=n_out).dtype)
    mlp_goal: dict[str, str] = {}
    for size in (64, 128):
        size_rows, verdict = _mlp_rows(size, n_in, hidden, n_out, lr, number, repeats)
        rows += size_rows
        mlp_goal[f"goal_mlp_b{size}"] = verdict
    if torch_step is not None:
        rows.append(_torch_mlp_row(torch_step, batch, (n_in, *hidden, n_out), lr, number, repeats))
    # ---- MLP inference: Network.output, a planned forward, hand-written NumPy --------------------
    infer_rows, inference_goal = inference_rows(quick)
    rows += infer_rows
    # ---- conv nets against PyTorch, and the kernels behind them ---------------------------
    net_rows, conv_summary = conv_rows(quick)
    rows += net_rows + kernel_rows(quick)
    # ---- ETL: a slow source, with and without prefetch --------------------------------------
    etl = _etl_rows(quick)
    return {
        "benchmark": "train",
        "device": device_label(),
        "repeats": repeats,
        "columns": list(COLUMNS),
        "rows": [{c: r.get(c, "") for c in COLUMNS} for r in rows],
        "summary": {
            **_read_first(),
            **etl,
            "pytorch": "installed" if torch_step is not None else f"not installed ({install_hint('bench')} to compare)",
            "mlp_threads": "kit and NumPy: 1 BLAS thread each (threadpoolctl)",
            **mlp_goal,
            **inference_goal,
            **conv_summary,
        },
    }


def _read_first() -> dict[str, str]:
    """On a GPU, the line a reader needs before any ratio: kit's side ran on another device."""
    if kit.current_device().kind != "gpu":
        return {}
    return {
        "read_first": "kit ran on the GPU, while NumPy and PyTorch here run on the CPU (one thread): "
        "these ratios compare devices, not libraries (`kit bench d2l` compares kit and PyTorch on one GPU)"
    }


def _torch_mlp_row(
    torch_step: Callable[[], object], batch: int, sizes: tuple[int, ...], lr: float, number: int, repeats: int
) -> dict[str, Any]:
    """PyTorch's MLP step beside the hand-written NumPy one, each timed in its own block, not
    interleaved: PyTorch's OpenMP threads keep spinning for a while after each call and would slow
    whatever ran next (and be slowed by OpenBLAS's in turn)."""
    n_in, *hidden, n_out = sizes
    data = _mlp_data(batch, n_in, n_out)
    net = mlp(n_in, hidden=tuple(hidden), n_out=n_out)
    weights = [p.numpy().copy() for layer in net.layers for p in layer.params.values()]
    xs, ys = data.features.numpy(), data.labels.numpy()
    same_dtype("NumPy MLP step (beside PyTorch)", np.float32, xs, ys, *weights)
    t_torch = [time_calls(torch_step, number) for _ in range(repeats)]
    t_numpy = [time_calls(lambda: numpy_mlp_step(xs, ys, weights, lr), number) for _ in range(repeats)]
    return {
        "case": f"PyTorch MLP b{batch} (CPU; timed in its own block)",
        "ms_per_step": statistics.median(t_torch) * 1e3,
        "min_max_ms": min_max_ms(t_torch),
        "ratio": statistics.median(t_torch) / statistics.median(t_numpy),
        "ratio_to": "NumPy",
    }


MLP_GOAL = 1.03  # kit MLP step / hand-written NumPy, every workspace mode


def _mlp_rows(
    batch: int, n_in: int, hidden: tuple[int, ...], n_out: int, lr: float, number: int, repeats: int
) -> tuple[list[dict[str, Any]], str]:
    """One training step, kit in each workspace mode against the same math in NumPy, interleaved."""
    data = _mlp_data(batch, n_in, n_out)
    nets = {
        mode: mlp(n_in, hidden=hidden, n_out=n_out, updater=Sgd(lr), training_workspace_mode=mode)
        for mode in WorkspaceMode
    }
    fns, names = _mlp_variants(data, nets, lr)
    with threadpool_limits(limits=1, user_api="blas"):
        timings = measure.compare(fns, repeats=repeats, number=number, sync=kit.backend.sync, warmup=STEP_WARMUP)
    base, in_place = timings[names["numpy"]].seconds, timings[names["in_place"]].seconds
    rows, worst, worst_in_place, reliable, worst_paired = [], 0.0, 0.0, True, []
    notes = {
        names["unplanned"]: "replay off (kit.nn.replay.replay_off()): no goal",
        names["in_place"]: "dw *= lr; w -= dw, as kit's Sgd updates: no goal",
    }
    for name, t in timings.items():
        paired = [x / b for x, b in zip(t.seconds, base)]
        ratio = statistics.median(paired)
        row = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": min_max_ms(t.seconds), "ratio": ratio}
        row["ratio_to"] = "NumPy"
        reliable = reliable and t.reliable
        if name in notes:
            row["note"] = notes[name]
        elif name != names["numpy"]:
            if ratio >= worst:
                worst, worst_paired = ratio, paired
            worst_in_place = max(worst_in_place, statistics.median(x / b for x, b in zip(t.seconds, in_place)))
            row["goal"] = f"<= {MLP_GOAL}: " + row_verdict(ratio, MLP_GOAL, paired)
        rows.append(row)
    _mlp_counts(rows, data, nets, batch)
    # the figure: the median of the paired ratios, with the interval that holds it (no
    # verdict where the interval lies on both sides of the goal)
    verdict = measure.goal(
        f"kit MLP step b{batch} / NumPy, worst mode", worst, "<=", MLP_GOAL, "x", reliable, repeats=worst_paired
    )
    verdict += f"; against NumPy updating in place, as kit does: {worst_in_place:.3f} x (no goal)"
    return rows, verdict


def _mlp_variants(
    data: DataSet, nets: dict[WorkspaceMode, Network], lr: float
) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The timed steps: kit in each mode, kit with its plans off, NumPy plain and NumPy updating in
    place (each with its own weights); and the names of the last three."""
    batch, net = data.num_examples, nets[WorkspaceMode.SEPARATE]
    weights = [p.numpy().copy() for layer in net.layers for p in layer.params.values()]
    xs, ys = data.features.numpy(), data.labels.numpy()
    same_dtype(f"NumPy MLP b{batch} (hand-written)", net.dtype, xs, ys, *weights)
    fns: dict[str, Callable[[], object]] = {
        f"kit MLP b{batch} ({m.value})": (lambda n=n: n.fit_batch(data)) for m, n in nets.items()
    }
    # beside them, the default mode with replay off: the layers' code at every step (no goal)
    unplanned = Network.from_config(net.configuration)  # the SEPARATE net's twin
    names = {
        "unplanned": f"kit MLP b{batch} ({unplanned.training_workspace_mode.value}, replay off)",
        "numpy": f"NumPy MLP b{batch} (hand-written)",
        # NumPy writing the update over the gradient as kit's Sgd does (no goal): what of kit's
        # ratio is its update's one temporary fewer, and what is the rest of the step
        "in_place": f"NumPy MLP b{batch} (hand-written, update in place)",
    }
    fns[names["unplanned"]] = lambda: _replay_off_step(unplanned, data)
    fns[names["numpy"]] = lambda: numpy_mlp_step(xs, ys, weights, lr)
    in_place_weights = [w.copy() for w in weights]
    fns[names["in_place"]] = lambda: numpy_mlp_step(xs, ys, in_place_weights, lr, update_in_place=True)
    return fns, names


def _replay_off_step(net: Network, data: DataSet) -> float:
    with replay_off():
        return net.fit_batch(data)


def _mlp_counts(rows: list[dict[str, Any]], data: DataSet, nets: dict[WorkspaceMode, Network], batch: int) -> None:
    """Each mode's row gets the heap allocations of one more step and its workspaces' peak."""
    for mode, net in nets.items():
        before = kit.memory.heap_allocations(this_thread=True)
        net.fit_batch(data)
        peak = sum(s["peak_used"] for s in net.workspace_stats()["training"].values())
        for row in rows:
            if row["case"] == f"kit MLP b{batch} ({mode.value})":
                row["heap_allocs_per_step"] = kit.memory.heap_allocations(this_thread=True) - before
                row["peak_workspace_kib"] = peak / 1024


class SlowSource:
    """An iterator that spends `delay` seconds producing each batch (disk, decoding, augmentation)."""

    async_supported = True

    def __init__(self, base: ArrayIterator, delay: float) -> None:
        self.base, self.delay, self.batch_size = base, delay, base.batch_size

    def __iter__(self):
        for ds in self.base:
            time.sleep(self.delay)
            yield ds


# the ETL rows' network: a step of a few ms behind a source that needs 4 ms a batch, so overlap matters;
# the quick run's is narrower (its step is still comparable to the source's 4 ms), and the summary names it
ETL_HIDDEN = {False: (1024, 1024), True: (256, 256)}


def _etl_rows(quick: bool) -> dict[str, Any]:
    rng = np.random.default_rng(2)
    data = DataSet(rng.random((64 * 12, 784)), rng.integers(0, 10, 64 * 12), num_classes=10)
    out: dict[str, list[float]] = {"without prefetch": [], "with prefetch 4": []}
    hidden = ETL_HIDDEN[quick]
    net: Network = mlp(784, hidden=hidden, n_out=10, updater=Sgd(0.01))
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
        "etl_network": f"MLP 784-{'-'.join(map(str, hidden))}-10, 12 batches of 64 an epoch",
        "etl_epoch_ms_without_prefetch": no * 1e3,
        "etl_epoch_ms_with_prefetch": yes * 1e3,
        "etl_source_sleep_ms_per_epoch": 12 * 4.0,
        "etl_speedup": no / yes,
    }
