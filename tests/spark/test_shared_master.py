"""Issue 44 item 2: SharedTrainingMaster's defaults learn like parameter averaging and move fewer
bytes a round than it. Before, each worker's residual and Adam moments went to the driver and back
every round (with every worker's state broadcast to all), the workers' updates were summed (twice
averaging's step with two workers, on top of Adam's) and the threshold rose until at most 1 % of
the parameters moved a step: it learned worse than averaging and moved more. One small seeded job
on digits, three fits; counts and directions are asserted, never timings."""

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster, SparkNetwork, to_rdd

# what SharedTrainingMaster did before (the "shared with its defaults")
BEFORE = {
    "initial_threshold": 1e-4,
    "max_target_sparsity": 1e-2,
    "average_updates": False,
    "keep_state_on_driver": True,
}


@pytest.fixture(scope="module")
def job(sc):
    train, test = load_digits()
    data = DataSet(train.features.numpy()[:960], train.labels.numpy()[:960])
    classes = test.labels.numpy().argmax(axis=1)
    out = {}
    for name, cls, options in (
        ("averaging", ParameterAveragingTrainingMaster, {"execution": "rounds"}),  # a Spark job a round, as shared
        ("shared", SharedTrainingMaster, {}),
        ("before", SharedTrainingMaster, BEFORE),
    ):
        net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-3), seed=0)  # the learning rate
        spark = SparkNetwork(sc, net, cls(16, num_workers=2, collect_training_stats=True, **options))
        spark.fit(to_rdd(sc, data), epochs=2)
        stats = spark.get_training_stats()
        accuracy = float(np.mean(net.output(test.features.numpy()).numpy().argmax(axis=1) == classes))
        per_round = [r["broadcast_bytes"] + r["driver_received_bytes"] for r in stats.rounds]
        out[name] = {"accuracy": accuracy, "bytes": float(np.mean(per_round)), "stats": stats, "net": net}
    return out


def test_shared_defaults_move_fewer_bytes_a_round_than_averaging(job):
    p = job["averaging"]["net"].num_params
    assert job["shared"]["bytes"] < job["averaging"]["bytes"] < job["before"]["bytes"]
    # between two epochs' ends the workers' states stay on the executors: a round brings the
    # parameters down and the messages up (a dense message is 2 bits a parameter)
    quiet = [r for r in job["shared"]["stats"].rounds if not r["states_synced"]]
    assert quiet and all(r["broadcast_bytes"] == 4 * p for r in quiet)
    assert all(r["driver_received_bytes"] <= 2 * 5 * (p // 16 + 5) * 4 for r in quiet)


def test_shared_defaults_learn_like_averaging(job):
    """Within half a point of averaging on this small seeded job. While each worker moved between
    exchanges by its sent 1/workers share alone, it took its gradients a step behind: 0.499 against
    averaging's 0.507 here (on the issue's Fashion-MNIST job, simulated in process: 0.802 against
    0.812 after two epochs); keeping its whole step, as an averaging worker does: 0.504 (0.825)."""
    shared, averaging = job["shared"]["accuracy"], job["averaging"]["accuracy"]
    assert shared >= averaging - 0.005
    assert shared > 0.3  # learned: ten classes, 0.1 by chance


def test_workers_go_on_from_their_executors_state(job):
    workers = [w for w in job["shared"]["stats"].workers if w.get("examples")]
    assert {w["state_from"].split(" (")[0] for w in workers} == {"new", "executor"}
    assert {w["state_from"].split(" (")[0] for w in job["before"]["stats"].workers if w.get("examples")} == {
        "new",
        "driver",
    }


def test_state_on_the_executors_trains_exactly_as_state_on_the_driver(sc):
    train, _ = load_digits()
    data = to_rdd(sc, DataSet(train.features.numpy()[:320], train.labels.numpy()[:320]))
    params = []
    for keep in (False, True):
        net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=1)
        SparkNetwork(sc, net, SharedTrainingMaster(16, 2, num_workers=2, keep_state_on_driver=keep)).fit(data, epochs=2)
        params.append(net.params().numpy())
    np.testing.assert_array_equal(*params)


def test_shared_defaults_keep_up_with_averaging_at_a_larger_learning_rate(sc):
    """A message moves an entry by one threshold a step at most, so with Adam's steps bigger than
    the threshold the entries fell behind for good: 0.774 against averaging's 0.936 here, and 0.744
    against 0.791 at 3e-3 (measured before the floor). The default threshold is at least each step's
    largest update entry (threshold_update_multiple=1.0): 0.950 here (0.766 at 3e-3)."""
    train, test = load_digits()
    data = DataSet(train.features.numpy()[:960], train.labels.numpy()[:960])
    classes = test.labels.numpy().argmax(axis=1)
    accuracy = {}
    for cls, options in ((ParameterAveragingTrainingMaster, {"execution": "rounds"}), (SharedTrainingMaster, {})):
        net = mlp(64, hidden=(32,), n_out=10, updater=Adam(1e-2), seed=0)
        SparkNetwork(sc, net, cls(16, num_workers=2, **options)).fit(to_rdd(sc, data), epochs=2)
        accuracy[cls] = float(np.mean(net.output(test.features.numpy()).numpy().argmax(axis=1) == classes))
    assert accuracy[SharedTrainingMaster] >= accuracy[ParameterAveragingTrainingMaster] - 0.005
