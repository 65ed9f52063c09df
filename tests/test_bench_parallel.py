"""kit.bench.parallel: the rows of `kit bench parallel`, on tiny models. Both client kinds send
every request they time; both servers get the same bursts and the last row carries BATCHED /
SEQUENTIAL per repeat; the goal lines and the training rows are worked by hand; the training
configurations are timed in turn, and only separate devices copy bytes. No timing is asserted."""

import statistics

import numpy as np
import pytest

from kit.bench import parallel as bench
from kit.bench.parallel import CLIENT_KINDS
from kit.core.devices import host_device_count, set_host_device_count
from kit.nn import Sgd, mlp
from kit.parallel import ParallelInference, ParallelWrapper


def test_bench_parallel_client_kinds_serve_every_request():
    """The two client kinds the parallel benchmark compares really send every request they time:
    64 threads and 64 asyncio tasks, each answer counted (no timing asserted)."""
    x = np.random.default_rng(0).random((16, 8)).astype(np.float32)
    for kind, run in CLIENT_KINDS.items():
        with ParallelInference(mlp(8, hidden=(8,), n_out=3), workers=2, inference_mode="BATCHED") as pi:
            throughput, latencies = run(pi, x, 64, 3)
            assert pi.requests_served == 64 * 3, kind
            assert len(latencies) == 64 * 3 and throughput > 0, kind
            assert max(pi.batch_sizes) > 1, kind  # 64 clients at once: requests were merged


def test_the_data_is_seeded_with_ten_one_hot_classes():
    a, b = bench._data(32, 5, seed=3), bench._data(32, 5, seed=3)
    assert a.features.shape == (32, 5) and a.labels.shape == (32, 10)
    np.testing.assert_array_equal(a.features.numpy(), b.features.numpy())
    np.testing.assert_array_equal(a.labels.numpy().sum(axis=1), np.ones(32))


@pytest.mark.parametrize("kind", sorted(CLIENT_KINDS))
def test_both_servers_get_the_same_bursts_and_the_last_row_has_the_ratio_per_repeat(kind):
    net = mlp(8, hidden=(8,), n_out=3, seed=0)
    x = np.random.default_rng(0).random((32, 8)).astype(np.float32)
    rows = bench._burst_rows("tiny MLP", net, x, kind, clients=4, per_client=5, repeats=2, bound=[2.0, 3.0])
    assert [r["case"] for r in rows] == [
        f"ParallelInference tiny MLP, {m}, 4 {kind}" for m in ("SEQUENTIAL", "BATCHED")
    ]
    sequential, batched = rows
    assert sequential["mean_batch"] == 1.0 and batched["mean_batch"] >= 1.0  # SEQUENTIAL never merges
    for r in rows:
        assert r["requests_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
    each = batched["batched_over_sequential_each"]
    assert len(each) == 2 and batched["batched_over_sequential"] == statistics.median(each)
    assert batched["ratio_range"] == f"{min(each):.3g}-{max(each):.3g}" and batched["batching_bound"] == 2.5
    assert isinstance(batched["reliable"], bool) and "batched_over_sequential" not in sequential


def _at_64(ratio, each, reliable=True, kind="client threads", model="MLP 784-512-256-10"):
    return {
        "case": f"ParallelInference {model}, BATCHED, 64 {kind}",
        "batched_over_sequential": ratio,
        "batched_over_sequential_each": each,
        "reliable": reliable,
        "batching_bound": 3.2,
    }


def test_the_inference_goals_are_one_line_per_model_and_client_kind_at_64_clients():
    rows = [
        {"case": "ParallelInference MLP 784-512-256-10, BATCHED, 8 client threads", "batched_over_sequential": 9.0},
        _at_64(6.0, [5.5, 6.0, 6.5]),
        _at_64(2.0, [1.5, 2.0, 2.5], kind="asyncio clients"),
        _at_64(6.0, [5.5, 6.0, 6.5], reliable=False, model="LeNet 1x28x28"),
    ]
    goals = bench._inference_goals(rows)
    assert sorted(goals) == [
        "goal_inference[LeNet 1x28x28, client threads]",
        "goal_inference[MLP 784-512-256-10, asyncio clients]",
        "goal_inference[MLP 784-512-256-10, client threads]",
    ]  # the 8-client row is no goal's
    assert "-> met (" in goals["goal_inference[MLP 784-512-256-10, client threads]"]
    assert "-> NOT met (" in goals["goal_inference[MLP 784-512-256-10, asyncio clients]"]
    assert "no verdict" in goals["goal_inference[LeNet 1x28x28, client threads]"]
    assert all(g.endswith("; merging 32 rows alone buys 3.20x here") for g in goals.values())


def test_a_training_row_worked_by_hand():
    net = mlp(5, hidden=(4,), n_out=10, updater=Sgd(0.1), seed=0)
    data = bench._data(16, 5)
    times = {"1 worker": [2.0, 4.0], "1 worker, 1 BLAS thread": [4.0, 8.0], "2 workers": [1.0, 2.0]}
    copied = {"2 workers": [10.0, 30.0, 20.0]}
    with ParallelWrapper(net, workers=2) as pw:
        row = bench._training_row("2 workers", net, pw, data, times, copied)
        devices = ", ".join(str(d) for d in pw.devices)
    assert row == {
        "case": "ParallelWrapper MLP 784-512-256-10, 2 workers",
        "devices": devices,
        "samples_per_s": 16 / 1.5,  # 16 examples in a median 1.5 s
        "speedup_vs_1": 2.0,  # 2/1 and 4/2, round by round
        "speedup_vs_1_one_thread": 4.0,
        "score": net.score(data),
        "transfer_bytes_per_iter": 20.0,
    }


def test_training_configurations_are_timed_in_turn_and_only_separate_devices_copy_bytes():
    previous = set_host_device_count(max(2, host_device_count()))
    data = bench._data(64, 6)
    wrappers = {}
    try:
        for name, devices in (("1 worker", ["cpu:0"]), ("2 simulated host devices", ["cpu:0", "cpu:1"])):
            net = mlp(6, hidden=(4,), n_out=10, updater=Sgd(0.05), seed=0)
            wrappers[name] = (net, ParallelWrapper(net, workers=len(devices), devices=devices, prefetch_buffer=0))
        times, copied = bench._time_training(wrappers, data, repeats=2)
    finally:
        for _, pw in wrappers.values():
            pw.shutdown()
        set_host_device_count(previous)
    assert all(len(times[n]) == len(copied[n]) == 2 and min(times[n]) > 0 for n in wrappers)
    assert copied["1 worker"] == [0.0, 0.0] and min(copied["2 simulated host devices"]) > 0


def test_the_batching_bound_is_one_ratio_per_repeat():
    net = mlp(8, hidden=(8,), n_out=3, seed=0)
    x = np.random.default_rng(0).random((16, 8)).astype(np.float32)
    bound = bench._batching_bound(net, x, batch=8, repeats=3, min_time=0.001)
    assert len(bound) == 3 and min(bound) > 0
