"""kit.spark.executor_eval: a partition's evaluation task (a plain function of the partition's index
and its elements, so it runs here without Spark) sends back the raw sums the driver merges: they add
up, over partitions, to what the network computes on all the data at once."""

from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest

from kit.data import DataSet
from kit.nn import mlp
from kit.nn.evaluation import Evaluation
from kit.spark.elements import PartitionError
from kit.spark.executor_eval import eval_task

RNG = np.random.default_rng(3)
X, Y = RNG.random((30, 4)).astype(np.float32), RNG.integers(0, 3, 30)


@pytest.fixture(scope="module")
def net():
    return mlp(4, hidden=(5,), n_out=3, seed=2)


def _task(net, kinds, batch_size=4):
    params = SimpleNamespace(value=net.params().numpy())  # what a Spark broadcast gives the task
    return eval_task(net.configuration.to_json(), params, kinds, batch_size, 3)


def _one(task_output):
    """The one result a task yields, the task run to its end as Spark runs it."""
    (result,) = task_output
    return result


def _partitions(cuts=(0, 7, 19, 30)):
    """The data as three partitions of elements of a few examples each, as an RDD holds them."""
    return [[(X[i : i + 3][: b - i], Y[i : i + 3][: b - i]) for i in range(a, b, 3)] for a, b in pairwise(cuts)]


def test_the_partitions_confusion_matrices_add_up_to_the_whole_datas(net):
    task = _task(net, ("evaluation",))
    merged = sum(_one(task(p, iter(elements)))[0] for p, elements in enumerate(_partitions()))
    whole = Evaluation(3)
    whole.eval(DataSet(X, Y, num_classes=3).labels, net.output(X))
    np.testing.assert_array_equal(merged, whole.confusion)
    assert merged.sum() == 30


def test_the_loss_sums_and_counts_give_the_whole_datas_score(net):
    task = _task(net, ("score", "evaluation"), batch_size=30)
    sums = [_one(task(p, iter(elements))) for p, elements in enumerate(_partitions())]
    loss, count = (sum(s[0][i] for s in sums) for i in (0, 1))
    assert count == 30 and [s[1].sum() for s in sums] == [7, 12, 11]
    assert loss / count == pytest.approx(net.score(DataSet(X, Y, num_classes=3)), rel=1e-5)


def test_the_roc_sends_back_every_label_and_score(net):
    (partial,) = _one(_task(net, ("roc",))(0, iter(_partitions()[0])))
    labels, scores = partial
    assert sum(len(part) for part in labels) == sum(len(part) for part in scores) == 7


def test_an_empty_partition_sends_back_zero_sums(net):
    confusion, (loss, count) = _one(_task(net, ("evaluation", "score"))(5, iter([])))
    assert confusion.sum() == 0 and (loss, count) == (0.0, 0)


def test_a_bad_element_fails_its_task_naming_the_partition(net):
    bad = [(X[:3], Y[:2])]  # three examples, two labels
    with pytest.raises(PartitionError, match=r"partition 4.*evaluation"):
        _one(_task(net, ("evaluation",))(4, iter(bad)))
