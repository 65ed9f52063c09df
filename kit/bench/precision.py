"""`python -m kit bench precision`: float32, plain float16 and mixed precision, side by side.

    python -m kit bench precision            # MLP 784-256-256-10; digits, Fashion-MNIST, the stall case
    python -m kit bench precision --quick    # digits-sized MLP, seconds

The three precisions (`VARIANTS`) train the same MLP from the same seed:

- bytes per training cycle in each workspace (exact counts), and the bytes a network keeps between
  steps (parameters, gradients, master weights, updater state);
- step time per iteration, interleaved by kit.measure.compare, with the matmul kernel each
  precision ran beside it (on a CPU NumPy has no BLAS path for float16: its own loop);
- test accuracy after the same epochs on digits, and on Fashion-MNIST when its files are found;
- the stall case: a converged digits network fine-tuned with a small learning rate, full batch,
  where plain float16's updates round away and mixed precision keeps learning; each loss drop is
  given as a fraction of float32's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike
from threadpoolctl import threadpool_info

import kit
from kit.bench.common import STEP_WARMUP, device_label
from kit.data import ArrayIterator, DataSet, load_digits, load_fashion_mnist
from kit.data.datasets import find_fashion_mnist
from kit.measurement import measure
from kit.nn import Adam, Network, Sgd, mlp

__all__ = [
    "ALIGN",
    "COLUMNS",
    "VARIANTS",
    "bench_precision",
    "correct",
    "cycle_bytes",
    "fashion_784",
    "in_dtype",
    "kept_bytes",
    "matmul_kernel",
    "stall_case",
]

# the three ways to train, as Network arguments
VARIANTS: dict[str, dict[str, Any]] = {
    "float32": {"dtype": "float32"},
    "float16": {"dtype": "float16"},
    "mixed": {"dtype": "float16", "master_dtype": "float32", "loss_scale": "dynamic"},
}
COLUMNS = (
    "precision",
    "activations_B",
    "layer_working_B",
    "updater_working_B",
    "cycle_B",
    "kept_B",
    "ms_per_step",
    "spread",
    "reliable",
    "digits_acc",
    "fashion_acc",
    "matmul",
)
ALIGN = 64  # bytes: a workspace carves every allocation at this alignment


def matmul_kernel(dtype: DTypeLike) -> str:
    """Which kernel a matmul of this dtype runs on the current device, in words."""
    dt = np.dtype(dtype)
    if kit.current_device().kind == "gpu":
        return f"cuBLAS {dt.name} GEMM (through CuPy)"
    if dt.name not in ("float32", "float64"):
        return f"NumPy's own {dt.name} loop (no BLAS: NumPy calls BLAS for float32 and float64 only)"
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not pools:
        return "NumPy's own loop (threadpoolctl found no BLAS)"
    p = pools[0]
    gemm = "sgemm" if dt.name == "float32" else "dgemm"
    return (
        f"{p.get('internal_api')} {p.get('version')} {gemm} "
        f"({p.get('architecture', 'unknown')} kernels, {p.get('num_threads')} threads)"
    )


def in_dtype(data: DataSet, dtype: DTypeLike) -> DataSet:
    """The same examples with features and one-hot labels stored in `dtype`: a network given data
    in its own dtype casts nothing inside the training cycle (float32 data for a float16 network
    is cast there, into the activations workspace)."""
    return DataSet(data.features.numpy().astype(dtype), data.labels.numpy().astype(dtype))


def cycle_bytes(net: Network, batches: list[DataSet]) -> dict[str, int]:
    """Bytes of the last training cycle in each of the network's training workspaces, by
    workspace name (WS_ALL_LAYERS_ACT, ...), after fitting `batches` (the first cycles learn
    the workspaces' sizes)."""
    for ds in batches:
        net.fit_batch(ds)
    stats = net.workspace_stats()["training"]
    return {name.split("/")[-1]: int(s["last_cycle_bytes"]) for name, s in stats.items()}


def kept_bytes(net: Network) -> dict[str, int]:
    """What a network keeps between steps: parameters, gradients, master weights (mixed only),
    updater state."""
    return {
        "params": int(net.flat_params.data.nbytes),
        "grads": int(net.flat_grads.data.nbytes),
        "master": int(net.flat_master.data.nbytes) if net.mixed else 0,
        "updater_state": int(sum(s.data.nbytes for s in net.updater_state.values())),
    }


def correct(net: Network, data: DataSet, batch: int = 512) -> np.ndarray:
    """One bool per example: did the network classify it correctly (for kit.prose.accuracy_difference)."""
    x, labels = data.features.numpy(), data.labels.numpy().argmax(axis=1)
    out = [net.output(x[i : i + batch]).numpy().argmax(axis=1) for i in range(0, len(x), batch)]
    return np.concatenate(out) == labels


def fashion_784(limit_train: int, limit_test: int) -> tuple[DataSet, DataSet] | str:
    """Fashion-MNIST flattened to 784 features for an MLP, or the reason it is skipped."""
    if find_fashion_mnist() is None:
        return (
            "skipped: Fashion-MNIST files not found (apt-get install dataset-fashion-mnist, set KIT_DATA, "
            "or run kit.data.load_fashion_mnist(download=True) once)"
        )
    train, test = load_fashion_mnist(limit=max(limit_train, limit_test))

    def flat(ds: DataSet, n: int) -> DataSet:
        x = ds.features.numpy()[:n]
        return DataSet(x.reshape(len(x), -1), ds.labels.numpy()[:n].argmax(axis=1), num_classes=10)

    return flat(train, limit_train), flat(test, limit_test)


def _train_and_score(
    sizes: tuple[int, ...], train: DataSet, test: DataSet, epochs: int, lr: float
) -> dict[str, np.ndarray]:
    right = {}
    for name, kw in VARIANTS.items():
        net = mlp(sizes[0], hidden=sizes[1:-1], n_out=sizes[-1], updater=Adam(lr), seed=0, **kw)
        net.fit(ArrayIterator(train, 64, shuffle=True, seed=0), epochs=epochs)
        right[name] = correct(net, test)
    return right


def stall_case(
    train: DataSet,
    hidden: tuple[int, ...] = (64,),
    steps: int = 20,
    lr: float = 0.002,
    progress: Callable[[int, int, str], object] | None = None,
) -> dict[str, Any]:
    """Fine-tune a converged digits network (Adam, 15 epochs, float32) with Sgd(lr), full batch, in
    each precision from the same weights. Returns per precision the loss before and after, the
    loss drop, the drop as a fraction of float32's, and the shares of the compute parameters and of
    the master weights (the same array, but for mixed precision) that changed. `progress(done,
    total, note)`: after the converged network and after each precision."""
    total = 1 + len(VARIANTS)
    ref = mlp(train.features.shape[1], hidden=hidden, n_out=10, updater=Adam(1e-2), seed=0)
    ref.fit(ArrayIterator(train, 64), epochs=15)
    if progress is not None:
        progress(1, total, "converged in float32")
    out: dict[str, Any] = {}
    for name, kw in VARIANTS.items():
        net = mlp(train.features.shape[1], hidden=hidden, n_out=10, updater=Sgd(lr), seed=0, **kw)
        net.set_params(ref.params())
        before, master = net.params().numpy().copy(), net.flat_master.numpy().copy()
        # fit_batch returns the loss of its forward pass, before its update: the curve costs no extra pass
        losses = [net.fit_batch(train) for _ in range(steps)] + [net.score(train)]
        out[name] = {
            "losses": losses,
            "drop": losses[0] - losses[-1],
            "changed": float(np.mean(net.params().numpy() != before)),
            "master_changed": float(np.mean(net.flat_master.numpy() != master)),
        }
        if progress is not None:
            progress(1 + len(out), total, f"{name} fine-tuned")
    for run in out.values():
        run["fraction_of_float32"] = run["drop"] / out["float32"]["drop"]
    return out


def _timed_steps(sizes: tuple[int, ...], data: DataSet, repeats: int, number: int) -> dict[str, measure.Timing]:
    nets = {
        name: mlp(sizes[0], hidden=sizes[1:-1], n_out=sizes[-1], updater=Adam(1e-3), seed=0, **kw)
        for name, kw in VARIANTS.items()
    }
    fed = {name: in_dtype(data, kw["dtype"]) for name, kw in VARIANTS.items()}
    fns: dict[str, Callable[[], object]] = {name: (lambda n=n, d=fed[name]: n.fit_batch(d)) for name, n in nets.items()}
    return measure.compare(fns, repeats=repeats, number=number, sync=kit.backend.sync, warmup=STEP_WARMUP)


def _byte_rows(sizes: tuple[int, ...], data: DataSet) -> dict[str, dict[str, Any]]:
    """Bytes, counted, not timed: each precision's workspaces over three cycles and what it keeps."""
    rows: dict[str, dict[str, Any]] = {}
    for name, kw in VARIANTS.items():
        net = mlp(sizes[0], hidden=sizes[1:-1], n_out=sizes[-1], updater=Adam(1e-3), seed=0, **kw)
        ws = cycle_bytes(net, [in_dtype(data, kw["dtype"])] * 3)
        rows[name] = {
            "precision": name,
            "activations_B": ws.get("WS_ALL_LAYERS_ACT", 0),
            "layer_working_B": ws.get("WS_LAYER_WORKING_MEM", 0),
            "updater_working_B": ws.get("WS_UPDATER_WORKING_MEM", 0),
            "cycle_B": sum(ws.values()),
            "kept_B": sum(kept_bytes(net).values()),
            "matmul": matmul_kernel(kw["dtype"]),
        }
    return rows


def _add_step_times(rows: dict[str, dict[str, Any]], timed: dict[str, measure.Timing]) -> None:
    """Each precision's step time: the median of interleaved repeats, its spread, flags and repeats."""
    for name, t in timed.items():
        rows[name].update(
            ms_per_step=t.median * 1e3,
            spread=t.spread,
            reliable="yes" if t.reliable else "NO",
            ms_repeats=[s * 1e3 for s in t.seconds],
            load=t.load,
        )


def _add_fashion_accuracy(rows: dict[str, dict[str, Any]], quick: bool) -> str:
    """Each precision's Fashion-MNIST accuracy where the files are found; returns what was trained, or why not."""
    fashion = fashion_784(512, 500) if quick else fashion_784(4096, 2000)
    if isinstance(fashion, str):
        for row in rows.values():
            row["fashion_acc"] = "skipped"
        return fashion
    f_hidden = (64,) if quick else (256, 256)
    f_epochs = 1 if quick else 2
    right = _train_and_score((784, *f_hidden, 10), *fashion, f_epochs, 1e-3)
    for name, r in right.items():
        rows[name]["fashion_acc"] = float(r.mean())
    return (
        f"MLP 784-{'-'.join(map(str, f_hidden))}-10, {len(fashion[0])} training images, {f_epochs} epoch(s), "
        f"{len(fashion[1])} test images"
    )


def _byte_ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Activations and kept bytes of float16 and mixed precision as fractions of float32's."""
    f32 = rows["float32"]
    return {
        "activations_float16_over_float32": rows["float16"]["activations_B"] / f32["activations_B"],
        "activations_mixed_over_float32": rows["mixed"]["activations_B"] / f32["activations_B"],
        "kept_mixed_over_float32": rows["mixed"]["kept_B"] / f32["kept_B"],
    }


def _stall_summary(stall: dict[str, Any]) -> dict[str, float]:
    """The stall case in four numbers: each half-precision loss drop over float32's, and the share changed."""
    return {
        "stall_float16_drop_fraction_of_float32": stall["float16"]["fraction_of_float32"],
        "stall_mixed_drop_fraction_of_float32": stall["mixed"]["fraction_of_float32"],
        "stall_float16_params_changed": stall["float16"]["changed"],
        "stall_mixed_params_changed": stall["mixed"]["changed"],
    }


def _step_summary(timed: dict[str, measure.Timing]) -> dict[str, Any]:
    """The matmul kernels, the machine's load, each step's median ratio to float32's, the timings' warnings."""
    warnings = sorted({w for t in timed.values() for w in t.warnings})
    return {
        "blas_float32": matmul_kernel("float32"),
        "blas_float16": matmul_kernel("float16"),
        "machine_load_by_others": round(max(t.load for t in timed.values()), 4),
        "median_step_ratio_float16_over_float32": statistics.median(
            a / b for a, b in zip(timed["float16"].seconds, timed["float32"].seconds)
        ),
        "median_step_ratio_mixed_over_float32": statistics.median(
            a / b for a, b in zip(timed["mixed"].seconds, timed["float32"].seconds)
        ),
        "warnings": "; ".join(warnings) or "none",
    }


def bench_precision(quick: bool = False) -> dict[str, Any]:
    """The three precisions on one MLP: bytes, step time, accuracy, the stall case."""
    sizes = (64, 64, 64, 10) if quick else (784, 256, 256, 10)
    batch = 64
    repeats, number = (3, 1) if quick else (7, 2)
    rng = np.random.default_rng(0)
    data = DataSet(rng.random((batch, sizes[0])).astype(np.float32), rng.integers(0, 10, batch), num_classes=10)
    rows = _byte_rows(sizes, data)
    timed = _timed_steps(sizes, data, repeats, number)
    _add_step_times(rows, timed)
    # accuracy after the same epochs
    digits_train, digits_test = load_digits()
    digits_hidden = (64,) if quick else (256, 256)
    right = _train_and_score((64, *digits_hidden, 10), digits_train, digits_test, 3 if quick else 5, 1e-2)
    for name, r in right.items():
        rows[name]["digits_acc"] = float(r.mean())
        rows[name]["digits_correct"] = r.tolist()
    fashion_note = _add_fashion_accuracy(rows, quick)
    stall = stall_case(digits_train, steps=10 if quick else 20)
    return {
        "benchmark": "precision",
        "device": device_label(),
        "repeats": repeats,
        "columns": list(COLUMNS),
        "rows": [rows[name] for name in VARIANTS],
        "summary": {
            "mlp": f"{'-'.join(map(str, sizes))}, batch {batch}, Adam; bytes after 3 cycles, {number} step(s)/repeat",
            **_byte_ratios(rows),
            "digits": f"MLP 64-{'-'.join(map(str, digits_hidden))}-10, {3 if quick else 5} epochs, Adam(1e-2)",
            "fashion": fashion_note,
            **_stall_summary(stall),
            **_step_summary(timed),
        },
    }
