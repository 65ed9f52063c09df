"""Distributed inference (DL4J's feedForwardWithKey): SparkNetwork.feed_forward_with_key, output and
predict run on the executors, a partition's examples in batches, and give back every key, in the
RDD's order and partitions, with the local Network.output's numbers; bad calls are refused at
the call, a bad element is named by its partition and position."""

import numpy as np
import pytest

from kit.nn import mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork

N, D, C = 103, 6, 4


@pytest.fixture(scope="module")
def setup(sc):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, D)).astype(np.float32)
    net = mlp(D, hidden=(8,), n_out=C, seed=3)
    return SparkNetwork(sc, net, ParameterAveragingTrainingMaster()), x, net.output(x).numpy()


@pytest.mark.parametrize(("partitions", "batch_size"), [(1, 1), (3, 8), (4, 64), (7, 1000)])
def test_feed_forward_with_key_keeps_keys_order_and_partitions_and_equals_the_local_output(
    sc, setup, partitions, batch_size
):
    spark_net, x, local = setup
    keyed = sc.parallelize([(f"row-{i}", x[i]) for i in range(N)], partitions)
    scored = spark_net.feed_forward_with_key(keyed, batch_size=batch_size)
    assert scored.getNumPartitions() == partitions
    got = scored.glom().collect()
    assert [[k for k, _ in part] for part in got] == [[k for k, _ in part] for part in keyed.glom().collect()]
    outputs = np.stack([out for part in got for _, out in part])
    assert outputs.shape == (N, C)
    np.testing.assert_allclose(outputs, local, rtol=1e-6, atol=1e-6)  # batches of other sizes: float32 sums
    np.testing.assert_array_equal(outputs.argmax(axis=1), local.argmax(axis=1))


def test_elements_may_be_single_examples_or_batches(sc, setup):
    spark_net, x, local = setup
    elements = [x[0], x[1:5], x[5], x[6:40], x[40:]]  # (D,) gives (C,); (n, D) gives (n, C)
    outputs = spark_net.output(sc.parallelize(elements, 2), batch_size=16).collect()
    assert [o.shape for o in outputs] == [(C,), (4, C), (C,), (34, C), (N - 40, C)]
    np.testing.assert_allclose(np.concatenate([o.reshape(-1, C) for o in outputs]), local, rtol=1e-6, atol=1e-6)
    predicted = spark_net.predict(sc.parallelize(elements, 2), batch_size=16).collect()
    assert predicted[0] == int(local[0].argmax()) and isinstance(predicted[0], int)
    np.testing.assert_array_equal(predicted[1], local[1:5].argmax(axis=1))


def test_the_parameters_are_those_at_the_call(sc, setup):
    spark_net, x, local = setup
    net = spark_net.network
    scored = spark_net.output(sc.parallelize(list(x[:5]), 1))
    saved = net.params().numpy().copy()
    try:
        net.set_params(np.zeros_like(saved))  # after the call, before the job: not seen
        np.testing.assert_allclose(np.stack(scored.collect()), local[:5], rtol=1e-6, atol=1e-6)
    finally:
        net.set_params(saved)


@pytest.mark.parametrize("call", ["feed_forward_with_key", "output", "predict"])
@pytest.mark.parametrize(("batch_size", "error"), [(0, ValueError), (2.5, ValueError), (True, ValueError)])
def test_bad_batch_sizes_are_refused_at_the_call(sc, setup, call, batch_size, error):
    spark_net, x, _ = setup
    with pytest.raises(error, match=rf"SparkNetwork\.{call}\(batch_size={batch_size!r}\)"):
        getattr(spark_net, call)(sc.parallelize([x[0]]), batch_size=batch_size)


@pytest.mark.parametrize("call", ["feed_forward_with_key", "output", "predict"])
def test_data_that_is_not_an_rdd_is_refused_at_the_call(setup, call):
    spark_net, x, _ = setup
    with pytest.raises(TypeError, match=rf"SparkNetwork\.{call} needs an RDD .*got list"):
        getattr(spark_net, call)([x[0]])


@pytest.mark.parametrize(
    ("call", "element", "said"),
    [
        ("output", np.zeros(D + 1), rf"element 2: features of shape \({D + 1},\); the network takes one example"),
        ("feed_forward_with_key", np.zeros(D), r"element 2: a ndarray; feed_forward_with_key needs \(key, features\)"),
    ],
)
def test_a_bad_element_is_named_by_partition_and_position(sc, setup, call, element, said):
    spark_net, x, _ = setup
    good = [("k", x[0])] * 2 if call == "feed_forward_with_key" else [x[0]] * 2
    rdd = sc.parallelize([*good, element], 1)
    with pytest.raises(Exception, match=rf"\[kit\.spark\] partition 0 \({call}\): ValueError: {said}"):
        getattr(spark_net, call)(rdd).collect()
