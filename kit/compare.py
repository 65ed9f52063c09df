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
spread. Flags are per figure, each from the timings it is computed from (`row["flags"]`): the
epoch time is flagged when its own timing is (other processes loaded the machine, the spread is
too wide); a speedup when its own timing, or the baseline it divides by, is flagged, or when it
exceeds its device count. The table greys a flagged figure (marks it `*` in the text form), its
`reliable` column says yes, partly or NO, and the plot marks a flagged speedup with a red cross.
Fair baselines: on a CPU, one device uses the same total BLAS thread budget as the N workers
together (every core); the table also shows the speedup over one device limited to one worker's
share of the cores. `Comparison.speedup_sentence` words either speedup from the same figures,
and refuses a direction where the table flags it.
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

from kit import measure, prose, tables
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

    def notes(self, words: bool = False) -> list[str]:
        """What the table's numbers need said beside them: the baseline, every flag (with the
        figures it flags), the kind. `words`: columns named as the HTML headers say them
        ("speedup vs share"), else by their keys, as the text form heads them."""
        name = tables.header if words else str
        out = []
        if any(r["devices"] > 1 for r in self.rows):
            out.append(
                f"{name('speedup')}, {name('speedup_vs_share')}: the median over repeats of one device's epoch "
                f"time divided by this row's, both from the same repeat (so not the ratio of the "
                f"{name('epoch_s')} medians)"
            )
        base = self.model.get("baseline")
        if base:
            out.append(
                f"baseline: 1 device with {base['threads']} BLAS thread(s) (the same total as the workers): "
                f"{base['epoch_s']:.3g} s/epoch{_spread_words(base, 'spread')}; with {base['share_threads']} "
                f"thread(s) (one worker's share): {base['share_epoch_s']:.3g} s/epoch"
                f"{_spread_words(base, 'share_spread')}"
            )
        for r in self.rows:
            flags = _row_flags(r)
            shown = [c for c in _FLAGGED_COLUMNS if c in flags]
            for w in r["warnings"]:
                cols = [c for c in shown if w in flags[c]]
                every = cols == shown or cols == [c for c in shown if c in _MEASURED]  # the whole row
                which = "" if every else " (" + ", ".join(name(c) for c in cols) + ")"
                out.append(f"UNRELIABLE {r['devices']} device(s){which}: {w}")
        if not self.reliable:
            how = "greyed" if words else "marked *"
            out.append(f"-> read no figure that is flagged ({how}): rerun on a quiet machine")
        if any("logical" in r["kind"] or "simulated" in r["kind"] for r in self.rows):
            out.append(
                "note: logical and simulated devices share one physical device; their speedup is overlap on "
                "shared hardware, not a multi-GPU speedup"
            )
        return out

    def _shown(self) -> tuple[list[str], list[list[str]], list[set[str]]]:
        """The columns and cells to show (a column with nothing in any row, all "-", is left out),
        and for each row the columns whose figure is flagged."""
        cells = [[_fmt(c, r.get(c), r) for c in COLUMNS] for r in self.rows]
        keep = [i for i, c in enumerate(COLUMNS) if c in ("devices", "reliable") or any(row[i] != "-" for row in cells)]
        flagged = [{c for c, why in _row_flags(r).items() if why} for r in self.rows]
        return [COLUMNS[i] for i in keep], [[row[i] for i in keep] for row in cells], flagged

    def table(self) -> str:
        """The rows as text no wider than 100 columns (transposed when they would be), a flagged
        figure marked `*`, then the notes."""
        columns, cells, flagged = self._shown()
        marked = [
            [f"{v}*" if c in bad and v != "-" else v for c, v in zip(columns, row)] for row, bad in zip(cells, flagged)
        ]
        return tables.text_table(columns, marked, self.notes())

    __str__ = table

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        """Narrower than the text, to fit a notebook's column: each epoch time carries its spread, and
        samples_per_s (the examples over epoch_s) is left to the text form. A flagged figure is
        greyed, alone: a row's other figures keep their colour when their own timings are clean."""
        columns, cells, flagged = self._shown()
        at = {c: i for i, c in enumerate(columns)}
        for row in cells if "spread" in at else ():
            row[at["epoch_s"]] = f"{row[at['epoch_s']]} {row[at['spread']]}".rstrip(" -")
        keep = [i for i, c in enumerate(columns) if c not in ("spread", "samples_per_s")]
        heads = ["epoch (s) ±spread" if c == "epoch_s" and "spread" in at else c for c in columns]
        return _html_table(
            [heads[i] for i in keep],
            [columns[i] for i in keep],
            [[row[i] for i in keep] for row in cells],
            flagged,
            self.notes(words=True),
        )

    def speedup_sentence(
        self, devices: int, vs_share: bool = False, name: str | None = None, baseline_name: str | None = None
    ) -> Any:
        """The table's speedup of `devices` over one device (every core; `vs_share`: one worker's
        share of the cores) as a sentence (kit.prose): the same per-repeat figure the table shows,
        their range and whether every repeat points one way, or, where the table flags that
        figure, no conclusion and why."""
        row = next(r for r in self.rows if r["devices"] == devices)
        column, key = ("speedup_vs_share", "share") if vs_share else ("speedup", 1)
        if row.get(column) is None or key not in self.timings:
            raise ValueError(f"speedup_sentence: no {column} for {devices} device(s) in this comparison")
        base = self.model.get("baseline", {})
        name = name or f"{devices} devices"
        if baseline_name is None:
            threads = base.get("share_threads") if vs_share else base.get("threads")
            baseline_name = f"one device on {threads} thread(s)" if vs_share else "one device (every core)"
        flagged = _row_flags(row)[column]
        if flagged:
            # the table's reasons, each timing's under its name ("a and b: machine busy"), then the
            # speedup's own (beyond the device count)
            own, ref = self.timings[devices], self.timings[key]
            named = [
                measure.Timing(n, t.seconds, t.number, t.load, t.extra_warnings)
                for n, t in ((name, own), (baseline_name, ref))
            ]
            timed = set(own.warnings) | {w for w in flagged if w.startswith("its baseline")}
            reasons = prose.flags(named) + [w for w in flagged if w not in timed]
            return prose.no_conclusion(reasons or flagged)
        ratios = row["speedups_vs_share" if vs_share else "speedups"]
        lo, hi, median = min(ratios), max(ratios), row[column]
        header = tables.header(column)
        if lo > 1:
            way = f"in every repeat {name} took the shorter epoch"
        elif hi < 1:
            way = f"in every repeat {name} took the longer epoch"
        else:
            way = "the ratios fall on both sides of 1: no direction, paired by repeat or not"
        spreads = " and ".join(measure.format_spread(self.timings[k].spread) for k in (key, devices))
        efficiency = "" if vs_share else f", efficiency {row['efficiency']:.2f}"
        return prose.sentence(
            f"Paired by repeat (the epoch of **{baseline_name}** divided by that of **{name}** in the same "
            f"repeat), the {header} ranged from {lo:.2f}x to {hi:.2f}x over {len(ratios)} repeats; its median, "
            f"{median:.2f}x, is the table's {header}{efficiency}. So {way} (the two epoch times' spreads: "
            f"{spreads})."
        )

    def model_table(self) -> tables.Table:
        """Every input of the scaling model, measured or given, in words: the predicted speedup
        (`predicted_speedup`) can be recomputed from this table alone."""
        return tables.Table(
            ["scaling model input", "value"],
            _model_rows(self.model),
            text_columns=["scaling model input"],
        )

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
        # the plotted figure is the speedup over every core: its own flag, as the table greys it
        bad = [r for r in self.rows if _row_flags(r).get("speedup")]
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


# the figures a flag can fall on: the epoch time (with its spread and samples/s), and the ratios
_FLAGGED_COLUMNS = ["epoch_s", "speedup", "speedup_vs_share", "efficiency", "predicted_speedup"]
_MEASURED = _FLAGGED_COLUMNS[:-1]  # the prediction is a model's figure, not a timing
_FOLLOWS = {"spread": "epoch_s", "samples_per_s": "epoch_s"}


def _spread_words(base: dict[str, Any], key: str) -> str:
    return f" ({measure.format_spread(base[key])})" if base.get(key) is not None else ""


def _row_flags(row: dict[str, Any]) -> dict[str, list[str]]:
    """Which figures of a row each warning flags. A row built without per-figure flags (by hand)
    has its warnings fall on every figure it holds."""
    if "flags" in row:
        flags = {c: why for c, why in row["flags"].items() if row.get(c) is not None}
    else:
        flags = {c: list(row.get("warnings", [])) for c in _FLAGGED_COLUMNS if row.get(c) is not None}
    for col, source in _FOLLOWS.items():
        if source in flags and row.get(col) is not None:
            flags[col] = flags[source]
    return flags


def _html_table(
    heads: list[str], keys: list[str], rows: list[list[str]], flagged: list[set[str]], notes: list[str]
) -> str:
    """kit.tables.html_table with a flag per figure: a flagged cell greyed alone (not its whole
    row), the `reliable` cell a badge unless it says yes."""
    at = dict(zip(keys, heads))
    grey = [{at[k] for k in bad if k in at} for bad in flagged]
    return tables.html_table(heads, rows, notes, flag_column=at.get("reliable"), text_columns=["kind"], grey=grey)


def _fmt(col: str, v: Any, row: dict[str, Any] | None = None) -> str:
    if col == "spread" and isinstance(v, float):
        return measure.format_spread(v)
    if col == "reliable":
        if v or row is None:
            return "yes" if v else "NO"
        # NO where every measured figure is flagged, partly where some figure's own timings are clean
        flags = [bool(why) for c, why in _row_flags(row).items() if c in _MEASURED]
        return "partly" if any(flags) and not all(flags) else "NO"
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
    job: Job, counts: list[int] | tuple[int, ...] = (1, 2), progress: Callable[[], Any] | None = None
) -> Comparison:
    """`job` trained on each of `counts` devices (1 always), measured interleaved; `progress()`
    is called after every epoch trained while measuring (warm-up, autorange and timed repeats).
    In three rooms: the scaling model's inputs (`_scaling_inputs`), the interleaved epochs
    (`_timed_epochs`), and one row per device count (`_device_row`)."""
    if not counts or any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"compare_devices(counts={counts!r}): positive integers")
    counts = sorted(set(counts) | {1})  # the baseline always runs
    cores = os.cpu_count() or 1
    on_cpu = default_device().kind == "cpu"
    share = max(1, cores // max(counts))
    result = Comparison()
    result.model = _scaling_inputs(job)
    timings, epochs = _timed_epochs(job, counts, share if on_cpu and share < cores else None, progress)
    result.timings = timings
    base = timings[1].median
    base_share = timings["share"].median if "share" in timings else base
    result.model["baseline"] = {
        "threads": cores if on_cpu else None,
        "epoch_s": base,
        "spread": timings[1].spread,
        "share_threads": share if "share" in timings else cores,
        "share_epoch_s": base_share,
        "share_spread": timings["share" if "share" in timings else 1].spread,
    }
    result.model["epochs_per_repeat"] = timings[1].number
    result.model["repeats"] = job.epochs
    result.model["load"] = timings[1].load
    for n in counts:
        kind = epochs["kinds"][n]
        physical = "physical" in kind
        if n > 1:
            parallel = physical or (on_cpu and n <= cores)  # side by side: own devices, or a core each
            step_n = result.model["step_s_one_device"] if not on_cpu else _step_seconds(job, max(1, cores // n))
            result.model["step_s_per_worker"][n] = step_n
            result.model["compute_split"][n] = parallel
        row = _device_row(job, n, timings, epochs, result.model)
        result.rows.append(
            assess_row(
                row,
                timings[n].warnings,
                shared=not physical and on_cpu,
                cores=cores,
                baseline=_baseline_warnings(timings, 1) if n > 1 else [],
                share_baseline=_baseline_warnings(timings, "share") if n > 1 else [],
            )
        )
    return result


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
    job: Job, counts: list[int], share: int | None, progress: Callable[[], Any] | None
) -> tuple[dict[Any, measure.Timing], dict[str, Any]]:
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
    job: Job, n: int, timings: dict[Any, measure.Timing], epochs: dict[str, Any], model: dict[str, Any]
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


# the scaling model's inputs (and the run's shape) as `Comparison.model_table` words them
MODEL_WORDS = {
    "params": "parameters P",
    "bytes_per_value": "bytes per parameter b",
    "buffers_averaged": "buffers averaged k (parameters, plus updater state)",
    "batches_per_epoch": "batches per epoch B",
    "averaging_frequency": "averaging frequency F",
    "bandwidth_GBps": "copy bandwidth (GB/s)",
    "step_s_one_device": "one training step on one device, every core (s)",
    "epochs_per_repeat": "epochs per timed repeat",
    "repeats": "timed repeats",
    "load": "CPU taken by other processes (one-device runs)",
}


def _model_rows(model: dict[str, Any]) -> list[list[str]]:
    def value(k: str, v: Any) -> str:
        if k == "load":  # other processes' share of the CPU while the one-device runs were timed
            return measure.format_load(v)
        return f"{v:.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)

    rows = []
    for k, v in model.items():
        if k in ("baseline", "compute_split"):
            continue
        if k == "step_s_per_worker":
            for n, step in v.items():
                split = model["compute_split"][n]
                words = (
                    f"one training step for {n} workers, each on its share of the compute (s)"
                    if split
                    else f"one training step for {n} workers sharing one device's compute (s)"
                )
                rows.append([words, value(k, step)])
                rows.append([f"compute divided by N for {n} workers", "yes" if split else "no"])
            continue
        rows.append([MODEL_WORDS.get(k, k.replace("_", " ")), value(k, v)])
    return rows


def _baseline_warnings(timings: dict[Any, measure.Timing], key: Any = 1) -> list[str]:
    """A speedup is a ratio to its baseline (`key`: 1, every core; "share", one worker's share): a
    flagged baseline flags every speedup measured against it (the row's own timing may be clean,
    that speedup is not), and only that speedup."""
    if key in timings and timings[key].warnings:
        return [f"its baseline ({_BASELINES[key]}) was flagged: {'; '.join(timings[key].warnings)}"]
    return []


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
