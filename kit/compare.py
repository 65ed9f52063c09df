"""Run the same training job on 1..N devices and compare, with a scaling model beside it.

    >>> import numpy as np
    >>> from kit.compare import Job, compare_devices
    >>> from kit.data import DataSet
    >>> from kit.nn import Sgd, mlp
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(256, 8)).astype(np.float32), rng.integers(0, 3, size=256)
    >>> train, test = DataSet(x[:192], y[:192], num_classes=3), DataSet(x[192:], y[192:], num_classes=3)
    >>> job = Job(lambda: mlp(8, (16,), 3, updater=Sgd(0.05)), train, test, batch_size=32, epochs=3, min_time=0.01)
    >>> result = compare_devices(job, counts=[1, 2])  # about a second: it measures
    >>> print(result.table())                          # a notebook shows it as an HTML table
    devices | 1 | 2
    ...
    kind | physical cpu:0 | logical (share cpu:0)
    ...
    >>> ax = result.plot()                            # measured vs predicted speedup, beside the ideal line
    >>> len(result.timings[2].seconds) == job.epochs   # every repeat's seconds per epoch, kept
    True

A real job is bigger and measured longer (the defaults: 5 timed repeats of at least 0.3 s each), e.g.
`Job(lambda: mlp(784, (512, 256), 10, updater=Sgd(0.05)), train, test, batch_size=64)` on Fashion-MNIST.

Devices: N physical GPUs when the machine has them; on a CPU-only machine N simulated host
devices when `KIT_HOST_DEVICES` makes that many (separate placement domains: every batch and
every average crosses the transfer path, as between GPUs); otherwise N *logical* devices of one
device. Every row says which: simulated and logical devices share one CPU, so their "speedup" is
what overlapping work on shared hardware gives, not what N GPUs would give. Each row also counts
the copies between devices one epoch made, and their megabytes (what averaging costs in copies).

Timing (kit.measure): every configuration trains the same number of epochs per timed repeat,
the configurations interleaved in every repeat; a row reports the median epoch time and its
spread, and is flagged *unreliable* (in the table and the plot) when other processes loaded the
machine, the spread is too wide, or its speedup exceeds its device count. Fair baselines: on a
CPU, one device uses the same total BLAS thread budget as the N workers together (every core);
the table also shows the speedup over one device limited to one worker's share of the cores.
The repeats themselves are kept (`Comparison.timings`, each row's per-repeat `speedups`), so a
plot can show their range; `progress` (e.g. a `kit.widgets.TimingPanel`'s `tick`) is called
after every epoch trained while measuring, for a measurement that takes a while.

The scaling model (kit.scaling) predicts the N-device epoch time from one-device measurements.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit import measure, tables
from kit.data.dataset import ArrayIterator, DataSet
from kit.devices import (
    as_device,
    blas_threads,
    default_device,
    gpu_count,
    host_device_count,
    logical_devices,
    transfer_stats,
)
from kit.nn.network import Network
from kit.parallel.wrapper import ParallelWrapper
from kit.scaling import measure_bandwidth, predict_epoch_seconds

__all__ = ["Comparison", "Job", "compare_devices", "measure_bandwidth", "predict_epoch_seconds"]


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


COLUMNS = [
    "devices",
    "kind",
    "reliable",  # beside what it judges: a wide table must not scroll it out of sight
    "epoch_s",
    "spread",
    "samples_per_s",
    "speedup",
    "speedup_vs_share",
    "efficiency",
    "predicted_speedup",
    "copies_per_epoch",
    "copied_MB_per_epoch",
    "accuracy",
]


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    # the measurements behind the rows: seconds per epoch of every repeat (kit.measure.Timing),
    # keyed by device count, and "share" for one device with one worker's share of the cores
    timings: dict[Any, measure.Timing] = field(default_factory=dict)

    @property
    def reliable(self) -> bool:
        return all(r["reliable"] for r in self.rows)

    def notes(self) -> list[str]:
        """What the table's numbers need said beside them: the baseline, every flag, the kind."""
        out = []
        if any(r["devices"] > 1 for r in self.rows):
            out.append(
                "speedup, speedup_vs_share: the median over repeats of one device's epoch time divided by this "
                "row's, both from the same repeat (so not the ratio of the epoch_s medians)"
            )
        base = self.model.get("baseline")
        if base:
            out.append(
                f"baseline: 1 device with {base['threads']} BLAS thread(s) (the same total as the workers): "
                f"{base['epoch_s']:.3g} s/epoch; with {base['share_threads']} thread(s) (one worker's share): "
                f"{base['share_epoch_s']:.3g} s/epoch"
            )
        for r in self.rows:
            for w in r["warnings"]:
                out.append(f"UNRELIABLE {r['devices']} device(s): {w}")
        if not self.reliable:
            out.append("-> do not read a speedup from the flagged rows: rerun on a quiet machine")
        if any("logical" in r["kind"] or "simulated" in r["kind"] for r in self.rows):
            out.append(
                "note: logical and simulated devices share one physical device; their speedup is overlap on "
                "shared hardware, not a multi-GPU speedup"
            )
        return out

    def _shown(self) -> tuple[list[str], list[list[str]]]:
        """The columns and cells to show: a column with nothing in any row (all "-") is left out."""
        cells = [[_fmt(c, r.get(c)) for c in COLUMNS] for r in self.rows]
        keep = [i for i, c in enumerate(COLUMNS) if c in ("devices", "reliable") or any(row[i] != "-" for row in cells)]
        return [COLUMNS[i] for i in keep], [[row[i] for i in keep] for row in cells]

    def table(self) -> str:
        """The rows as text no wider than 100 columns (transposed when they would be), then the notes."""
        return tables.text_table(*self._shown(), self.notes())

    __str__ = table

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        """Narrower than the text, to fit a notebook's column: each epoch time carries its spread, and
        samples_per_s (the examples over epoch_s) is left to the text form."""
        columns, cells = self._shown()
        at = {c: i for i, c in enumerate(columns)}
        for row in cells if "spread" in at else ():
            row[at["epoch_s"]] = f"{row[at['epoch_s']]} {row[at['spread']]}".rstrip(" -")
        keep = [i for i, c in enumerate(columns) if c not in ("spread", "samples_per_s")]
        heads = ["epoch (s) ±spread" if c == "epoch_s" and "spread" in at else c for c in columns]
        shown = [heads[i] for i in keep], [[row[i] for i in keep] for row in cells]
        return tables.html_table(*shown, self.notes(), flag_column="reliable", text_columns=["kind"])

    def plot(self, ax: Any = None) -> Any:
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.5, 4.2))
        n = [r["devices"] for r in self.rows]
        ax.plot(n, n, ":", color="#999", label="ideal")
        ax.plot(n, [r["predicted_speedup"] for r in self.rows], "--", color="#c63", label="scaling model")
        measured = [r["speedup"] for r in self.rows]
        if all(r.get("speedups") for r in self.rows):  # the range of the per-repeat ratios
            lo = [s - min(r["speedups"]) for s, r in zip(measured, self.rows)]
            hi = [max(r["speedups"]) - s for s, r in zip(measured, self.rows)]
            ax.errorbar(
                n,
                measured,
                yerr=[lo, hi],
                fmt="o-",
                color="#36c",
                capsize=4,
                label="measured (median, range of repeats)",
            )
        else:
            ax.plot(n, measured, "o-", color="#36c", label="measured (median)")
        bad = [r for r in self.rows if not r["reliable"]]
        if bad:
            ax.plot(
                [r["devices"] for r in bad],
                [r["speedup"] for r in bad],
                "x",
                color="#c00",
                ms=12,
                mew=2,
                label="UNRELIABLE (see table)",
            )
        kinds = list(dict.fromkeys(r["kind"] for r in sorted(self.rows, key=lambda r: r["devices"])))
        ax.set_xlabel("devices (" + ", ".join(kinds) + ")", fontsize=8)  # kinds in the order of their ticks
        ax.set_ylabel("speedup over 1 device")
        ax.set_xticks(n)
        # below the axes, in two columns: beside them, a legend as wide as the plot squeezed the axes
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
        if bad:
            ax.set_title("flagged: machine busy or noisy, no conclusion", fontsize=9, color="#c00")
        return ax


def _fmt(col: str, v: Any) -> str:
    if col == "spread" and isinstance(v, float):
        return measure.format_spread(v)
    if col == "reliable":
        return "yes" if v else "NO"
    return tables.number(v)


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


def assess_row(row: dict[str, Any], timing_warnings: list[str], shared: bool, cores: int) -> dict[str, Any]:
    """Attach the reasons a row cannot be trusted (kit.measure's rules) and the verdict."""
    warnings = list(timing_warnings)
    if row["devices"] > 1:
        warnings += measure.speedup_warnings(row["speedup"], row["devices"], shared=shared, cores=cores)
        predicted = row.get("predicted_speedup")
        if predicted is not None and predicted > row["devices"] * (1 + measure.SPEEDUP_TOLERANCE):
            warnings.append(
                f"the scaling model predicts {predicted:.2f}x for {row['devices']} device(s): its step times "
                "were distorted while they were measured"
            )
    row["warnings"] = warnings
    row["reliable"] = not warnings
    return row


def compare_devices(
    job: Job, counts: list[int] | tuple[int, ...] = (1, 2), progress: Callable[[], Any] | None = None
) -> Comparison:
    """`job` trained on each of `counts` devices (1 always), measured interleaved; `progress()`
    is called after every epoch trained while measuring (warm-up, autorange and timed repeats)."""
    if not counts or any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"compare_devices(counts={counts!r}): positive integers")
    counts = sorted(set(counts) | {1})  # the baseline always runs
    result = Comparison()
    cores = os.cpu_count() or 1
    probe = job.make_model()
    params, width = probe.num_params, probe.dtype.itemsize
    # parameter-sized buffers moved per average: the parameters and the updater state (float32 at
    # least, so a float16 network's state weighs twice its parameters)
    buffers = 1 + sum(s.dtype.itemsize for s in probe.updater_state.values()) / width
    batches = math.ceil(job.train.num_examples / job.batch_size)
    bandwidth = measure_bandwidth(params * width)
    on_cpu = default_device().kind == "cpu"
    step_full = _step_seconds(job, None)
    share = max(1, cores // max(counts))
    result.model = {"params": params, "bandwidth_GBps": bandwidth / 1e9, "step_s_one_device": step_full}

    nets, wrappers, kinds, fns = {}, {}, {}, {}
    try:
        for n in counts:
            devs, kinds[n] = _devices_for(n)
            nets[n] = job.make_model()
            wrappers[n] = ParallelWrapper(
                nets[n], workers=n, devices=devs, prefetch_buffer=0, averaging_frequency=job.averaging_frequency
            )
        if on_cpu and share < cores:  # one device with one worker's share of the cores
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
    result.timings = timings
    base = timings[1].median
    base_share = timings["share"].median if "share" in timings else base
    result.model["baseline"] = {
        "threads": cores if on_cpu else None,
        "epoch_s": base,
        "share_threads": share if "share" in timings else cores,
        "share_epoch_s": base_share,
    }
    result.model["epochs_per_repeat"] = timings[1].number
    result.model["repeats"] = job.epochs
    result.model["load"] = timings[1].load
    base_pred = predict_epoch_seconds(batches, 1, step_full, 1, params, width, buffers, bandwidth, True)
    for n in counts:
        kind = kinds[n]
        physical = "physical" in kind
        parallel = physical or (on_cpu and n <= cores)  # side by side: own devices, or a core each
        step_n = step_full if n == 1 or not on_cpu else _step_seconds(job, max(1, cores // n))
        freq = job.averaging_frequency
        predicted = predict_epoch_seconds(batches, n, step_n, freq, params, width, buffers, bandwidth, parallel)
        t = timings[n]
        epoch_s = t.median
        # per-repeat ratios against the baseline measured in the same repeat: drift cancels
        speedups = [b / x for b, x in zip(timings[1].seconds, t.seconds)]
        speedup = float(np.median(speedups))
        vs_share = None
        if n > 1 and "share" in timings:  # the same way: per repeat, then the median
            vs_share = float(np.median([b / x for b, x in zip(timings["share"].seconds, t.seconds)]))
        accuracy = nets[n].evaluate(ArrayIterator(job.test, 512)).accuracy() if job.test is not None else None
        row = {
            "devices": n,
            "kind": kind,
            "names": [str(d) for d in wrappers[n].devices],
            "epoch_s": epoch_s,
            "spread": t.spread,
            "samples_per_s": job.train.num_examples / epoch_s,
            "speedup": speedup,
            "speedups": speedups,  # one per repeat, each against the baseline of the same repeat
            "speedup_vs_share": vs_share,
            "efficiency": speedup / n,
            "predicted_speedup": base_pred / predicted,
            # every copy between devices goes through the one transfer path, which counts it
            "copies_per_epoch": float(np.median([c for c, _ in copies[n]])) if copies[n] else 0.0,
            "copied_MB_per_epoch": float(np.median([b for _, b in copies[n]])) / 1e6 if copies[n] else 0.0,
            "accuracy": accuracy,
            "load": t.load,
        }
        warnings = t.warnings + (_baseline_warnings(timings) if n > 1 else [])
        result.rows.append(assess_row(row, warnings, shared=not physical and on_cpu, cores=cores))
    return result


def _baseline_warnings(timings: dict[Any, measure.Timing]) -> list[str]:
    """A row's speedup is a ratio to the baselines: a flagged baseline flags every row measured
    against it (its own timing may be clean, its speedup is not)."""
    out = []
    for key, what in ((1, "1 device"), ("share", "1 device with one worker's share of the cores")):
        if key in timings and timings[key].warnings:
            out.append(f"its baseline ({what}) was flagged: {'; '.join(timings[key].warnings)}")
    return out


def _counting_copies(
    run: Callable[[], None], into: list[tuple[int, int]], progress: Callable[[], Any] | None = None
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


def _epoch_fn(pw: Any, it: ArrayIterator, threads: int | None) -> Callable[[], None]:
    def run() -> None:
        with blas_threads(threads) if threads else contextlib.nullcontext():
            pw.fit(it, epochs=1)

    return run
