"""Run the same training job on 1..N devices and compare, with a scaling model beside it.

    >>> job = Job(lambda: mlp(784, (512, 256), 10, updater=Sgd(0.05)), train, test, batch_size=64)
    >>> result = compare_devices(job, counts=[1, 2])
    >>> print(result.table()); result.plot()

Devices: N physical GPUs when the machine has them; otherwise N *logical* devices of one
device, and every row says so: logical devices share one physical device, so their "speedup"
is what overlapping work on shared hardware gives, not what N GPUs would give.

The scaling model predicts the N-device epoch time from one-device measurements:
    T(N) = batches * t_step(N) / N  +  (batches / (N * F)) * bytes_moved(N) / bandwidth
where t_step(N) is one training step measured with the compute each worker would have (the
CPU's cores shared out, or a whole GPU), F the averaging frequency, bytes_moved(N) = 2 N P b
(every replica's P parameters of b bytes gathered and broadcast, updater state too), and the
bandwidth a measured device copy.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.data.dataset import ArrayIterator, DataSet
from kit.devices import as_device, blas_threads, default_device, gpu_count, logical_devices
from kit.nn.network import Network

__all__ = ["Comparison", "Job", "compare_devices", "measure_bandwidth", "predict_epoch_seconds"]


@dataclass
class Job:
    make_model: Callable[[], Network]
    train: DataSet
    test: DataSet | None = None
    batch_size: int = 64
    epochs: int = 2
    averaging_frequency: int = 1
    shuffle: bool = True


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        cols = ["devices", "kind", "epoch_s", "samples_per_s", "speedup", "efficiency", "predicted_speedup", "accuracy"]
        cells = [[_fmt(r.get(c)) for c in cols] for r in self.rows]
        widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
        if any("logical" in r["kind"] for r in self.rows):
            lines.append(
                "note: logical devices share one physical device; their speedup is overlap on shared "
                "hardware, not a multi-GPU speedup"
            )
        return "\n".join(lines)

    def plot(self, ax: Any = None) -> Any:
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        n = [r["devices"] for r in self.rows]
        ax.plot(n, n, ":", color="#999", label="ideal")
        ax.plot(n, [r["predicted_speedup"] for r in self.rows], "--", color="#c63", label="scaling model")
        ax.plot(n, [r["speedup"] for r in self.rows], "o-", color="#36c", label="measured")
        kinds = sorted({r["kind"] for r in self.rows})
        ax.set_xlabel("devices (" + ", ".join(kinds) + ")")
        ax.set_ylabel("speedup over 1 device")
        ax.set_xticks(n)
        ax.legend(fontsize=8)
        return ax


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "-" if v is None else str(v)


def _devices_for(n: int) -> tuple[list[Any], str]:
    if n == 1:
        d = default_device()
        return [d], f"physical {d.name}"
    if gpu_count() >= n:
        return [as_device(f"gpu:{i}") for i in range(n)], "physical GPUs"
    base = default_device()
    return list(logical_devices(n, base)), f"logical (share {base.name})"


def measure_bandwidth(nbytes: int, device: Any = None, repeats: int = 7) -> float:
    """Bytes per second of a device-to-device copy (read + write counted once, as moved)."""
    dev = as_device(device) if device is not None else default_device()
    xp = dev.xp
    n = max(1, nbytes // 4)
    with dev.activate():
        a = xp.ones(n, dtype=np.float32)
        b = xp.empty_like(a)
        xp.copyto(b, a)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            xp.copyto(b, a)
            if dev.kind == "gpu":
                xp.cuda.get_current_stream().synchronize()
            times.append(time.perf_counter() - t0)
    return n * 4 / statistics.median(times)


def _step_seconds(job: Job, threads: int | None, steps: int = 5) -> float:
    net = job.make_model()
    batch = next(iter(ArrayIterator(job.train, job.batch_size)))
    ctx = blas_threads(threads) if threads else contextlib.nullcontext()
    with ctx:
        net.fit_batch(batch)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            net.fit_batch(batch)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def predict_epoch_seconds(
    batches: int,
    n: int,
    step_seconds: float,
    frequency: int,
    params: int,
    bytes_per_value: int,
    buffers: int,
    bandwidth: float,
    parallel: bool,
) -> float:
    """The scaling model (see the module docstring). `parallel`: whether the N workers really
    run side by side (physical devices, or CPU cores shared out) or share one device."""
    compute = batches * step_seconds / (n if parallel else 1)
    if n == 1:
        return compute
    moved = 2 * n * params * bytes_per_value * buffers
    return compute + (batches / (n * frequency)) * moved / bandwidth


def compare_devices(job: Job, counts: list[int] | tuple[int, ...] = (1, 2)) -> Comparison:
    from kit.parallel.wrapper import ParallelWrapper

    if not counts or any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"compare_devices(counts={counts!r}): positive integers")
    result = Comparison()
    cores = os.cpu_count() or 1
    probe = job.make_model()
    params, width = probe.num_params, probe.dtype.itemsize
    buffers = 1 + len(probe.updater_state)
    batches = math.ceil(job.train.num_examples / job.batch_size)
    bandwidth = measure_bandwidth(params * width)
    on_cpu = default_device().kind == "cpu"
    step_full = _step_seconds(job, None)
    result.model = {"params": params, "bandwidth_GBps": bandwidth / 1e9, "step_s_one_device": step_full}
    base_time = None
    for n in sorted(set(counts)):
        devs, kind = _devices_for(n)
        net = job.make_model()
        it = ArrayIterator(job.train, job.batch_size, shuffle=job.shuffle, seed=0)
        epoch_times = []
        freq = job.averaging_frequency
        with ParallelWrapper(net, workers=n, devices=devs, prefetch_buffer=0, averaging_frequency=freq) as pw:
            for _ in range(job.epochs):
                t0 = time.perf_counter()
                pw.fit(it, epochs=1)
                epoch_times.append(time.perf_counter() - t0)
        epoch_s = statistics.median(epoch_times[1:] if len(epoch_times) > 1 else epoch_times)
        base_time = base_time or epoch_s
        physical = "physical" in kind
        # workers run side by side on physical devices, or on the CPU up to one per core
        parallel = physical or (on_cpu and n <= cores)
        step_n = step_full if n == 1 or not on_cpu else _step_seconds(job, max(1, cores // n))
        predicted = predict_epoch_seconds(batches, n, step_n, freq, params, width, buffers, bandwidth, parallel)
        base_pred = predict_epoch_seconds(batches, 1, step_full, 1, params, width, buffers, bandwidth, True)
        accuracy = net.evaluate(ArrayIterator(job.test, 512)).accuracy() if job.test is not None else None
        result.rows.append(
            {
                "devices": n,
                "kind": kind,
                "names": [str(d) for d in devs],
                "epoch_s": epoch_s,
                "samples_per_s": job.train.num_examples / epoch_s,
                "speedup": base_time / epoch_s,
                "efficiency": base_time / epoch_s / n,
                "predicted_speedup": base_pred / predicted,
                "accuracy": accuracy,
            }
        )
    return result
