"""Tree aggregation and bytes a round (issue 22 items 3 and 4): the driver receives at most
ceil(workers ** (1 / depth)) partial results, in worker order, the same bits at every depth;
the training stats count the bytes each way from the parameter count; SharedTrainingMaster
broadcasts the network's updater state only while a worker has none of its own."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.bench.spark import expected_driver_bytes
from kit.bench.spark_peers import DEFAULT_ROW
from kit.data import DataSet, load_digits
from kit.nn import Adam, Sgd, mlp
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, to_rdd
from kit.spark.aggregation import fan_in, tree_aggregate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:320], train.labels.numpy()[:320])


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
def test_the_driver_receives_at_most_the_fan_in_partials_each_holding_its_workers_in_order(sc, n, depth):
    """PySpark's own treeAggregate builds no level for 3 or 4 partitions at depth 2 (nor at 3),
    so its driver receives every partition's result; kit's tree bounds what the driver gets.
    (The functions are made here: cloudpickle sends them by value, the test module by name.)"""

    def _count(acc, x):  # seqOp: (contributions, the elements in order)
        count, seen = acc if acc is not None else (0, [])
        return count + 1, [*seen, x]

    def _merge(a, b):
        return a[0] + b[0], a[1] + b[1]

    rdd = sc.parallelize(range(n), n)
    (count, order), info = tree_aggregate(rdd, None, _count, _merge, depth)
    bound = math.ceil(round(n ** (1 / depth), 9))
    assert fan_in(n, depth) == bound
    assert info["partials"] <= bound and count == n
    assert order == list(range(n))  # merged in partition order, whatever order the shuffle delivered
    assert info["levels"] <= depth - 1  # levels on the executors; the driver's merge is the last
    if depth == 1:
        assert (info["partials"], info["levels"], info["tree_bytes"]) == (n, 0, 0)  # a plain aggregate


def _averaging(sc, data, workers, depth, dtype="float32", updater=None, approach="DIRECT"):
    net = mlp(64, hidden=(16,), n_out=10, updater=updater or Sgd(0.1), seed=0, dtype=dtype)
    tm = ParameterAveragingTrainingMaster(
        10,
        2,
        num_workers=workers,
        rdd_training_approach=approach,
        save_updater=updater is not None,
        aggregation_depth=depth,
        collect_training_stats=True,
        execution="rounds",  # the tree is the per-round path's (a gang's workers sum among themselves)
    )
    spark = SparkNetwork(sc, net, tm)
    spark.fit(to_rdd(sc, data))  # 320 examples: every worker trains 2 mini-batches of 10 in every round
    return net, spark.get_training_stats()


@pytest.mark.parametrize(
    ("workers", "depth", "dtype", "partials", "per_partial"),
    [
        (4, 1, "float32", 4, 4),  # every worker's float32 state
        (4, 2, "float32", 2, 8),  # two float64 sums of two: as many bytes, half the partials
        (4, 1, "float64", 4, 8),
        (4, 2, "float64", 2, 8),  # half the bytes
        (8, 1, "float32", 8, 4),
        (8, 2, "float32", 3, 8),  # sums of 3, 3 and 2: 24 P against 32 P
    ],
)
def test_bytes_a_round_follow_from_the_parameter_count(sc, digits, workers, depth, dtype, partials, per_partial):
    two_rounds = workers * 2 * 10 * 2  # every worker 2 mini-batches of 10 a round: the first round and a later one
    data = DataSet(digits.features.numpy()[:two_rounds], digits.labels.numpy()[:two_rounds])
    net, stats = _averaging(sc, data, workers, depth, dtype)
    p, itemsize = net.num_params, np.dtype(dtype).itemsize
    assert len(stats.rounds) == 2 and all(r["workers"] == workers for r in stats.rounds)
    for r in stats.rounds:
        assert r["broadcast_bytes"] == itemsize * p  # the parameters (save_updater=False)
        assert r["partials"] == partials <= math.ceil(round(workers ** (1 / depth), 9))
        assert r["driver_received_bytes"] == partials * per_partial * p
        assert r["tree_levels"] == (0 if depth == 1 else 1)
        assert r["tree_bytes"] == (0 if depth == 1 else workers * itemsize * p)  # every leaf moved once
    for w in stats.workers:
        assert w["received_bytes"] == w["sent_bytes"] == itemsize * p
    summary = stats.summary()
    assert summary["driver_received_bytes"] == partials * per_partial * p
    assert summary["worker_sent_bytes"] == itemsize * p


@pytest.mark.slow  # four-worker fits at two depths, a round each
def test_depth_2_with_4_workers_sends_the_driver_fewer_partials_and_float32_as_many_bytes(sc, digits):
    """Fewer bytes where the sums are not wider than the states (float64), fewer partial results
    always; float32 states summed in pairs (float64) weigh what they replace."""
    one_round = DataSet(digits.features.numpy()[:80], digits.labels.numpy()[:80])  # 4 workers x 2 mini-batches of 10
    received = {}
    for dtype in ("float32", "float64"):
        for depth in (1, 2):
            _, stats = _averaging(sc, one_round, 4, depth, dtype)
            received[dtype, depth] = (stats.rounds[0]["driver_received_bytes"], stats.rounds[0]["partials"])
    assert received["float64", 2][0] < received["float64", 1][0]
    assert received["float32", 2][0] == received["float32", 1][0]
    assert received["float32", 2][1] < received["float32", 1][1]


@pytest.mark.slow  # a fit at every depth
@pytest.mark.parametrize("approach", ["DIRECT", "EXPORT"])
def test_every_depth_gives_the_same_bits_as_the_sequential_sum(sc, digits, approach):
    """Depth 1 is the driver's sum in worker order as before (worker 0's state in float64, plus
    worker 1's, ...); depth 2 sums 8 workers in groups of 3, 3, 2 and depth 3 in pairs of pairs.
    A float64 sum of a few float32 values is exact (or off in float64's last bit, which the
    cast back to float32 almost never keeps), so parameters and Adam's moments are equal, not
    close."""
    runs = {d: _averaging(sc, digits, 8, d, updater=Adam(1e-2), approach=approach)[0] for d in (1, 2, 3)}
    for depth in (2, 3):
        for key, value in runs[1].state_arrays().items():
            np.testing.assert_array_equal(runs[depth].state_arrays()[key].numpy(), value.numpy())
    assert not np.array_equal(runs[1].params().numpy(), mlp(64, hidden=(16,), n_out=10, seed=0).params().numpy())


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2", None])
def test_aggregation_depth_is_checked_at_the_call_naming_the_value_and_remedy(value):
    for cls in (ParameterAveragingTrainingMaster, SharedTrainingMaster):
        with pytest.raises(ValueError) as info:
            cls(aggregation_depth=value)
        text = str(info.value)
        assert text.startswith(f"{cls.__name__}(aggregation_depth={value!r}): must be an integer >= 1")
        assert "DL4J's default 2" in text and "1 sends every worker's result to the driver" in text  # the remedy
    assert ParameterAveragingTrainingMaster().aggregation_depth == 2  # DL4J's default
    assert SharedTrainingMaster(aggregation_depth=3).aggregation_depth == 3


def test_shared_training_broadcasts_the_updater_state_only_while_a_worker_has_none(sc, digits, monkeypatch):
    """Every round broadcast the network's Adam moments, which a worker with its own state
    ignores. Counted at sc.broadcast: round 0 sends parameters and updater state (no worker has
    a state yet, and no empty worker-state dict is broadcast); every later round the parameters
    (they change by every worker's messages) and the workers' own states, never the updater
    state again; and the training equals the same training with it broadcast every round."""
    sent = []
    real = sc.broadcast

    def counting(value):
        sent.append(value)
        return real(value)

    data = DataSet(digits.features.numpy()[:240], digits.labels.numpy()[:240])
    results = {}
    for always in (False, True):
        sent.clear()
        net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=0)
        tm = SharedTrainingMaster(
            20, 3, num_workers=2, collect_training_stats=True, initial_threshold=1e-3, keep_state_on_driver=True
        )
        spark = SparkNetwork(sc, net, tm)
        if always:  # the old behaviour: the updater state in every round's broadcast
            monkeypatch.setattr(SharedTrainingMaster, "_sends_updater_state", staticmethod(lambda states, n: True))
        monkeypatch.setattr(sc, "broadcast", counting)
        spark.fit(to_rdd(sc, data), epochs=2)
        monkeypatch.undo()
        results[always] = (net, spark, list(sent))
    net, spark, sent = results[False]
    p = net.num_params
    rounds = spark.get_training_stats().rounds
    assert len(rounds) == 4  # 2 epochs x 2 rounds (6 mini-batches of 20 per worker, 3 a round)
    flats = [v for v in sent if isinstance(v, np.ndarray)]
    states = [v for v in sent if isinstance(v, dict)]
    assert [f.size for f in flats] == [3 * p, p, p, p]  # Adam: parameters, m, v in round 0 only
    assert len(states) == 3 and all(sorted(s) == [0, 1] for s in states)  # from round 1 on
    state_bytes = 2 * 3 * 4 * p  # two workers' residual and Adam moments, float32
    assert [r["broadcast_bytes"] for r in rounds] == [12 * p] + [4 * p + state_bytes] * 3
    old_net, _, old_sent = results[True]
    assert [v.size for v in old_sent if isinstance(v, np.ndarray)] == [3 * p] * 4
    for key, value in old_net.state_arrays().items():
        np.testing.assert_array_equal(net.state_arrays()[key].numpy(), value.numpy())


def test_shared_training_results_come_back_through_the_tree_unsummed(sc, digits):
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.2), seed=0)
    tm = SharedTrainingMaster(10, 2, num_workers=4, collect_training_stats=True, initial_threshold=1e-3)
    spark = SparkNetwork(sc, net, tm)
    spark.fit(to_rdd(sc, digits))
    stats = spark.get_training_stats()
    for r in stats.rounds:
        workers = [w for w in stats.workers if w["round"] == r["round"]]
        assert r["partials"] == 2 and r["tree_levels"] == 1
        # each worker's messages and own state reach the driver whole: the sum of what they sent
        assert r["driver_received_bytes"] == r["tree_bytes"] == sum(w["sent_bytes"] for w in workers)
        # the whole state (at least the residual) at an epoch's end; between, the messages only
        if r["states_synced"]:
            assert all(w["sent_bytes"] >= 4 * net.num_params for w in workers)
        else:
            assert all(w["sent_bytes"] < 4 * net.num_params for w in workers)
    assert {r["states_synced"] for r in stats.rounds} == {True, False}


def test_evaluation_merges_up_the_same_tree(sc, digits):
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    counts = {}
    for depth in (1, 2, 3):
        spark = SparkNetwork(sc, net, ParameterAveragingTrainingMaster(aggregation_depth=depth))
        ev = spark.evaluate(to_rdd(sc, digits, examples_per_element=7, num_slices=9))
        counts[depth] = ev.confusion.copy()
    np.testing.assert_array_equal(counts[1], counts[2])
    np.testing.assert_array_equal(counts[1], counts[3])
    assert counts[1].sum() == digits.num_examples


RESNET_ROUNDS = """
import json
from kit.bench.spark import VARIANTS, _models, _spark_fit
from kit.spark import local_spark_context, to_rdd
import numpy as np

(spec,) = _models(True, ("resnet18",))  # the bench's model, mini-batch and frequency
n = spec["examples"]
rng = np.random.default_rng(0)
# as `bench spark` starts it: 2 GB for the driver, where 11.2 M parameters a worker come back
sc = local_spark_context("local[2]", app_name="kit-resnet-rounds", driver_memory="2g",
                         conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
try:
    x, y = rng.random((n, *spec["shape"]), dtype=np.float32), rng.integers(0, 10, n)
    stats = {}
    for variant in VARIANTS:  # one round each: every worker 2 mini-batches of 4 (11.2 M parameters a round)
        k = variant[0] * spec["batch"] * spec["frequency"]
        _spark_fit(sc, spec, to_rdd(sc, (x[:k], y[:k])), variant, stats)()
    rounds = [[w, d, [(r["broadcast_bytes"], r["driver_received_bytes"], r["partials"]) for r in stats[w, d].rounds]]
              for w, d in VARIANTS]
    print("RESULT " + json.dumps({"params": spec["make"]().num_params, "rounds": rounds}), flush=True)
finally:
    sc.stop()
"""


@pytest.mark.slow  # ResNet-18's 11.2 M parameters through every variant's rounds, in a driver of 2 GB
def test_the_benchs_resnet18_rounds_move_the_bytes_the_formula_gives():
    """`bench spark`'s ResNet-18 fits (kit.bench.spark's own fit of each variant, a round each):
    a round broadcasts 4 P bytes and the driver receives what expected_driver_bytes gives, P
    11,183,626. (The bench's own run below times the MLP's rounds, `--models mlp`.)"""
    from kit.spark import spark_missing

    if spark_missing():
        pytest.skip(spark_missing())
    proc = subprocess.run([sys.executable, "-c", RESNET_ROUNDS], capture_output=True, text=True, timeout=480, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    p = result["params"]
    assert p == 11_183_626 and [(w, d) for w, d, _ in result["rounds"]] == [(1, 2), (2, 2), (4, 2), (4, 1)]
    by = {}
    for workers, depth, rounds in result["rounds"]:
        formula = list(expected_driver_bytes(workers, depth, p))
        assert len(rounds) == 1 and all(r[0] == 4 * p and r[1:] == formula for r in rounds), (workers, depth, rounds)
        by[workers, depth] = rounds[0][1]
    assert by[1, 2] == 4 * p and by[4, 2] == 2 * 8 * p == by[4, 1]


@pytest.mark.slow
def test_bench_spark_quick_prints_every_row_and_bytes_fit_the_formula(tmp_path):
    from kit.spark import spark_missing

    why = spark_missing()
    if why:
        pytest.skip(why)
    out = tmp_path / "spark.json"
    # the logic's check on a small run: the MLP's rounds (ResNet-18's bytes: the test above), 256 examples a side
    cmd = [sys.executable, "-m", "kit", "bench", "spark", "--quick", "--models", "mlp", "--examples", "256"]
    proc = subprocess.run(
        [*cmd, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=540,  # under pytest's 600 s, so the bench's own output reaches the report
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["model"].split()[0], r["workers"], r["depth"]) for r in rows] == [
        ("MLP", w, d) for w, d in ((1, 2), (2, 2), (4, 2), (4, 1))
    ]  # --models mlp: the MLP's rows only
    for r in rows:
        assert r["broadcast_bytes"] == 4 * r["params"]
        assert (r["driver_bytes"], r["partials"]) == (r["formula_bytes"], r["formula_partials"])
        assert r["round_ms"] > 0 and r["vs_network_fit"] > 0
    text = proc.stdout
    assert "benchmark spark" in text and "vs_network_fit" in text and "driver_bytes" in text
    # a quick run (no warm-up, 2 repeats) measures no round's time: every row says so
    assert all(r["reliable"] == "NO" for r in rows) and "quick run: no warm-up" in result["summary"]["warnings"]
    # kit's gang and rounds beside TorchDistributor and each system's one process, on one job
    peers = result["peers"]
    assert peers["steps_per_epoch"] == 8 and peers["test_examples"] == 128  # --examples 256
    systems = [r["system"] for r in peers["rows"]]
    kit_rows = ["kit Network.fit (one process)", "kit gang, every step", "kit gang, every 5 steps"]
    assert systems[:5] == [*kit_rows, "kit rounds, every 5 steps", DEFAULT_ROW]  # and kit's defaults as they run
    if peers["torch_distributor"] == "ran":  # three goals against the peer, the gang's and the defaults', and
        # one of the defaults against Network.fit
        assert systems[5:] == ["PyTorch (one process)", "TorchDistributor (DDP)"] and len(peers["goals"]) == 7
    else:  # said why (torch, pandas or pyarrow missing)
        assert "not importable" in peers["torch_distributor"] and systems[5:] == []
    assert all(0 <= r["final_accuracy"] <= 1 and r["per_step_ms"] > 0 for r in peers["rows"])
    assert "peer[kit gang, every step]" in text and ("goal[" in text or "not compared" in text)
