"""`python -m kit bench spark`'s side-by-side: kit's Spark training beside PySpark's TorchDistributor.

    python -m kit bench spark            # Fashion-MNIST (10,000 examples) if it is on disk, 3 epochs
    python -m kit bench spark --quick    # 1,024 examples, 1 epoch: a smoke run (tests)
    python -m kit bench spark --standalone   # alone, on a standalone cluster of 2 one-core workers, 10 epochs

One job for every system: an MLP 784-256-10, Adam(1e-3), global batch 32 (two workers of 16, or
one process of 32), the same examples in the same order, nothing downloaded (Fashion-MNIST
where `kit.data.find_fashion_mnist` finds it, else a synthetic set of the same shape, said in
the result). The systems: kit's gang all-reducing gradients every step (DDP's semantics), kit's
gang averaging every 5 steps (DL4J's, updater state kept), kit's rounds (one Spark job every 5
steps), PyTorch DDP through `pyspark.ml.torch.distributor.TorchDistributor` (when torch, pandas
and pyarrow import; said when not), and each system's own single process (`Network.fit`, a
plain PyTorch loop).

Each system keeps its parameters four times an epoch with the wall-clock time and the global steps
done, scored on the test set afterwards (scoring costs no system time). Per global step: the time
between the first and last kept points; sync overhead: that minus the system's own single
process's; time to the target: from the call to the first kept point scoring >= TARGET. Other
processes' CPU share while a run ran flags its timings (kit.measure's rule); `seeds` runs it all
once a seed (`over_seeds`), and a step's spread over them flags too. Chapter 7 runs the same
code on its own rows (CHAPTER_SYSTEMS); kit.bench.spark_chapter turns that into its table and words.
"""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from kit.data import ArrayIterator, DataSet
from kit.data.datasets import find_fashion_mnist, load_fashion_mnist
from kit.measurement.goals import NO_VERDICT, flagged_figure, goal_verdict, median_interval
from kit.measurement.load import LOAD_LIMIT, LoadReading, format_load, machine_load
from kit.measurement.measure import SPREAD_LIMIT, format_spread
from kit.nn import Adam, mlp
from kit.spark import GangFallbackWarning, ParameterAveragingTrainingMaster, SparkNetwork, to_rdd
from kit.training.listeners import TrainingListener

__all__ = ["BENCH_SYSTEMS", "CHAPTER_SYSTEMS", "TARGET", "peers_table", "timing_flag"]

TARGET = 0.82
LR = 1e-3
PER_WORKER = 16
FREQUENCY = 5
SINGLE_ROW = "kit Network.fit (one process)"
DEFAULT_ROW = "kit defaults, ParameterAveragingTrainingMaster(16, num_workers=2)"
SNAPSHOTS = 4  # parameters kept this many times an epoch (time to the target to a quarter epoch)


def marks(steps: int) -> set[int]:
    """The steps of an epoch after which the parameters are kept (the last one always)."""
    return {-(-steps * j // SNAPSHOTS) for j in range(1, SNAPSHOTS + 1)}


def job_data(quick: bool, size: tuple[int, int] | None = None) -> tuple[DataSet, DataSet, str]:
    """(train, test, what): Fashion-MNIST's first examples, flattened, or a synthetic set like it;
    `size` (train, test) replaces the bench's sizes."""
    n, m = size or ((1024, 512) if quick else (10_000, 2_000))
    if find_fashion_mnist() is not None:
        train, test = load_fashion_mnist(limit=max(n, m))
        flat = lambda d, k: DataSet(d.features.numpy()[:k].reshape(k, -1), d.labels.numpy()[:k], num_classes=10)  # noqa: E731
        return flat(train, n), flat(test, m), f"Fashion-MNIST ({n} train, {m} test examples, on disk)"
    rng = np.random.default_rng(0)
    centres = rng.random((10, 784), dtype=np.float32)
    make = lambda k: (lambda y: (np.clip(centres[y] + rng.normal(0, 0.9, (k, 784)), 0, 1).astype(np.float32), y))(  # noqa: E731
        rng.integers(0, 10, k)
    )
    (xa, ya), (xb, yb) = make(n), make(m)
    return DataSet(xa, ya, num_classes=10), DataSet(xb, yb, num_classes=10), f"synthetic ({n} train, {m} test)"


def _classes(ds: DataSet) -> np.ndarray:
    """The class index of each example (a DataSet holds one-hot rows)."""
    labels = ds.labels.numpy()
    return (labels.argmax(axis=1) if labels.ndim == 2 else labels).astype(np.int64)


def _kit_net(seed: int = 0) -> Any:
    return mlp(784, hidden=(256,), n_out=10, updater=Adam(LR), seed=seed)


def _kit_right(flat: np.ndarray, test: DataSet) -> np.ndarray:
    """One bool per test example: whether kit's MLP with these parameters classifies it right."""
    net = _kit_net()
    net.set_params(flat)
    return np.argmax(net.output(test.features.numpy()).numpy(), axis=1) == _classes(test)


def kit_single(train: DataSet, epochs: int, steps: int, seed: int = 0) -> dict[str, Any]:
    net = _kit_net(seed)
    keeper = _Keeper(net, steps, 1)
    t0 = time.time()
    net.fit(ArrayIterator(train, 2 * PER_WORKER), epochs=epochs, listeners=[keeper])
    return {"t0": t0, "end": time.time(), "snapshots": keeper.snaps}


class _Keeper(TrainingListener):
    """Keeps (time, global steps done, parameters) at the epoch's marks; a call is `per_call` global steps."""

    def __init__(self, net: Any, steps: int, per_call: int) -> None:
        self.net, self.steps, self.per_call, self.snaps, self.calls = net, steps, per_call, [], 0
        self.calls_per_epoch = -(-steps // per_call)

    def iteration_done(self, model: Any, iteration: int, epoch: int, **info: Any) -> None:
        if info.get("worker", 0) != 0:  # a Spark round calls once per worker
            return
        self.calls += 1
        epochs, k = divmod(self.calls - 1, self.calls_per_epoch)
        done = min((k + 1) * self.per_call, self.steps)
        if done in marks(self.steps):
            self.snaps.append((time.time(), epochs * self.steps + done, self.net.params().numpy().copy()))


def kit_spark(sc: Any, rdd: Any, epochs: int, steps: int, seed: int = 0, **options: Any) -> dict[str, Any]:
    """A SparkNetwork fit of two workers; options pick the gang's exchange or the rounds, and the
    master's own defaults stand for what options do not give (averaging_frequency included)."""
    if options.get("exchange") == "gradients":
        options = {"averaging_frequency": 1, **options}
    tm = ParameterAveragingTrainingMaster(PER_WORKER, num_workers=2, collect_training_stats=True, **options)
    freq = tm.averaging_frequency
    rounds = -(-steps // freq)
    tm.gang_snapshots = SNAPSHOTS
    spark = SparkNetwork(sc, _kit_net(seed), tm)
    # a listener makes execution="auto" fall back to rounds: kept only where the rounds are asked for
    listeners = [_Keeper(spark.network, steps, freq)] if tm.execution == "rounds" else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GangFallbackWarning)
        t0 = time.time()
        spark.fit(rdd, epochs=epochs, listeners=listeners)
        end = time.time()
    setup = spark.get_training_stats().setup
    ran = setup.get("execution", "rounds")
    if listeners:
        snaps = listeners[0].snaps
    elif ran == "gang":  # the gang's (time, rounds done, parameters) in global steps
        at = lambda r: (r - 1) // rounds * steps + min(((r - 1) % rounds + 1) * freq, steps)  # noqa: E731
        snaps = [(t, at(r), p) for t, r, p in getattr(spark, "gang_snapshots", [])]
    else:  # fell back to rounds without a listener: the end of the fit only
        snaps = [(end, epochs * steps, spark.network.params().numpy().copy())]
    fallback = [str(w.message) for w in caught if issubclass(w.category, GangFallbackWarning)]
    every = "every step" if freq == 1 else f"every {freq} steps"
    how = f"{ran}: {tm.exchange} {every}, updater {'kept' if tm.save_updater else 'restarted'}"
    return {"t0": t0, "end": end, "snapshots": snaps, "setup": setup, "ran_as": how, "fallback": fallback}


def _torch_model(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def torch_single(train: DataSet, epochs: int, steps: int, seed: int = 0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # one core, as each Spark worker has
    x, y = torch.from_numpy(train.features.numpy()), torch.from_numpy(_classes(train))
    model, t0, snaps = _torch_model(seed), time.time(), []
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    keep = marks(steps)
    for epoch in range(epochs):
        for k, i in enumerate(range(0, len(x), 2 * PER_WORKER)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i : i + 2 * PER_WORKER]), y[i : i + 2 * PER_WORKER]).backward()
            opt.step()
            if k + 1 in keep:
                snaps.append(
                    (time.time(), epoch * steps + k + 1, [p.detach().numpy().copy() for p in model.parameters()])
                )
    return {"t0": t0, "end": time.time(), "snapshots": snaps}


def ddp_train(x: np.ndarray, y: np.ndarray, epochs: int, seed: int = 0) -> list[Any] | None:
    """TorchDistributor's function: PyTorch DDP over Gloo, each rank every other mini-batch of 16."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = DataLoader(data, batch_size=PER_WORKER, sampler=DistributedSampler(data, shuffle=False))
    model = DistributedDataParallel(_torch_model(seed))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    snaps, steps = [], len(loader)
    keep = {-(-steps * j // SNAPSHOTS) for j in range(1, SNAPSHOTS + 1)}
    for epoch in range(epochs):
        for k, (xb, yb) in enumerate(loader):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            if k + 1 in keep and dist.get_rank() == 0:
                params = [p.detach().numpy().copy() for p in model.module.parameters()]
                snaps.append((time.time(), epoch * steps + k + 1, params))
    dist.destroy_process_group()
    return snaps if snaps else None


def gang_split(setup: dict[str, Any]) -> dict[str, float]:
    """A gang's step split by its own stats (the slowest worker's): the ms a step waited in the
    collective, and the rest of the step (the network's own work and kit's around it)."""
    gang = setup.get("gang")
    if not gang or not gang.get("steps"):
        return {}
    sync = gang["sync_ms_per_step"]
    return {"gang_sync_ms": sync, "gang_rest_ms": gang["train_ms"] / gang["steps"] - sync}


def torch_missing_for_distributor() -> str | None:
    """Why TorchDistributor cannot run in this Python, in words, or None."""
    for name in ("torch", "pandas", "pyarrow", "pyspark.ml.torch.distributor"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return (
                f"{name} is not importable ({type(exc).__name__}: {exc}): TorchDistributor needs torch, pandas "
                "and pyarrow (pip install torch pandas pyarrow)"
            )
    return None


def torch_distributor(train: DataSet, epochs: int, seed: int = 0) -> dict[str, Any]:
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    SparkSession.builder.getOrCreate()  # TorchDistributor asks for the session on the running context
    t0 = time.time()
    snaps = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
        ddp_train, train.features.numpy(), _classes(train), epochs, seed
    )
    return {"t0": t0, "end": time.time(), "snapshots": snaps}


def _torch_right(arrays: list[np.ndarray], test: DataSet) -> np.ndarray:
    import torch

    model = _torch_model()
    with torch.no_grad():
        for p, a in zip(model.parameters(), arrays):
            p.copy_(torch.from_numpy(a))
        guess = model(torch.from_numpy(test.features.numpy())).argmax(1).numpy()
    return guess == _classes(test)


def _row(name: str, semantics: str, run: dict[str, Any], right: Any) -> dict[str, Any]:
    """One system's figures from its kept snapshots (scored now); "_right": the last one's per-example results."""
    snaps = run["snapshots"] or []
    scored = [(t, right(p)) for t, _, p in snaps]
    if len(snaps) >= 2:  # from the first kept point on: start-up and the first quarter epoch left out
        per_step = (snaps[-1][0] - snaps[0][0]) / (snaps[-1][1] - snaps[0][1])
    else:
        per_step = (snaps[0][0] - run["t0"]) / snaps[0][1] if snaps else float("nan")
    reached = [t - run["t0"] for t, ok in scored if ok.mean() >= TARGET]
    return {
        "system": name,
        "semantics": run.get("ran_as", semantics),
        "call_s": run["end"] - run["t0"],
        "execution": "-",
        "per_step_ms": per_step * 1e3,
        "overhead_ms": float("nan"),
        "to_target_s": reached[0] if reached else float("nan"),
        "final_accuracy": float(scored[-1][1].mean()) if scored else float("nan"),
        "_right": scored[-1][1] if scored else None,
        **({"fallback": run["fallback"]} if run.get("fallback") else {}),
    }


BENCH_SYSTEMS = (
    "kit gang, every step",
    "kit gang, every 5 steps",
    "kit rounds, every 5 steps",
    "kit averaging, defaults",
    "torch",
)
# the chapter's: kit's defaults, the same with the updater restarted (or kept), DDP's semantics, the peer
CHAPTER_SYSTEMS = ("kit averaging, defaults", "kit averaging, other save_updater", "kit gang, every step", "torch")


def kit_systems(names: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(row name, semantics, master options) for kit's rows among `names`; "other save_updater" is
    the defaults with save_updater flipped, named after the setting it ran with."""
    default_kept = ParameterAveragingTrainingMaster().save_updater
    direct, every5 = {"rdd_training_approach": "DIRECT"}, {"averaging_frequency": FREQUENCY}
    ddp = {**direct, "execution": "gang", "exchange": "gradients"}
    known = {
        "kit gang, every step": ("DDP: gradients all-reduced", ddp),
        "kit gang, every 5 steps": ("DL4J: averaging, updater kept", {**direct, "execution": "gang", **every5}),
        "kit rounds, every 5 steps": ("DL4J: averaging, updater kept", {**direct, "execution": "rounds", **every5}),
        "kit averaging, defaults": ("the master's defaults", {}),  # named DEFAULT_ROW
        "kit averaging, other save_updater": ("", {"save_updater": not default_kept}),
    }
    rows = []
    for name in names:
        if name in known:
            semantics, options = known[name]
            if "save_updater" in options:
                name = f"kit averaging, save_updater={options['save_updater']}"
            elif name == "kit averaging, defaults":
                name = DEFAULT_ROW
            rows.append((name, semantics, options))
    return rows


def peers_table(
    sc: Any,
    quick: bool,
    epochs: int | None = None,
    systems: Sequence[str] = BENCH_SYSTEMS,
    size: tuple[int, int] | None = None,
    seeds: int = 1,
) -> dict[str, Any]:
    """Every system on the job, one after another, and the goals read from their rows (epochs: 1 quick,
    else 3). `systems`: kit's rows by name (kit_systems) and "torch" for PyTorch's two; `size`: (train,
    test) examples; `seeds`: the whole side-by-side run once a seed (0, 1, ...) and the rows joined
    (`over_seeds`). "right": each row's per-example results on the test set, the first seed's (not
    JSON: pop it to save)."""
    train, test, what = job_data(quick, size)
    epochs = epochs or (1 if quick else 3)
    steps = -(-train.num_examples // (2 * PER_WORKER))
    load_before = os.getloadavg()[0]
    # other processes' CPU share while the systems ran: Spark's JVMs and Python workers, TorchDistributor's
    # ranks (and a standalone cluster this process started) are this run's own work, not load
    runs = []
    with machine_load(children_are_ours=True) as load:
        for seed in range(seeds):
            rows, skipped, torch_why = _run_systems(sc, train, test, epochs, steps, systems, seed)
            runs.append(rows)
    right = {r["system"]: r.pop("_right") for r in runs[0]}
    for rows in runs[1:]:
        for r in rows:
            r.pop("_right")
    rows = over_seeds(runs) if seeds > 1 else runs[0]
    return {
        "data": what,
        "epochs": epochs,
        "seeds": seeds,
        "steps_per_epoch": steps,
        "test_examples": test.num_examples,
        "columns": [
            "system",
            "semantics",
            "execution",
            "call_s",
            "per_step_ms",
            "overhead_ms",
            "to_target_s",
            "final_accuracy",
        ],
        "rows": rows,
        "torch_distributor": torch_why or "ran",
        "goals": goals(rows, load),
        "machine_load_by_others": load.others,
        "machine_load_own": load.own,
        "load_average": [load_before, os.getloadavg()[0]],  # for the record: the run's own processes count in it
        "right": right,
        "skipped": skipped,
    }


TIMINGS = ("call_s", "per_step_ms", "overhead_ms", "to_target_s")


def over_seeds(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row a system from several seeds' runs: each timing the median of the seeds' with its
    spread (half the range over the median, kit.measure's), the final accuracy their mean; each
    seed's figures kept under "per_seed" (the goals pair them). Systems in the first run's order.

        >>> def row(overhead, accuracy):
        ...     return {"system": "s", "call_s": 1.0, "per_step_ms": 2.0, "overhead_ms": overhead,
        ...             "to_target_s": float("nan"), "final_accuracy": accuracy}
        >>> r = over_seeds([[row(1.0, 0.8)], [row(3.0, 0.9)], [row(2.0, 0.85)]])[0]
        >>> r["overhead_ms"], r["spread"]["overhead_ms"], round(r["final_accuracy"], 3)
        (2.0, 0.5, 0.85)
        >>> r["to_target_s"], r["per_seed"]["final_accuracy"]   # NaN where any seed never reached it
        (nan, [0.8, 0.9, 0.85])
    """
    out = []
    for first in runs[0]:
        rows = [r for run in runs for r in run if r["system"] == first["system"]]
        row = {**first, "per_seed": {c: [r[c] for r in rows] for c in (*TIMINGS, "final_accuracy")}, "spread": {}}
        for c in TIMINGS:
            values = row["per_seed"][c]
            median = float(np.median(values)) if all(v == v for v in values) else float("nan")
            row[c] = median
            row["spread"][c] = (max(values) - min(values)) / 2 / abs(median) if median == median and median else 0.0
        row["final_accuracy"] = float(np.mean(row["per_seed"]["final_accuracy"]))
        out.append(row)
    return out


# Student's t, two-sided 95 %, by degrees of freedom 1..30 (past 30: 1.96)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T975 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_gap_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Welch's 95 % interval of mean(a) - mean(b), two samples of at least 2 (degrees of freedom
    rounded down, as the conservative side).

        >>> [round(x, 4) for x in mean_gap_interval([0.860, 0.861, 0.862], [0.855, 0.856, 0.857])]
        [0.0027, 0.0073]
    """
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    gap = float(np.mean(a) - np.mean(b))
    if va + vb == 0:
        return gap, gap
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = (T975[max(1, int(df)) - 1] if df < 31 else 1.96) * float(np.sqrt(va + vb))
    return gap - half, gap + half


def _run_systems(
    sc: Any, train: DataSet, test: DataSet, epochs: int, steps: int, systems: Sequence[str], seed: int = 0
) -> tuple[list[dict[str, Any]], dict[str, str], str | None]:
    """Every system's row (with "_right"), the kit rows that could not run and why, and why
    TorchDistributor did not (None: it ran)."""
    rdd = to_rdd(sc, train, num_slices=2).cache()
    rdd.count()
    kit_right = lambda p: _kit_right(p, test)  # noqa: E731
    rows = [_row(SINGLE_ROW, "-", kit_single(train, epochs, steps, seed), kit_right)]
    skipped = {}
    for name, semantics, options in kit_systems(systems):
        try:
            run = kit_spark(sc, rdd, epochs, steps, seed, **options)
        except ValueError as exc:  # execution="gang" where no gang can run: said, not hidden
            skipped[name] = str(exc)
            continue
        rows.append(_row(name, semantics, run, kit_right))
        rows[-1]["execution"] = run["setup"].get("execution", "?")
        rows[-1].update(gang_split(run["setup"]))
        rows[-1]["overhead_ms"] = rows[-1]["per_step_ms"] - rows[0]["per_step_ms"]
    rdd.unpersist()
    torch_why = torch_missing_for_distributor() if "torch" in systems else "not asked for"
    if torch_why is None:
        torch_right = lambda p: _torch_right(p, test)  # noqa: E731
        rows.append(_row("PyTorch (one process)", "-", torch_single(train, epochs, steps, seed), torch_right))
        rows.append(
            _row(
                "TorchDistributor (DDP)",
                "DDP: gradients all-reduced",
                torch_distributor(train, epochs, seed),
                torch_right,
            )
        )
        rows[-1]["overhead_ms"] = rows[-1]["per_step_ms"] - rows[-2]["per_step_ms"]
    return rows, skipped, torch_why


def timing_flag(load: LoadReading | None) -> str:
    """Why one run's timings get no verdict from the machine ("" where they can): kit.measure's
    rule, other processes' share of the CPU over LOAD_LIMIT while the run ran; the run's own
    descendants (Spark's, TorchDistributor's) are its work, not load (machine_load(children_are_ours=True)).

        >>> timing_flag(LoadReading(cores=2, others=0.05, own=0.95))   # its own two workers busy
        ''
        >>> timing_flag(LoadReading(cores=2, others=0.5, own=0.5))
        'no verdict: kit.measure flagged the measurement (other processes used 50% of the CPU)'
    """
    if load is None or load.others <= LOAD_LIMIT:
        return ""
    return f"{NO_VERDICT} (other processes used {format_load(load.others)} of the CPU)"


SLOWED = "no verdict: a single-process baseline ran slower per step than its two workers"


def goals(rows: list[dict[str, Any]], load: LoadReading | None = None) -> dict[str, str]:
    """The side-by-side's goals from the rows, by kit's one rule (kit.measurement.goals.goal_verdict):
    kit's gang every step (DDP's semantics, as the overhead goal asks) against TorchDistributor, and
    kit's defaults against it too (what a Spark user gets without choosing). A timing goal has no
    verdict, its figures flagged, where other processes were busy while it ran (`timing_flag` on
    `load`), or a system's own single process came out slower per step than its two workers (a
    negative sync overhead: the baseline was slowed). Accuracies are seeded, so they always get one.

        >>> def row(system, overhead, to_target, accuracy):
        ...     return {"system": system, "overhead_ms": overhead, "to_target_s": to_target, "final_accuracy": accuracy}
        >>> g = goals([row("kit gang, every step", 2.0, 9.0, 0.80), row("TorchDistributor (DDP)", 2.6, 8.0, 0.81)])
        >>> list(g.values())
        ['met (2 vs 2.6)', 'NOT met (9 vs 8)', 'NOT met (0.8 vs 0.81)']
        >>> g = goals([row("kit gang, every step", -30.0, 9.0, 0.81), row("TorchDistributor (DDP)", 2.6, 8.0, 0.81)])
        >>> list(g.values())[0]
        'no verdict: a single-process baseline ran slower per step than its two workers (-30 vs 2.6)'
        >>> list(g.values())[2]
        'met (0.81 vs 0.81)'
    """
    by = {r["system"]: r for r in rows}
    ours, peer = by.get("kit gang, every step"), by.get("TorchDistributor (DDP)")
    lines = default_goal(by)
    if ours is None or peer is None:
        missing = "TorchDistributor" if peer is None else "kit gang, every step"
        return {"all": f"not compared: {missing} did not run", **lines}
    loaded = timing_flag(load)
    defaults = by.get(DEFAULT_ROW)

    def timing_why(column: str, mine: dict[str, Any]) -> str:
        if loaded:
            return loaded
        # the spread rule where the seeds repeat the same work (a step's time); the time to the target
        # also moves with each seed's learning curve (and the app's first, cold fit): its pairs decide
        wide = (
            []
            if column == "to_target_s"
            else [
                f"{r['system']}'s {format_spread(r['spread'][column])}"
                for r in (mine, peer)
                if r.get("spread", {}).get(column, 0) > SPREAD_LIMIT
            ]
        )
        if wide:
            return f"{NO_VERDICT} (spread over the seeds wider than ±{SPREAD_LIMIT:.0%}: {', '.join(wide)})"
        if min(mine["overhead_ms"], peer["overhead_ms"]) < 0:  # the machine slowed a baseline: no timing is read
            return SLOWED
        return ""

    def said(op: str, column: str, mine: dict[str, Any], margin: float = 0.0) -> str:
        a, b = mine[column], peer[column]
        figures = f"({a:.4g} vs {b:.4g})"
        if a != a and b != b:  # both NaN: neither reached the target in this run
            return f"not reached by either in this run (raise the epochs): {figures}"
        why = timing_why(column, mine) if column in TIMINGS else ""
        if why:
            flagged = why != SLOWED
            return f"{why} ({flagged_figure(f'{a:.4g}', flagged)} vs {flagged_figure(f'{b:.4g}', flagged)})"
        if b != b or a != a:  # one reached the target, the other did not
            return f"{'met' if a == a else 'NOT met'} {figures}"
        if "per_seed" not in mine or "per_seed" not in peer:
            return f"{goal_verdict(a, op, b - margin)} {figures}"
        if column == "final_accuracy":  # seed s is a different draw in each framework: the means' gap, Welch's 95 %
            lo, hi = mean_gap_interval(mine["per_seed"][column], peer["per_seed"][column])
            verdict = goal_verdict(a - b, op, -margin, (lo, hi))
            return f"{verdict} {figures[:-1]}; gap {a - b:+.3g}, 95% interval {lo:+.3g} to {hi:+.3g})"
        # a timing: seed s's two runs ran one after the other, so they pair; the pairs' gaps' median,
        # within kit.measure's distribution-free interval (median_interval), must clear the limit
        gaps = [x - y for x, y in zip(mine["per_seed"][column], peer["per_seed"][column])]
        lo, hi, coverage = median_interval(gaps)
        verdict = goal_verdict(a - b, op, -margin, (lo, hi))
        listed = ", ".join(f"{g:+.3g}" for g in gaps)
        return (
            f"{verdict} {figures[:-1]}; per seed {listed}; their median within {lo:+.3g} to {hi:+.3g}, {coverage:.0%})"
        )

    for prefix, mine in (("", ours), ("defaults' ", defaults)):
        if mine is not None:
            lines[f"{prefix}overhead_per_step_ms <= TorchDistributor's"] = said("<=", "overhead_ms", mine)
            lines[f"{prefix}time_to_{TARGET}_s <= TorchDistributor's"] = said("<=", "to_target_s", mine)
            lines[f"{prefix}final_accuracy >= TorchDistributor's - 0.005"] = said(">=", "final_accuracy", mine, 0.005)
    return lines


def default_goal(by: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The issue's third goal, where both rows ran: kit's default configuration ends within 0.5
    points of Network.fit (seeded accuracies: always a verdict).

    >>> default_goal({DEFAULT_ROW: {"final_accuracy": 0.845}, SINGLE_ROW: {"final_accuracy": 0.847}})
    {"defaults' final_accuracy >= Network.fit's - 0.005": 'met (0.845 vs 0.847)'}
    >>> default_goal({SINGLE_ROW: {"final_accuracy": 0.847}})
    {}
    """
    ours, single = by.get(DEFAULT_ROW), by.get(SINGLE_ROW)
    if ours is None or single is None:
        return {}
    a, b = ours["final_accuracy"], single["final_accuracy"]
    return {
        "defaults' final_accuracy >= Network.fit's - 0.005": f"{goal_verdict(a, '>=', b - 0.005)} ({a:.4g} vs {b:.4g})"
    }
