"""kit.spark.network: SparkNetwork, the Trainable that fits a Network on Spark. Its loop over a
session's rounds is what fit() does; a listener's stop_fit stops it; one session at a time, two
threads included; what it is handed (a network, a master, epochs, resume) is checked at the call."""

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240])


def test_spark_network_is_trainable_and_its_loop_over_a_session_trains_as_fit_does(sc, digits):
    """The Trainable protocol on Spark: make_loop() run over session(data)'s rounds is what fit()
    does (same parameters, same counters), and a round outside a session is refused in words."""
    from kit.nn.loop import Trainable

    def make():
        net = mlp(64, hidden=(8,), n_out=10, updater=Adam(1e-2), seed=3)
        return SparkNetwork(sc, net, ParameterAveragingTrainingMaster(20, 2, num_workers=2))

    rdd = to_rdd(sc, digits)
    a, b = make(), make()
    a.fit(rdd, epochs=2)
    assert isinstance(b, Trainable)
    with b.session(rdd, epochs=2) as rounds:
        assert b.make_loop().run(rounds, rounds.epochs_left) == 2
    assert (b.network.iteration, b.network.epoch) == (a.network.iteration, a.network.epoch)
    assert b.network.epoch == 2 and b.network.iteration > 0
    assert np.array_equal(b.network.params().numpy(), a.network.params().numpy())
    with pytest.raises(RuntimeError, match=r"a round runs inside `with spark_network.session\(data\) as rounds:`"):
        b.make_loop().run([0], 1)


def test_a_listener_s_model_stop_fit_stops_a_spark_fit_and_a_second_session_is_refused(sc, digits):
    class StopAfterTwo:
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == 2:
                model.stop_fit()  # the Network the listener is handed

    spark = SparkNetwork(
        sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1, num_workers=2)
    )
    spark.fit(to_rdd(sc, digits), epochs=3, listeners=[StopAfterTwo()])
    assert spark.iteration == 2 and spark.network.iteration == 2  # stopped in the first of 3 epochs
    rdd = to_rdd(sc, digits)
    with spark.session(rdd) as rounds:
        with pytest.raises(RuntimeError, match="a session is open already"):
            with spark.session(rdd):
                pass
        assert spark.make_loop().run(rounds, 1) == 1


def test_two_threads_fitting_one_spark_network_one_is_refused_at_once(sc, digits):
    """Both fits ran (the "a session is open already" check raced with the seconds of data
    preparation before the session was marked open), and the counters ended inconsistent."""
    import threading

    spark = SparkNetwork(
        sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1, num_workers=2)
    )
    rdd = to_rdd(sc, digits)
    start = threading.Barrier(2, timeout=60)
    outcomes = []

    def fit():
        start.wait()
        try:
            spark.fit(rdd, epochs=1)
            outcomes.append("trained")
        except RuntimeError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=fit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert sorted(outcomes)[1] == "trained" and "a session is open already" in sorted(outcomes)[0], outcomes
    rounds_per_epoch = spark.iteration  # one fit's rounds, counted once, on both sides
    assert rounds_per_epoch > 0 and spark.network.iteration == spark.iteration and spark.epoch == 1
    spark.fit(rdd, epochs=1)  # the refused thread's remedy: once the other has ended
    assert spark.iteration == 2 * rounds_per_epoch and spark.epoch == 2


@pytest.mark.parametrize(
    ("argument", "said"),
    [
        ({"epochs": 0}, r"fit\(epochs=0\): must be a whole number >= 1"),
        ({"epochs": -1}, r"fit\(epochs=-1\): must be a whole number >= 1"),
        ({"epochs": True}, r"fit\(epochs=True\): must be a whole number >= 1"),
        ({"epochs": 2.0}, r"fit\(epochs=2.0\): must be a whole number >= 1"),
        ({"epochs": "2"}, r"fit\(epochs='2'\): must be a whole number >= 1"),
        ({"resume": "yes"}, r"fit\(resume='yes'\): True \(go on from the latest checkpoint\) or False"),
        ({"resume": 1}, r"fit\(resume=1\): True"),
        ({"resume": None}, r"fit\(resume=None\): True"),
    ],
    ids=[
        "epochs-0",
        "epochs-negative",
        "epochs-bool",
        "epochs-float",
        "epochs-str",
        "resume-str",
        "resume-1",
        "resume-none",
    ],
)
def test_fit_and_session_refuse_bad_epochs_and_resume_at_the_call(sc, digits, argument, said):
    spark = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1))
    before = spark.network.params().numpy().copy()
    rdd = to_rdd(sc, digits, num_slices=2)
    jobs = set(sc.statusTracker().getJobIdsForGroup())
    with pytest.raises(ValueError, match=said):
        spark.fit(rdd, **argument)
    with pytest.raises(ValueError, match=said):
        with spark.session(rdd, **argument):
            pass
    assert set(sc.statusTracker().getJobIdsForGroup()) == jobs  # refused before any job
    np.testing.assert_array_equal(spark.network.params().numpy(), before)
    assert (spark.iteration, spark.epoch) == (0, 0)


@pytest.mark.parametrize(
    ("network", "master", "said"),
    [
        ("net", "averaging", "SparkNetwork needs a kit.nn.Network, got str"),
        ("weights", "averaging", "SparkNetwork needs a kit.nn.Network, got ndarray"),
        (
            "network",
            None,
            "SparkNetwork needs a ParameterAveragingTrainingMaster or SharedTrainingMaster, got NoneType",
        ),
        ("network", "options", "or SharedTrainingMaster, got AveragingOptions"),
    ],
    ids=["str", "ndarray", "no-master", "options-not-master"],
)
def test_what_is_not_a_network_or_a_master_is_refused_naming_its_type(sc, network, master, said):
    net = mlp(64, hidden=(8,), n_out=10, seed=0)
    tm = ParameterAveragingTrainingMaster(20, 1)
    given_network = {"net": "net", "weights": net.params().numpy(), "network": net}[network]
    given_master = {"averaging": tm, None: None, "options": tm.options}[master]
    with pytest.raises(TypeError, match=said):
        SparkNetwork(sc, given_network, given_master)
    assert SparkNetwork(sc, net, tm).network is net  # the remedy: a Network and a master
