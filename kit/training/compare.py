"""Run the same training job on 1..N devices and compare, with a scaling model beside it.

    >>> import numpy as np
    >>> from kit.training.compare import Job, compare_devices
    >>> from kit.data import DataSet
    >>> from kit.nn import Sgd, mlp
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(256, 8)).astype(np.float32), rng.integers(0, 3, size=256)
    >>> train, test = DataSet(x[:192], y[:192], num_classes=3), DataSet(x[192:], y[192:], num_classes=3)
    >>> job = Job(lambda: mlp(8, (16,), 3, updater=Sgd(0.05)), train, test, batch_size=32, epochs=3, min_time=0.01)
    >>> result = compare_devices(job, counts=[1, 2])  # it measures
    >>> print(result.table())                          # a notebook shows it as an HTML table
    devices | 1 | 2
    ...
    kind | physical cpu:0 | logical (share cpu:0)
    ...
    >>> ax = result.plot()                            # measured vs predicted speedup, beside the ideal line
    >>> len(result.timings[2].seconds) == job.epochs   # every repeat's seconds per epoch, kept
    True

Devices: N physical GPUs when there are; else N simulated host devices when `KIT_HOST_DEVICES` makes
that many; else N *logical* devices of one device. Every row says which (devices that share one CPU
measure shared hardware, not N GPUs) and counts the copies between devices an epoch made.

Timing is kit.measure's (interleaved, median and spread), and every figure carries its flags
(`row["flags"]`): a speedup is flagged when its timing or its baseline's is, or when it exceeds its
device count; the table greys it, the plot crosses it out, `Comparison.speedup_sentence` draws no
direction from it. On a CPU the one-device baseline gets every core; the speedup over one worker's
share is shown beside it.

The scaling model (kit.scaling) predicts the N-device epoch time from one-device measurements.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.core.arguments import real, whole
from kit.core.devices import (
    as_device,
    blas_threads,
    default_device,
    gpu_count,
    host_device_count,
    logical_devices,
    transfer_stats,
)
from kit.data.dataset import ArrayIterator, DataSet
from kit.measurement import measure
from kit.nn.network import Network
from kit.parallel.wrapper import ParallelWrapper
from kit.training.comparison import Comparison
from kit.training.scaling import measure_bandwidth, predict_epoch_seconds

__all__ = ["Comparison", "Job", "compare_devices", "measure_bandwidth", "predict_epoch_seconds", "predicted_speedup"]


@dataclass
class Job:
    """What to train. `epochs`: timed repeats per configuration (each repeat trains whole epochs,
    as many as `kit.measure.autorange` needs to last `min_time` seconds, the same for every
    configuration)."""

    make_model: Callable[[], Network]
    train: DataSet
    test: DataSet | None = None
    batch_size: int = 64
    epochs: int = 5
    averaging_frequency: int = 1
    shuffle: bool = True
    min_time: float = measure.MIN_TIME

    def __post_init__(self) -> None:  # at the call: compare_devices builds models and measures before it trains
        for name, least in (("batch_size", 1), ("epochs", 1), ("averaging_frequency", 1)):
            setattr(self, name, whole("Job", name, getattr(self, name), least))
        self.min_time = real("Job", "min_time", self.min_time, 0, low_open=True, what=" (seconds)")


def _devices_for(n: int) -> tuple[list[Any], str]:
    if n == 1:
        d = default_device()
        return [d], f"physical {d.name}"
    if gpu_count() >= n:
        return [as_device(f"gpu:{i}") for i in range(n)], "physical GPUs"
    if gpu_count() == 0 and host_device_count() >= n:
        return [as_device(f"cpu:{i}") for i in range(n)], "simulated on the host"
    base = default_device()
    return list(logical_devices(n, base)), f"logical (share {base.name})"


def _step_seconds(job: Job, threads: int | None) -> float:
    net = job.make_model()
    batch = next(iter(ArrayIterator(job.train, job.batch_size)))
    ctx = blas_threads(threads) if threads else contextlib.nullcontext()
    with ctx:
        return measure.measure(lambda: net.fit_batch(batch), repeats=5, min_time=min(job.min_time, 0.1)).median


def assess_row(
    row: dict[str, Any],
    timing_warnings: list[str],
    shared: bool,
    cores: int,
    baseline: list[str] | tuple[str, ...] = (),
    share_baseline: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """Attach the reasons a row's figures cannot be trusted (kit.measure's rules), per figure, each
    from the timings it is computed from: `row["flags"][column]`. The epoch time carries its own
    timing's `timing_warnings`; the speedup (and the efficiency) those, the flags of the baseline
    it divides by (`baseline`, from `_baseline_warnings`) and a speedup beyond the device count;
    the speedup vs share the same against its own baseline (`share_baseline`); the predicted
    speedup a prediction beyond the device count. `row["warnings"]` gathers them all and
    `row["reliable"]` is whether there is none."""
    own, n = list(timing_warnings), row["devices"]
    speed = own + list(baseline)
    if n > 1:
        speed += measure.speedup_warnings(row["speedup"], n, shared=shared, cores=cores)
    flags = {"epoch_s": own, "speedup": speed, "efficiency": speed}
    if row.get("speedup_vs_share") is not None:
        beyond = measure.speedup_warnings(row["speedup_vs_share"], n, shared=shared, cores=cores)
        flags["speedup_vs_share"] = own + list(share_baseline) + beyond
    predicted = row.get("predicted_speedup")
    flags["predicted_speedup"] = []
    if n > 1 and predicted is not None and predicted > n * (1 + measure.SPEEDUP_TOLERANCE):
        flags["predicted_speedup"] = [
            f"the scaling model predicts {predicted:.2f}x for {n} device(s): its step times "
            "were distorted while they were measured"
        ]
    row["flags"] = flags
    row["warnings"] = list(dict.fromkeys(w for why in flags.values() for w in why))
    row["reliable"] = not row["warnings"]
    return row


def compare_devices(
    job: Job, counts: list[int] | tuple[int, ...] = (1, 2), progress: Callable[[], object] | None = None
) -> Comparison:
    """`job` trained on each of `counts` devices (1 always), measured interleaved; `progress()`
    is called after every epoch trained while measuring (warm-up, autorange and timed repeats).
    In three rooms: the scaling model's inputs (`_scaling_inputs`), the interleaved epochs
    (`_timed_epochs`), and one row per device count (`_device_row`)."""
    if not counts:
        raise ValueError(f"compare_devices(counts={counts!r}): give device counts, e.g. counts=[1, 2]")
    counts = sorted({whole("compare_devices", "counts", c) for c in counts} | {1})  # the baseline always runs
    cores = os.cpu_count() or 1
    on_cpu = default_device().kind == "cpu"
    share = max(1, cores // max(counts))
    result = Comparison()
    result.model = _scaling_inputs(job)
    timings, epochs = _timed_epochs(job, counts, share if on_cpu and share < cores else None, progress)
    result.timings = timings
    result.model["baseline"] = _baseline(timings, cores if on_cpu else None, share, cores)
    result.model["epochs_per_repeat"] = timings[1].number
    result.model["repeats"] = job.epochs
    result.model["load"] = timings[1].load
    for n in counts:
        physical = "physical" in epochs["kinds"][n]
        if n > 1:
            parallel = physical or (on_cpu and n <= cores)  # side by side: own devices, or a core each
            step_n = result.model["step_s_one_device"] if not on_cpu else _step_seconds(job, max(1, cores // n))
            result.model["step_s_per_worker"][n] = step_n
            result.model["compute_split"][n] = parallel
        row = _device_row(job, n, timings, epochs, result.model)
        base, share_base = (_baseline_warnings(timings, 1), _baseline_warnings(timings, "share")) if n > 1 else ([], [])
        shared = not physical and on_cpu
        result.rows.append(assess_row(row, timings[n].warnings, shared, cores, base, share_base))
    return result


def _baseline(timings: dict[int | str, measure.Timing], threads: int | None, share: int, cores: int) -> dict[str, Any]:
    """The one-device baseline the model records: on every core (`threads`) and on one worker's share."""
    base = timings[1].median
    return {
        "threads": threads,
        "epoch_s": base,
        "spread": timings[1].spread,
        "share_threads": share if "share" in timings else cores,
        "share_epoch_s": timings["share"].median if "share" in timings else base,
        "share_spread": timings["share" if "share" in timings else 1].spread,
    }


def _scaling_inputs(job: Job) -> dict[str, Any]:
    """Every input of the scaling model, so the prediction can be recomputed from what is printed
    (`model_table`, `predicted_speedup`); the per-worker step times are added per device count."""
    probe = job.make_model()
    params, width = probe.num_params, probe.dtype.itemsize
    return {
        "params": params,
        "bytes_per_value": width,
        # parameter-sized buffers moved per average: the parameters and the updater state (float32
        # at least, so a float16 network's state weighs twice its parameters)
        "buffers_averaged": 1 + sum(s.dtype.itemsize for s in probe.updater_state.values()) / width,
        "batches_per_epoch": math.ceil(job.train.num_examples / job.batch_size),
        "averaging_frequency": job.averaging_frequency,
        "bandwidth_GBps": measure_bandwidth(params * width) / 1e9,
        "step_s_one_device": _step_seconds(job, None),
        "step_s_per_worker": {},
        "compute_split": {},
    }


def _timed_epochs(
    job: Job, counts: list[int], share: int | None, progress: Callable[[], object] | None
) -> tuple[dict[int | str, measure.Timing], dict[str, Any]]:
    """Epochs on each device count, interleaved (kit.measure.compare), and what each trained:
    its network, its devices, their kind and the copies between devices of each epoch. `share`:
    also one device with one worker's share of the cores (key "share"), on a CPU."""
    nets, wrappers, kinds, fns = {}, {}, {}, {}
    try:
        for n in counts:
            devs, kinds[n] = _devices_for(n)
            nets[n] = job.make_model()
            wrappers[n] = ParallelWrapper(
                nets[n], workers=n, devices=devs, prefetch_buffer=0, averaging_frequency=job.averaging_frequency
            )
        if share is not None:
            nets["share"] = job.make_model()
            wrappers["share"] = ParallelWrapper(nets["share"], workers=1, devices=[default_device()], prefetch_buffer=0)
        copies: dict[Any, list[tuple[int, int]]] = {key: [] for key in wrappers}
        for key, pw in wrappers.items():
            it = ArrayIterator(job.train, job.batch_size, shuffle=job.shuffle, seed=0)
            fns[key] = _counting_copies(_epoch_fn(pw, it, share if key == "share" else None), copies[key], progress)
        timings = measure.compare(fns, min_time=job.min_time, repeats=job.epochs, same_number=True)
    finally:
        for pw in wrappers.values():
            pw.shutdown()
    names = {key: [str(d) for d in pw.devices] for key, pw in wrappers.items()}
    return timings, {"nets": nets, "names": names, "kinds": kinds, "copies": copies}


def _device_row(
    job: Job, n: int, timings: dict[int | str, measure.Timing], epochs: dict[str, Any], model: dict[str, Any]
) -> dict[str, Any]:
    """The table's row for `n` devices, before assess_row flags it."""
    t, copies = timings[n], epochs["copies"][n]
    # per-repeat ratios against the baseline measured in the same repeat: drift cancels
    speedups = [b / x for b, x in zip(timings[1].seconds, t.seconds)]
    speedup = float(np.median(speedups))
    vs_share, vs_share_each = None, None
    if n > 1 and "share" in timings:  # the same way: per repeat, then the median
        vs_share_each = [b / x for b, x in zip(timings["share"].seconds, t.seconds)]
        vs_share = float(np.median(vs_share_each))
    net = epochs["nets"][n]
    return {
        "devices": n,
        "kind": epochs["kinds"][n],
        "names": epochs["names"][n],
        "epoch_s": t.median,
        "spread": t.spread,
        "samples_per_s": job.train.num_examples / t.median,
        "speedup": speedup,
        "speedups": speedups,  # one per repeat, each against the baseline of the same repeat
        "speedup_vs_share": vs_share,
        "speedups_vs_share": vs_share_each,  # one per repeat, against the share baseline of the same repeat
        "efficiency": speedup / n,
        "predicted_speedup": predicted_speedup(model, n),
        # every copy between devices goes through the one transfer path, which counts it
        "copies_per_epoch": float(np.median([c for c, _ in copies])) if copies else 0.0,
        "copied_MB_per_epoch": float(np.median([b for _, b in copies])) / 1e6 if copies else 0.0,
        "accuracy": net.evaluate(ArrayIterator(job.test, 512)).accuracy() if job.test is not None else None,
        "load": t.load,
    }


_BASELINES = {1: "1 device", "share": "1 device with one worker's share of the cores"}


def predicted_speedup(model: dict[str, Any], n: int) -> float:
    """The scaling model's speedup of `n` devices, T(1) / T(n), from `model` alone (a
    `Comparison.model`): every input it uses is one `Comparison.model_table` prints."""
    if n == 1:
        return 1.0
    terms = (model["params"], model["bytes_per_value"], model["buffers_averaged"], model["bandwidth_GBps"] * 1e9)
    one = predict_epoch_seconds(model["batches_per_epoch"], 1, model["step_s_one_device"], 1, *terms, True)
    step_n, split = model["step_s_per_worker"][n], model["compute_split"][n]
    return one / predict_epoch_seconds(
        model["batches_per_epoch"], n, step_n, model["averaging_frequency"], *terms, split
    )


def _baseline_warnings(timings: dict[int | str, measure.Timing], key: int | str = 1) -> list[str]:
    """A speedup is a ratio to its baseline (`key`: 1, every core; "share", one worker's share): a
    flagged baseline flags every speedup measured against it (the row's own timing may be clean,
    that speedup is not), and only that speedup."""
    if key in timings and timings[key].warnings:
        return [f"its baseline ({_BASELINES[key]}) was flagged: {'; '.join(timings[key].warnings)}"]
    return []


def _counting_copies(
    run: Callable[[], None], into: list[tuple[int, int]], progress: Callable[[], object] | None = None
) -> Callable[[], None]:
    """`run`, also recording how many copies between devices (and bytes) one call made, and
    reporting the call to `progress` (outside the copy count; inside the timed repeat, where a
    throttled panel's tick costs microseconds against an epoch)."""

    def counted() -> None:
        before = _copy_totals()
        run()
        after = _copy_totals()
        into.append((after[0] - before[0], after[1] - before[1]))
        if progress is not None:
            progress()

    return counted


def _copy_totals() -> tuple[int, int]:
    stats = transfer_stats().values()
    return sum(n for n, _ in stats), sum(b for _, b in stats)


def _epoch_fn(pw: ParallelWrapper, it: ArrayIterator, threads: int | None) -> Callable[[], None]:
    def run() -> None:
        with blas_threads(threads) if threads else contextlib.nullcontext():
            pw.fit(it, epochs=1)

    return run
