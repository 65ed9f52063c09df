"""`python -m kit bench spark`: bytes and time a Spark round costs, beside Network.fit, on one machine;
and kit's gang and rounds beside TorchDistributor on one job (kit.bench.spark_peers, in the summary and
under "peers" in the JSON).

    python -m kit bench spark            # 3 repeats, after a warm-up call each
    python -m kit bench spark --quick    # 2 repeats, no warm-up, fewer rounds: a smoke run (tests), every row flagged
    python -m kit bench spark --standalone --epochs 10   # the side-by-side alone, on a standalone cluster
    python -m kit bench spark --quick --models mlp --examples 256   # the MLP's rounds, a small side-by-side

For an MLP (19,210 parameters) and ResNet-18 (kit.nn.zoo.resnet18, 11,183,626 parameters),
parameter averaging (rdd_training_approach DIRECT, averaging every `frequency` mini-batches)
with 1, 2 and 4 local workers at DL4J's aggregation_depth 2, and 4 workers at depth 1:

- bytes a round, from the fit's training stats (broadcast, and what the driver received after the
  tree), each beside what the parameter count gives (`expected_driver_bytes`);
- time a round (a whole fit's wall time over its rounds) and the fit's ratio to Network.fit on the
  same mini-batches, timed side by side by kit.measure (Spark's JVM and Python workers, children of
  this process, count as this benchmark's own work, not as load).

Honest limits: `local[2]` runs every executor on this machine's cores (4 workers share 2), so
the times say what Spark's machinery costs, not what a cluster would gain. ResNet-18 is timed
on tiny inputs (1 x 8 x 8 images, 4 a mini-batch, a few rounds): its rounds cost what moving
11.2 M parameters costs, not what training on real images would.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from kit.bench.common import device_label
from kit.bench.spark_peers import BENCH_SYSTEMS, TARGET, peers_table
from kit.data import ArrayIterator, DataSet
from kit.measurement import measure
from kit.measurement.load import LOAD_LIMIT, format_load
from kit.nn import Network, Sgd, mlp
from kit.nn.zoo import resnet18
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, local_spark_context, to_rdd
from kit.spark.aggregation import fan_in
from kit.spark.standalone import private_namespaces_missing, standalone_cluster
from kit.spark.stats import SparkTrainingStats

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

__all__ = ["bench_spark", "expected_driver_bytes"]

VARIANTS = ((1, 2), (2, 2), (4, 2), (4, 1))  # (workers, aggregation_depth)
MODELS = ("mlp", "resnet18")  # the rounds table's (`--models` picks among them; kit.bench.SPARK_MODELS)


def expected_driver_bytes(workers: int, depth: int, params: int, itemsize: int = 4) -> tuple[int, int]:
    """(bytes, partial results) the driver receives in a round where every worker trained:
    groups of fan_in(workers, depth) neighbours merged until at most that many remain; a partial
    holding one worker is its state (`itemsize` bytes a parameter), a sum of more is float64.

    >>> expected_driver_bytes(4, 1, 1000), expected_driver_bytes(4, 2, 1000), expected_driver_bytes(8, 2, 1000)
    ((16000, 4), (16000, 2), (24000, 3))
    """
    f = fan_in(workers, depth)
    held = [1] * workers
    while len(held) > f:
        held = [sum(held[i : i + f]) for i in range(0, len(held), f)]
    return sum(params * (itemsize if h == 1 else 8) for h in held), len(held)


# A quick run skips the warm-up call (Spark's first job, first broadcast) to save a third of its time:
# its figures show that every row runs and what it moves, not what a round costs.
QUICK_WARNING = "quick run: no warm-up call and 2 repeats, a smoke run: no time a round is measured"


def bench_spark(
    quick: bool = False,
    standalone: bool = False,
    epochs: int | None = None,
    seeds: int = 1,
    models: tuple[str, ...] = MODELS,
    examples: int | None = None,
) -> dict[str, Any]:
    """The rounds' bytes and times and the side-by-side on local[2]; `standalone`: the side-by-side
    alone, on a standalone cluster (`standalone_peers`). `models`: the rounds table's, from MODELS;
    `examples`: the side-by-side's training examples (its test set half as many)."""
    if standalone:
        return standalone_peers(quick, epochs, seeds, examples)
    sc = local_spark_context(
        "local[2]", app_name="kit-bench", driver_memory="2g", conf={"spark.ui.showConsoleProgress": "false"}
    )
    try:
        return run_on(sc, quick, epochs, seeds, models, examples)
    finally:
        sc.stop()


def standalone_peers(
    quick: bool, epochs: int | None = None, seeds: int = 1, examples: int | None = None
) -> dict[str, Any]:
    """The side-by-side (peers_table: BENCH_SYSTEMS but the per-round fallback, which local[2]'s run
    times) on a standalone cluster started here, the
    issue's setting: a master and 2 one-core workers, each in a private mount namespace that hides
    this driver's TMPDIR (where unshare is not permitted: without, and the result says why); 10
    epochs (1 quick). The cluster's processes are this run's own work in the load reading."""
    why_shared = private_namespaces_missing()
    epochs = epochs or (1 if quick else 10)
    with standalone_cluster(workers=2, cores=1, memory="1g", private=why_shared is None) as cluster:
        with cluster.as_driver():
            conf = cluster.driver_conf(executor_memory="768m")
            sc = local_spark_context(cluster.url, app_name="kit-bench-standalone", driver_memory="2g", conf=conf)
            try:
                systems = tuple(name for name in BENCH_SYSTEMS if not name.startswith("kit rounds"))
                peers = peers_table(sc, quick, epochs=epochs, systems=systems, size=_size(examples), seeds=seeds)
                version = sc.version
            finally:
                sc.stop()
    peers.pop("right")
    where = "each in a private mount namespace" if why_shared is None else f"sharing the driver's disk: {why_shared}"
    return {
        "benchmark": "spark (standalone)",
        "device": f"{device_label()}; Spark {version} standalone, 2 workers of 1 core ({where})",
        "repeats": seeds,
        "columns": peers["columns"],
        "rows": peers["rows"],
        "summary": peer_lines(peers),
        "peers": peers,
    }


def _size(examples: int | None) -> tuple[int, int] | None:
    """The side-by-side's (train, test) examples for `--examples`; None: the bench's own."""
    return None if examples is None else (examples, examples // 2)


def _models(quick: bool, models: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
    rounds = 1 if quick else 2  # rounds of the 4-worker fit (1 worker: 4 times as many)
    specs = [
        {
            "key": "mlp",
            "model": "MLP 64-256-10",
            "make": lambda: mlp(64, hidden=(256,), n_out=10, updater=Sgd(0.05), seed=0),
            "shape": (64,),
            "batch": 32,
            "frequency": 5,
            "examples": 4 * 32 * 5 * (2 if quick else 4),
        },
        {
            "key": "resnet18",
            "model": "ResNet-18 (1x8x8 inputs)",
            "make": lambda: resnet18(num_classes=10, in_channels=1, size=8, updater=Sgd(0.01), seed=0),
            "shape": (1, 8, 8),
            "batch": 4,
            "frequency": 2,
            "examples": 4 * 4 * 2 * rounds,
        },
    ]
    return [spec for spec in specs if spec["key"] in models]


def run_on(
    sc: SparkContext,
    quick: bool,
    epochs: int | None = None,
    seeds: int = 1,
    models: tuple[str, ...] = MODELS,
    examples: int | None = None,
) -> dict[str, Any]:
    """The benchmark on a running SparkContext (the caller owns it)."""
    repeats = 2 if quick else 3
    rows: list[dict[str, Any]] = []
    overheads: dict[str, float] = {}
    warnings: set[str] = set()
    for spec in _models(quick, models):
        model_rows, overhead = _one_model(sc, spec, repeats, warmup=not quick)
        for row in model_rows:
            row_warnings = row.pop("_warnings") + ([QUICK_WARNING] if quick else [])
            warnings.update(row_warnings)
            row["reliable"] = "NO" if row_warnings else "yes"
        rows += model_rows
        overheads[spec["model"]] = overhead
    peers = peers_table(
        sc, quick, epochs=epochs, size=_size(examples), seeds=seeds
    )  # kit's gang and rounds beside TorchDistributor
    peers.pop("right")  # per-example results: the chapter's McNemar tests read them, the JSON does not
    cols = ["model", "params", "workers", "depth", "rounds", "round_ms", "spread", "vs_network_fit"]
    cols += ["broadcast_bytes", "driver_bytes", "formula_bytes", "partials", "formula_partials", "reliable"]
    return {
        "benchmark": "spark",
        "device": device_label() + f"; Spark {sc.version} {sc.master} (every executor on this machine)",
        "repeats": repeats,
        "columns": cols,
        "rows": rows,
        "summary": {
            **{f"spark_1_worker_overhead_ms_per_round[{m}]": v for m, v in overheads.items()},
            "bytes_counted": "nbytes of the arrays serialised (not pickle framing, closures or the JSON config)",
            "formula": "broadcast 4P; driver: 4P per lone worker's state, 8P per float64 sum (expected_driver_bytes)",
            "note": "local[2]: workers share 2 cores; ResNet-18 on tiny inputs (1x8x8, 4 a mini-batch, few rounds)",
            "warnings": "; ".join(sorted(warnings)) or "none",
            **peer_lines(peers),
        },
        "peers": peers,
    }


def peer_lines(peers: dict[str, Any]) -> dict[str, str]:
    """The side-by-side table as summary lines: one a system, then the goals."""
    lines = {"peers_job": f"{peers['data']}, {peers['epochs']} epoch(s), MLP 784-256-10, Adam, global batch 32"}
    for r in peers["rows"]:
        ran = f" ({r['execution']} ran)" if r.get("execution", "-") != "-" else ""
        split = (
            f" (gang: {r['gang_sync_ms']:.2f} ms a step in the collective, {r['gang_rest_ms']:.2f} ms the rest)"
            if "gang_sync_ms" in r
            else ""
        )
        lines[f"peer[{r['system']}]"] = (
            f"{r['semantics']}{ran}; call {r['call_s']:.1f} s, {r['per_step_ms']:.2f} ms a global step, sync "
            f"overhead {r['overhead_ms']:+.2f} ms a step{split}, to {TARGET} {r['to_target_s']:.1f} s, final "
            f"accuracy {r['final_accuracy']:.3f}"
        )
        if "per_seed" in r:
            spreads = ", ".join(f"{c} {measure.format_spread(v)}" for c, v in r["spread"].items())
            accuracies = ", ".join(f"{a:.4f}" for a in r["per_seed"]["final_accuracy"])
            lines[f"peer[{r['system']}]"] += f"; over the seeds: {spreads}; accuracies {accuracies}"
    lines["peers_torch_distributor"] = peers["torch_distributor"]
    lines.update({f"goal[{k}]": v for k, v in peers["goals"].items()})
    runs = (
        "one run each"
        if peers.get("seeds", 1) == 1
        else (
            f"{peers['seeds']} runs each, seeds 0-{peers['seeds'] - 1}: each timing the median, each accuracy the mean"
        )
    )
    lines["peers_note"] = (
        f"{runs}: other processes used {format_load(peers['machine_load_by_others'])} of the CPU while it "
        f"ran (flagged above {format_load(LOAD_LIMIT)}); load average {peers['load_average'][0]:.1f} before, "
        f"{peers['load_average'][1]:.1f} after, the run's own processes included"
    )
    return lines


def _one_model(
    sc: SparkContext, spec: dict[str, Any], repeats: int, warmup: bool
) -> tuple[list[dict[str, Any]], float]:
    """One model's rows (each Spark variant beside Network.fit) and Spark's overhead per 1-worker round."""
    n = spec["examples"]
    rng = np.random.default_rng(0)
    x, y = rng.random((n, *spec["shape"]), dtype=np.float32), rng.integers(0, 10, n)
    rdd = to_rdd(sc, (x, y)).cache()
    rdd.count()
    net = spec["make"]()  # built once per variant, outside the timing; each call fits on from where it is
    timings, stats = _time_variants(sc, spec, net, DataSet(x, y, num_classes=10), rdd, repeats, warmup)
    rdd.unpersist()
    base = timings["Network.fit"]
    rows = [_variant_row(spec, net.num_params, v, timings[_variant_name(v)], base, stats[v]) for v in VARIANTS]
    return rows, _round_overhead(spec, timings[_variant_name((1, 2))], base, stats[(1, 2)])


def _variant_name(variant: tuple[int, int]) -> str:
    """A Spark variant's name in the timings: its workers and aggregation depth."""
    return f"Spark, {variant[0]} worker(s), depth {variant[1]}"


def _spark_fit(
    sc: SparkContext, spec: dict[str, Any], rdd: RDD, variant: tuple[int, int], stats: dict
) -> Callable[[], None]:
    """A call that fits a fresh SparkNetwork of this variant on the RDD and keeps its training stats."""
    workers, depth = variant
    tm = ParameterAveragingTrainingMaster(
        spec["batch"],
        spec["frequency"],
        num_workers=workers,
        rdd_training_approach="DIRECT",
        aggregation_depth=depth,
        collect_training_stats=True,
        execution="rounds",  # the bench times rounds: one Spark job and one tree aggregation each
    )
    sn = SparkNetwork(sc, spec["make"](), tm)

    def run() -> None:
        sn.fit(rdd)
        stats[variant] = sn.get_training_stats()

    return run


def _time_variants(
    sc: SparkContext, spec: dict[str, Any], net: Network, data: DataSet, rdd: RDD, repeats: int, warmup: bool
) -> tuple[dict[str, measure.Timing], dict[tuple[int, int], Any]]:
    """Network.fit and every Spark variant timed interleaved (after a warm-up call each, unless
    `warmup` is False); the timings and Spark's stats."""
    stats: dict[tuple[int, int], Any] = {}

    def local() -> None:
        net.fit(ArrayIterator(data, spec["batch"]))

    fns = {"Network.fit": local, **{_variant_name(v): _spark_fit(sc, spec, rdd, v, stats) for v in VARIANTS}}
    with measure.machine_load(children_are_ours=True) as load:
        timings = measure.compare(fns, repeats=repeats, number=1, warmup=warmup)
    for t in timings.values():
        t.load = load.others
    return timings, stats


def _variant_row(
    spec: dict[str, Any],
    params: int,
    variant: tuple[int, int],
    t: measure.Timing,
    base: measure.Timing,
    s: SparkTrainingStats,
) -> dict[str, Any]:
    """One Spark variant's row: its time per round against Network.fit, and the bytes and partials it moved."""
    workers, depth = variant
    rounds = len(s.rounds)
    ratios = [a / b for a, b in zip(t.seconds, base.seconds)]
    bytes_, partials = expected_driver_bytes(workers, depth, params)
    return {
        "model": spec["model"],
        "params": params,
        "workers": workers,
        "depth": depth,
        "rounds": rounds,
        "round_ms": t.median / rounds * 1e3,
        "spread": t.spread,
        "vs_network_fit": statistics.median(ratios),
        "broadcast_bytes": int(statistics.median(r["broadcast_bytes"] for r in s.rounds)),
        "driver_bytes": int(statistics.median(r["driver_received_bytes"] for r in s.rounds)),
        "formula_bytes": bytes_,
        "partials": int(statistics.median(r["partials"] for r in s.rounds)),
        "formula_partials": partials,
        "reliable": "yes" if t.reliable and base.reliable else "NO",
        "_warnings": t.warnings + base.warnings,
    }


def _round_overhead(
    spec: dict[str, Any], one: measure.Timing, base: measure.Timing, stats: SparkTrainingStats
) -> float:
    """Spark's milliseconds per 1-worker round beyond what Network.fit spends on the round's mini-batches."""
    steps = -(-spec["examples"] // spec["batch"])
    rounds_one = len(stats.rounds)
    # a 1-worker round trains `freq` mini-batches: what Network.fit spends on them, subtracted
    overhead = [(a / rounds_one - b / steps * spec["frequency"]) * 1e3 for a, b in zip(one.seconds, base.seconds)]
    return statistics.median(overhead)
