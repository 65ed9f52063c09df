"""`python -m kit bench train`: training-step costs, side by side, medians of repeats.

- MLP step at batch 64 and 128: kit Network in each workspace mode vs the same math hand-written in
  NumPy, one BLAS thread each (goal ratio <= MLP_GOAL, 1.03, in every mode; fit_batch replays
  a planned iteration, kit.nn.train_plan, and a row beside them times the default mode with its
  plans off), and vs PyTorch on the CPU when it is installed;
- the three workspace modes: time, allocations per iteration, peak workspace bytes;
- MLP 784-256-10 inference at batch 1 and 256: Network.output (which answers from a plan by itself),
  an explicit planned forward (Network.plan_inference) and NumPy (goals: planned batch 1 <= 1.3 x
  NumPy; Network.output <= 1.3 x at batch 1, <= 1.05 x at batch 256);
- convolution nets against PyTorch on the CPU (the `bench` extra, `pip install "gpu-workspaces-kit[bench]"`; on
  Linux `pip install torch --index-url https://download.pytorch.org/whl/cpu` is the small CPU wheel):
  a LeNet training step (batch 64, 1 x 28 x 28) in each workspace mode, and ResNet-18's forward
  + backward (batch 16); one thread each (threadpoolctl for kit's BLAS, torch.set_num_threads),
  rounds interleaved, median [min-max], goal <= 1.5 x PyTorch; the BLAS kernel that ran is named;
- the kernel alternatives behind Conv2D and MaxPool2D (kit/bench/kernels.py);
- ETL: an epoch behind a slow source, with and without asynchronous prefetch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import kit
from kit import measure
from kit.bench.common import device_label, time_calls
from kit.bench.d2l import torch_resnet18
from kit.bench.kernels import kernel_rows
from kit.data import ArrayIterator, AsyncPrefetchIterator, DataSet
from kit.nn import Conv2D, Network, Sgd, WorkspaceMode, lenet, mlp, resnet18
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
CONV_GOAL = 1.5  # kit / PyTorch on the CPU, LeNet step and ResNet-18 forward + backward


def _spread(ts: list[float]) -> str:
    return f"{min(ts) * 1e3:.3g}-{max(ts) * 1e3:.3g}"


def _mlp_data(batch: int, n_in: int, n_out: int, seed: int = 0) -> DataSet:
    """float32 features and one-hot rows (the labels take the features' dtype): the network's dtype,
    so the hand-written NumPy step computes in float32 as kit does (float64 features made it compute
    in float64, 4x slower, and the ratio to it meaningless) and kit casts nothing."""
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((batch, n_in), dtype=np.float32), rng.integers(0, n_out, batch), num_classes=n_out)


def same_dtype(label: str, dtype: Any, *arrays: Any) -> None:
    """Refuse a baseline that does not compute in kit's `dtype`: every array (a NumPy array or a
    PyTorch tensor: inputs, weights, an answer) must hold it, or TypeError. Handed a float64 row,
    NumPy converts float32 weights on every call and computes in float64, so a ratio to it would
    compare dtypes as well as implementations; check before timing, not inside the timed call."""
    want = np.dtype(dtype).name
    got = sorted({str(a.dtype).removeprefix("torch.") for a in arrays} - {want})
    if got:
        raise TypeError(
            f"{label}: the baseline holds {', '.join(got)} beside kit's {want}: a ratio to it would not "
            "be like for like (cast its inputs and weights to kit's dtype)"
        )


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


def _torch_step(
    batch: int, sizes: tuple[int, ...], n_out: int, lr: float, dtype: Any = np.float32
) -> Callable[[], float] | None:
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
    same_dtype("PyTorch MLP", dtype, x, *model.parameters())

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

    # ---- MLP: kit vs NumPy (batch 64 and 128, every workspace mode, one BLAS thread each) ---------
    torch_step = _torch_step(batch, (n_in, *hidden), n_out, lr, dtype=mlp(n_in, hidden=hidden, n_out=n_out).dtype)
    mlp_goal: dict[str, str] = {}
    for size in (64, 128):
        size_rows, verdict = _mlp_rows(size, n_in, hidden, n_out, lr, number, repeats)
        rows += size_rows
        mlp_goal[f"goal_mlp_b{size}"] = verdict
    if torch_step is not None:
        # in blocks, not interleaved: PyTorch's OpenMP threads keep spinning for a while after
        # each call and would slow whatever ran next (and be slowed by OpenBLAS's in turn)
        data = _mlp_data(batch, n_in, n_out)
        weights = [
            p.numpy().copy() for layer in mlp(n_in, hidden=hidden, n_out=n_out).layers for p in layer.params.values()
        ]
        xs, ys = data.features.numpy(), data.labels.numpy()
        same_dtype("NumPy MLP step (beside PyTorch)", np.float32, xs, ys, *weights)
        t_torch = [time_calls(torch_step, number) for _ in range(repeats)]
        t_numpy = [time_calls(lambda: numpy_mlp_step(xs, ys, weights, lr), number) for _ in range(repeats)]
        rows.append(
            {
                "case": f"PyTorch MLP b{batch} (CPU; timed in its own block)",
                "ms_per_step": statistics.median(t_torch) * 1e3,
                "min_max_ms": _spread(t_torch),
                "ratio": statistics.median(t_torch) / statistics.median(t_numpy),
                "ratio_to": "NumPy",
            }
        )

    # ---- MLP inference: Network.output, a planned forward, hand-written NumPy --------------------
    inference_rows, inference_goal = _inference_rows(quick)
    rows += inference_rows

    # ---- conv nets against PyTorch, and the kernels behind them ---------------------------
    conv_rows, conv_summary = _conv_rows(quick)
    rows += conv_rows + kernel_rows(quick)

    # ---- ETL: a slow source, with and without prefetch --------------------------------------
    etl = _etl_rows(quick)
    on_gpu = kit.current_device().kind == "gpu"
    return {
        "benchmark": "train",
        "device": device_label(),
        "repeats": repeats,
        "columns": list(COLUMNS),
        "rows": [{c: r.get(c, "") for c in COLUMNS} for r in rows],
        "summary": {
            **(
                {
                    "read_first": "kit ran on the GPU, while NumPy and PyTorch here run on the CPU (one thread): "
                    "these ratios compare devices, not libraries (`kit bench d2l` compares kit and PyTorch "
                    "on one GPU)"
                }
                if on_gpu
                else {}
            ),
            **etl,
            "pytorch": "installed" if torch_step is not None else f"not installed ({install_hint('bench')} to compare)",
            "mlp_threads": "kit and NumPy: 1 BLAS thread each (threadpoolctl)",
            **mlp_goal,
            **inference_goal,
            **conv_summary,
        },
    }


MLP_GOAL = 1.03  # kit MLP step / hand-written NumPy, every workspace mode
PLAN_GOAL = 1.3  # planned MLP inference at batch 1 / hand-written NumPy
OUTPUT_GOALS = {1: 1.3, 256: 1.05}  # Network.output / hand-written NumPy, by batch size


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
        timings = measure.compare(fns, repeats=repeats, number=number, sync=kit.backend.sync)
    base, in_place = timings[names["numpy"]].seconds, timings[names["in_place"]].seconds
    rows, worst, worst_in_place, reliable, worst_paired = [], 0.0, 0.0, True, []
    notes = {
        names["unplanned"]: "plans off (net.train_plans.enabled = False): no goal",
        names["in_place"]: "dw *= lr; w -= dw, as kit's Sgd updates: no goal",
    }
    for name, t in timings.items():
        paired = [x / b for x, b in zip(t.seconds, base)]
        ratio = statistics.median(paired)
        row = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": _spread(t.seconds), "ratio": ratio}
        row["ratio_to"] = "NumPy"
        reliable = reliable and t.reliable
        if name in notes:
            row["note"] = notes[name]
        elif name != names["numpy"]:
            if ratio >= worst:
                worst, worst_paired = ratio, paired
            worst_in_place = max(worst_in_place, statistics.median(x / b for x, b in zip(t.seconds, in_place)))
            row["goal"] = f"<= {MLP_GOAL}: " + _verdict(ratio, MLP_GOAL, paired)
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
) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """The timed steps: kit in each mode, kit with its plans off, NumPy plain and NumPy updating in
    place (each with its own weights); and the names of the last three."""
    batch, net = data.num_examples, nets[WorkspaceMode.SEPARATE]
    weights = [p.numpy().copy() for layer in net.layers for p in layer.params.values()]
    xs, ys = data.features.numpy(), data.labels.numpy()
    same_dtype(f"NumPy MLP b{batch} (hand-written)", net.dtype, xs, ys, *weights)
    fns: dict[str, Callable[[], Any]] = {
        f"kit MLP b{batch} ({m.value})": (lambda n=n: n.fit_batch(data)) for m, n in nets.items()
    }
    # beside them, the default mode with its plans off: the step before kit.nn.train_plan (no goal)
    unplanned = Network.from_config(net.configuration)  # the SEPARATE net's twin
    unplanned.train_plans.enabled = False
    names = {
        "unplanned": f"kit MLP b{batch} ({unplanned.training_workspace_mode.value}, unplanned)",
        "numpy": f"NumPy MLP b{batch} (hand-written)",
        # NumPy writing the update over the gradient as kit's Sgd does (no goal): what of kit's
        # ratio is its update's one temporary fewer, and what is the rest of the step
        "in_place": f"NumPy MLP b{batch} (hand-written, update in place)",
    }
    fns[names["unplanned"]] = lambda: unplanned.fit_batch(data)
    fns[names["numpy"]] = lambda: numpy_mlp_step(xs, ys, weights, lr)
    in_place_weights = [w.copy() for w in weights]
    fns[names["in_place"]] = lambda: numpy_mlp_step(xs, ys, in_place_weights, lr, update_in_place=True)
    return fns, names


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


def numpy_mlp_forward(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    """Softmax probabilities of the ReLU MLP, written plainly in NumPy (the inference reference)."""
    h = x
    n = len(weights) // 2
    for i in range(n):
        h = h @ weights[2 * i] + weights[2 * i + 1]
        if i < n - 1:
            h = np.maximum(h, 0)
    z = h - h.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _inference_rows(quick: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """MLP 784-256-10 inference at batch 1 and 256: Network.output, a planned forward
    (Network.plan_inference) and NumPy, interleaved, one BLAS thread each."""
    net = mlp(784, hidden=(256,), n_out=10)
    weights = [p.numpy().copy() for layer in net.layers for p in layer.params.values()]
    rows, summary = [], {}
    for batch in (1, 256):
        x = np.random.default_rng(batch).random((batch, 784)).astype(net.dtype)
        plan = net.plan_inference(batch)
        same_dtype(f"NumPy MLP inference b{batch}", net.dtype, x, *weights, numpy_mlp_forward(x, weights))
        fns = {
            f"MLP 784-256-10 inference b{batch}: NumPy (hand-written)": lambda x=x: numpy_mlp_forward(x, weights),
            f"MLP 784-256-10 inference b{batch}: Network.output": lambda x=x: net.output(x),
            f"MLP 784-256-10 inference b{batch}: planned": lambda x=x, plan=plan: plan.output(x),
        }
        with threadpool_limits(limits=1, user_api="blas"):
            timings = measure.compare(fns, repeats=3 if quick else 9, min_time=0.01 if quick else 0.2)
        base = next(iter(timings.values())).seconds
        for name, t in timings.items():
            paired = [v / b for v, b in zip(t.seconds, base)]
            ratio = statistics.median(paired)
            row = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": _spread(t.seconds), "ratio": ratio}
            row["ratio_to"] = "NumPy"
            if batch == 1 and name.endswith("planned"):
                row["goal"] = f"<= {PLAN_GOAL}: " + _verdict(ratio, PLAN_GOAL, paired)
                summary["goal_inference_b1"] = measure.goal(
                    "planned MLP inference b1 / NumPy", ratio, "<=", PLAN_GOAL, "x", t.reliable, repeats=paired
                )
            if name.endswith("Network.output"):
                goal = OUTPUT_GOALS[batch]
                row["goal"] = f"<= {goal}: " + _verdict(ratio, goal, paired)
                summary[f"goal_output_b{batch}"] = measure.goal(
                    f"Network.output MLP inference b{batch} / NumPy", ratio, "<=", goal, "x", t.reliable, repeats=paired
                )
            rows.append(row)
    return rows, summary


def _images(batch: int, seed: int) -> DataSet:
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((batch, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, batch), num_classes=10)


def _torch_conv_steps(
    lenet_batch: int, resnet_batch: int, dtype: Any = np.float32
) -> dict[str, Callable[[], Any]] | None:
    """PyTorch's LeNet training step (SGD) and ResNet-18 forward + backward, the same
    architectures as kit's zoo (d2l's ResNet-18 for 28 x 28 inputs); None without PyTorch."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.manual_seed(0)
    le = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    )  # fmt: skip
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


def _conv_rows(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """LeNet steps in each mode and ResNet-18 forward + backward, kit vs PyTorch, one thread each."""
    lenet_batch, resnet_batch = 64, 16
    torch_steps = _torch_conv_steps(lenet_batch, resnet_batch, dtype=lenet().dtype)
    if torch_steps is not None:
        import torch

        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
    lenet_data, resnet_data = _images(lenet_batch, 1), _images(resnet_batch, 2)
    lenets = {mode: lenet(training_workspace_mode=mode, updater=Sgd(0.01)) for mode in WorkspaceMode}
    resnet = resnet18(updater=Sgd(0.01))  # SEPARATE, the default training mode
    resnet_name = f"kit ResNet-18 fwd+bwd b{resnet_batch} (SEPARATE)"
    rows: list[dict[str, Any]] = []
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            blas = [
                f"{p['internal_api']} {p['num_threads']} ({p.get('architecture') or 'unknown'} kernels)"
                for p in threadpool_info()
                if p["user_api"] == "blas"
            ]
            fns: dict[str, Callable[[], Any]] = {
                f"kit LeNet step b{lenet_batch} ({m.value})": (lambda n=n: n.fit_batch(lenet_data))
                for m, n in lenets.items()
            }
            res_fns = {resnet_name: lambda: resnet.compute_gradient_and_score(resnet_data)}
            if torch_steps is not None:
                fns[f"PyTorch LeNet step b{lenet_batch}"] = torch_steps["lenet"]
                res_fns[f"PyTorch ResNet-18 fwd+bwd b{resnet_batch}"] = torch_steps["resnet"]
            sync = kit.backend.sync
            lenet_t = measure.compare(fns, repeats=3 if quick else 11, number=3 if quick else 10, sync=sync)
            resnet_t = measure.compare(res_fns, repeats=2 if quick else 9, number=1, sync=sync)
    finally:
        if torch_steps is not None:
            torch.set_num_threads(torch_threads)
    rows += _versus(lenet_t) + _versus(resnet_t)
    for mode, net in lenets.items():
        before = kit.memory.heap_allocations(this_thread=True)
        net.fit_batch(lenet_data)
        row = next(r for r in rows if r["case"] == f"kit LeNet step b{lenet_batch} ({mode.value})")
        row["heap_allocs_per_step"] = kit.memory.heap_allocations(this_thread=True) - before
        row["peak_workspace_kib"] = sum(s["peak_used"] for s in net.workspace_stats()["training"].values()) / 1024
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


def _verdict(ratio: float, limit: float, paired: list[float]) -> str:
    """A row's goal column: the goal line's verdict for the median of its paired ratios."""
    lo, hi, _ = measure.median_interval(paired)
    return measure.goal_verdict(ratio, "<=", limit, (lo, hi))


def _versus(timings: dict[str, measure.Timing]) -> list[dict[str, Any]]:
    """Rows for kit variants against the PyTorch one (when present), per-round ratios."""
    rows = []
    for name, t in timings.items():
        row: dict[str, Any] = {"case": name, "ms_per_step": t.median * 1e3, "min_max_ms": _spread(t.seconds)}
        ratios = _torch_ratios(timings, name)
        if ratios is not None:
            ratio = statistics.median(ratios)
            row.update(ratio=ratio, ratio_to="PyTorch", goal=f"<= {CONV_GOAL}: " + _verdict(ratio, CONV_GOAL, ratios))
        rows.append(row)
    return rows


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
