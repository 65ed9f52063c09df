"""kit.spark.spark_evaluation: SparkNetwork's evaluate, score and do_evaluation. Each partition's
sums come back up the aggregation tree and give the numbers NumPy gives on the whole data, whatever
the tree's depth; what cannot be evaluated (a batch size, an Evaluation or ROC of another width, no
evaluation object, an empty RDD) is refused on the driver, before any job, in words."""

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Sgd, mlp
from kit.nn.evaluation import ROC, Evaluation
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, merge_evaluations, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:120], train.labels.numpy()[:120])


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "64", True])
def test_an_evaluation_batch_size_is_refused_on_the_driver_before_any_job(sc, digits, batch_size):
    """batch_size=-1 gave an Evaluation of 0 examples, 0 failed deep in an executor."""
    snet = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1))
    rdd = to_rdd(sc, digits, num_slices=2)
    calls = {
        "evaluate": lambda b: snet.evaluate(rdd, batch_size=b),
        "score": lambda b: snet.score(rdd, batch_size=b),
        "do_evaluation": lambda b: snet.do_evaluation(rdd, ROC(), batch_size=b),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"SparkNetwork.{name}\(batch_size=.*\): .*a whole number >= 1"):
            call(batch_size)
    assert snet.evaluate(rdd).n == len(digits.labels.numpy())  # the default, as the message says


def test_evaluating_into_a_roc_of_another_width_is_refused_and_the_roc_stays_readable(sc, digits):
    snet = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1))
    roc = ROC()
    roc.eval(np.array([0, 1, 1]), np.array([0.2, 0.7, 0.6]))  # a binary ROC: 2 columns
    auc = roc.calculate_auc()
    with pytest.raises(ValueError, match="already holds rows of 2 columns, and the network scores 10; pass a new ROC"):
        snet.do_evaluation(to_rdd(sc, digits, num_slices=2), roc)
    assert roc.calculate_auc() == auc
    (fresh,) = snet.do_evaluation(to_rdd(sc, digits, num_slices=2), ROC())
    assert fresh.num_classes == 10


@pytest.fixture(scope="module")
def trained(digits):
    net = mlp(64, hidden=(8,), n_out=10, updater=Sgd(0.1), seed=0)
    net.fit(digits, epochs=3)
    return net


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize(("slices", "per_element"), [(1, 120), (5, 7), (7, 1)])
def test_the_confusion_and_score_are_numpys_whatever_the_tree_and_the_partitions(
    sc, digits, trained, depth, slices, per_element
):
    x, y = digits.features.numpy(), digits.labels.numpy().argmax(axis=1)
    p = trained.output(x).numpy().astype(np.float64)
    confusion = np.zeros((10, 10), dtype=np.int64)
    np.add.at(confusion, (y, p.argmax(axis=1)), 1)
    snet = SparkNetwork(sc, trained, ParameterAveragingTrainingMaster(20, 1, aggregation_depth=depth))
    rdd = to_rdd(sc, digits, examples_per_element=per_element, num_slices=slices)
    ev = snet.evaluate(rdd, batch_size=16)
    np.testing.assert_array_equal(ev.confusion, confusion)
    assert ev.n == 120 and confusion.trace() > 12  # it learned: better than chance
    assert snet.score(rdd, batch_size=16) == pytest.approx(-np.log(p[np.arange(120), y]).mean(), rel=1e-5)


@pytest.mark.parametrize(
    ("evaluations", "error", "said"),
    [
        ((), ValueError, r"do_evaluation needs at least one evaluation object \(Evaluation, ROC\)"),
        ((Evaluation(5),), ValueError, r"Evaluation\(5\) for a network with 10 outputs"),
        ((Evaluation(10), "accuracy"), TypeError, r"kit.spark merges Evaluation and ROC, got str"),
    ],
    ids=["none", "narrower", "not-an-evaluation"],
)
def test_what_cannot_be_evaluated_is_refused_before_any_job_and_the_remedy_runs(sc, digits, evaluations, error, said):
    snet = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1))
    rdd = to_rdd(sc, digits, num_slices=2)
    jobs = set(sc.statusTracker().getJobIdsForGroup())
    with pytest.raises(error, match=said):
        snet.do_evaluation(rdd, *evaluations)
    assert set(sc.statusTracker().getJobIdsForGroup()) == jobs  # refused on the driver: no job ran
    ev, roc = snet.do_evaluation(rdd, Evaluation(10), ROC())  # the remedy: objects of the network's width
    assert ev.n == 120 and roc.num_classes == 10


@pytest.mark.parametrize(
    ("empty", "call", "said"),
    [
        ("no-partitions", "evaluate", "SparkNetwork evaluation: the RDD holds no elements"),
        ("no-partitions", "score", "SparkNetwork evaluation: the RDD holds no elements"),
        ("empty-partitions", "score", "SparkNetwork.score: no examples"),
        (
            "empty-partitions",
            "evaluate",
            r"SparkNetwork evaluation: no examples \(every partition of the RDD is empty\)",
        ),
        ("empty-partitions", "roc", r"SparkNetwork evaluation: no examples \(every partition of the RDD is empty\)"),
    ],
    ids=[
        "no-partitions-evaluate",
        "no-partitions-score",
        "empty-partitions-score",
        "empty-partitions-evaluate",
        "empty-partitions-roc",
    ],
)
def test_an_empty_rdd_is_refused_in_words(sc, empty, call, said):
    snet = SparkNetwork(sc, mlp(64, hidden=(8,), n_out=10, seed=0), ParameterAveragingTrainingMaster(20, 1))
    rdd = sc.emptyRDD() if empty == "no-partitions" else sc.parallelize([], 2)
    kept = Evaluation(10)
    kept.confusion[3, 3] = 5  # what an evaluation passed in already holds is not touched
    with pytest.raises(ValueError, match=said):
        if call == "roc":
            snet.do_evaluation(rdd, ROC())
        elif call == "evaluate" and empty == "empty-partitions":
            snet.do_evaluation(rdd, kept)
        else:
            getattr(snet, call)(rdd)
    assert kept.confusion.sum() == 5


def test_a_partitions_sums_merge_into_an_evaluation_and_nothing_else():
    ev = Evaluation(3)
    merge_evaluations(ev, np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3]]))
    merge_evaluations(ev, np.eye(3, dtype=np.int64))
    np.testing.assert_array_equal(ev.confusion, np.diag([2, 3, 4]))
    with pytest.raises(TypeError, match=r"kit\.spark merges Evaluation and ROC, got dict"):
        merge_evaluations({}, np.eye(3))
