"""kit.spark.executor without Spark: its tasks are plain functions of (partition, iterator), so they
run here in-process on lists, with a stand-in for a broadcast. A round trains exactly as
Network.fit_batch does on the same batches (DIRECT, EXPORT to Spark's storage, EXPORT to files);
state packs and unpacks (a mixed network's master weights included); SHARED's messages are what
the worker applied; errors name the element where it began; evaluation's sums are Evaluation's."""

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

from kit.core.devices import gpu_count
from kit.data import ArrayIterator, DataSet
from kit.nn import Adam, Network, Sgd, mlp
from kit.nn.evaluation import Evaluation
from kit.parallel.threshold import threshold_decode
from kit.spark import executor as ex
from kit.spark.executor_eval import eval_task

C, F = 3, 6
RNG = np.random.default_rng(5)
X = RNG.random((24, F)).astype(np.float32)
Y = RNG.integers(0, C, 24)


class Broadcast:
    """What a task reads of a Spark broadcast: `.value`."""

    def __init__(self, value):
        self.value = value


def tagged(partition=0, x=X, y=Y):
    """The elements as kit.spark hands them to a task: ((RDD partition, position), (features, labels))."""
    return list(ex.tag_elements(partition, iter([(x[i : i + 1], y[i : i + 1]) for i in range(len(x))])))


def trained(updater=None, steps=3):
    """A network with a few steps behind it: non-zero updater state, iteration > 0."""
    net = mlp(F, hidden=(5,), n_out=C, updater=updater or Adam(1e-2), seed=0)
    net.fit(ArrayIterator(DataSet(X, Y, num_classes=C), 8), epochs=1)
    assert net.iteration == steps
    return net


def spec_for(net, per_batch=4, send_updater=True, mode="averaging", **kw):
    keys = ex.state_keys(net) if send_updater else ("params",)
    sizes = tuple(net.state_arrays()[k].shape[0] for k in keys)
    return ex.RoundSpec(
        config_json=net.configuration.to_json(),
        keys=keys,
        sizes=sizes,
        round=kw.pop("round", 0),
        elements_per_batch=per_batch,
        batches_per_round=len(X) // per_batch,
        base_iteration=net.iteration,
        num_classes=C,
        send_updater=send_updater,
        mode=mode,
        stored_rounds=kw.pop("stored_rounds", 1),
        **kw,
    )


def run_round(spec, net, records, partition=0, workers=None):
    task = ex.round_task(spec, Broadcast(ex.pack_state(net, spec.keys)), workers and Broadcast(workers))
    (result,) = task(partition, iter(records))
    return result


def fit_batches(net, per_batch=4):
    return [
        float(net.fit_batch(DataSet(X[i : i + per_batch], Y[i : i + per_batch], num_classes=C)))
        for i in range(0, len(X), per_batch)
    ]


# ---- state -------------------------------------------------------------------------------------


def test_state_packs_in_key_order_and_loads_into_a_fresh_network():
    net = trained()
    keys = ex.state_keys(net)
    assert keys == ("params", "updater_m", "updater_v")
    flat = ex.pack_state(net, keys)
    arrays = net.state_arrays()
    np.testing.assert_array_equal(flat, np.concatenate([arrays[k].numpy() for k in keys]))
    fresh = Network.from_config(net.configuration)
    ex.load_state(fresh, flat, keys, [arrays[k].shape[0] for k in keys])
    for k in keys:
        np.testing.assert_array_equal(fresh.state_arrays()[k].numpy(), arrays[k].numpy())
    assert ex.scaler_state(net) is None and ex.weights(net) is net.flat_params


def test_a_mixed_network_sends_its_float32_master_weights_not_the_float16_copy():
    net = mlp(F, hidden=(5,), n_out=C, dtype="float16", master_dtype="float32", loss_scale="dynamic", seed=0)
    net.set_params(np.full(net.num_params, 1 / 3))  # 1/3 in float32 is not 1/3 in float16
    keys = ex.state_keys(net)
    assert "master" not in keys and ex.weights(net) is net.flat_master
    flat = ex.pack_state(net, keys)
    assert flat.dtype == np.float32
    np.testing.assert_array_equal(flat[: net.num_params], np.float32(1 / 3))
    scale, skipped, clean = ex.scaler_state(net)
    assert isinstance(scale, float) and scale > 1 and (skipped, clean) == (0.0, 0.0)
    twin = Network.from_config(net.configuration)
    ex.load_state(twin, flat, keys, [net.state_arrays()[k].shape[0] for k in keys])
    np.testing.assert_array_equal(twin.flat_master.numpy(), net.flat_master.numpy())


# ---- a training round: the same as Network.fit_batch -------------------------------------------


def test_a_direct_round_trains_as_fit_batch_on_the_same_batches():
    net = trained()
    ref = net.clone()
    spec = spec_for(net)
    result = run_round(spec, net, [(0, tagged())])  # DIRECT: (worker * stored_rounds + round, elements)
    scores = fit_batches(ref)
    assert result["worker"] == 0 and result["sizes"] == [4] * 6 and result["finite"]
    np.testing.assert_allclose(result["scores"], scores, rtol=1e-6)
    np.testing.assert_allclose(result["state"], ex.pack_state(ref, spec.keys), rtol=1e-6, atol=1e-7)
    stats = result["stats"]
    assert (stats["examples"], stats["batches"], stats["round"]) == (24, 6, 0)
    assert stats["received_bytes"] == ex.pack_state(net, spec.keys).nbytes


def test_without_the_updater_each_round_starts_it_fresh_and_sends_the_parameters_only():
    net = trained()
    ref = net.clone()
    for arr in ref.updater_state.values():  # DL4J's saveUpdater(false)
        arr.assign(np.zeros(arr.shape, arr.dtype))
    spec = spec_for(net, send_updater=False)
    result = run_round(spec, net, [(0, tagged())])
    fit_batches(ref)
    assert result["state"].shape == (net.num_params,)
    np.testing.assert_allclose(result["state"], ref.params().numpy(), rtol=1e-6, atol=1e-7)


def test_both_exports_train_as_the_direct_round(tmp_path):
    net = trained(Sgd(0.1))
    spec = spec_for(net, stored_rounds=2)
    direct = run_round(spec, net, [(2, tagged())], partition=1)  # key 2 = worker 1, round 0
    (record,) = ex.export_records(per_round=24, per_batch=4, stored_rounds=2)(1, iter(tagged()))
    assert record[0] == 2 and isinstance(record[1], bytes)
    stored = run_round(spec, net, [record], partition=1)
    (written,) = ex.export_task(str(tmp_path), per_round=24, per_batch=4, num_classes=C)(1, iter(tagged()))
    worker, k, path, n, _digest = written
    assert (worker, k, n) == (1, 0, 24) and path.endswith("w1_r0.npz")
    on_disk = run_round(spec, net, [(worker, path)], partition=1)
    for other in (stored, on_disk):
        assert other["worker"] == direct["worker"] == 1 and other["sizes"] == direct["sizes"]
        np.testing.assert_array_equal(other["state"], direct["state"])


def test_an_empty_partition_is_a_worker_with_nothing_to_do():
    net = trained()
    result = run_round(spec_for(net), net, [], partition=3)
    assert (result["worker"], result["state"], result["scores"], result["stats"]["examples"]) == (3, None, [], 0)


def test_a_shared_round_sends_exactly_what_the_worker_applied_and_keeps_the_worker_s_state():
    net = trained(Sgd(0.5))
    spec = spec_for(net, mode="shared", threshold={"initial_threshold": 1e-3})
    start = net.params().numpy().astype(np.float64)
    result = run_round(spec, net, [(0, tagged())])
    applied = np.zeros(net.num_params, np.float32)
    for message in result["messages"]:
        threshold_decode(message, applied)
    worker = ex.network_for(spec.config_json, spec.workspace_mode)  # the executor's network, reused
    np.testing.assert_allclose(worker.params().numpy(), start - applied, rtol=1e-6, atol=1e-6)
    assert result["messages"] and result["state"] is None and result["stats"]["state_from"] == "new"
    own = result["worker_state"]
    assert own["rounds"] == 1 and own["residual"].shape == (net.num_params,) and set(own["updater"]) == set()
    again = run_round(spec_for(net, mode="shared", round=1), net, [(0, tagged())], workers={0: own})
    assert again["stats"]["state_from"] == "driver (round 1 of this worker)" and again["worker_state"]["rounds"] == 2


# ---- elements, batches and the errors that name them ---------------------------------------


def test_tags_number_elements_where_they_began_and_single_examples_keeps_the_tag():
    pair = (X[:3], Y[:3])
    assert [t for t, _ in ex.tag_elements(4, iter([pair, pair]))] == [(4, 0), (4, 1)]
    ones = list(ex.single_examples(((4, 1), pair)))
    assert [t for t, _ in ones] == [(4, 1)] * 3 and all(x.shape == (1, F) for _, (x, _y) in ones)
    bad = ((4, 2), "not a pair")
    assert list(ex.single_examples(bad)) == [bad]  # passes whole, for the checks to name


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ("text", r"where: an element is a str; kit.spark needs \(features, labels\) pairs"),
        ((X[:2], Y[:3]), r"where: features of shape \(2, 6\) and labels of shape \(3,\) differ in length"),
        ((X[0, 0], Y[:1]), r"features of shape \(\) and labels of shape \(1,\)"),
    ],
)
def test_check_element_says_what_is_wrong(element, message):
    with pytest.raises(ValueError, match=message):
        ex.check_element(element, "where")


def test_batches_stack_elements_and_a_bad_one_is_named_by_where_it_began():
    batches = ex.batches_of(tagged(), 5, C)
    assert [b.num_examples for b in batches] == [5, 5, 5, 5, 4]
    np.testing.assert_array_equal(np.concatenate([b.features.numpy() for b in batches]), X)
    elements = tagged(partition=7)
    elements[9] = ((7, 9), (X[9:10], np.array([C])))  # class 3 of 3
    with pytest.raises(ex.BadElementError, match=r"label 3 at index 0 is out of range for 3 classes") as info:
        ex.batches_of(elements, 5, C)
    assert info.value.source == (7, 9)
    nan = tagged(partition=2)
    nan[4] = ((2, 4), (np.full((1, F), np.nan, np.float32), Y[4:5]))
    with pytest.raises(ex.BadElementError, match="NaN or infinity") as info:
        ex.batches_of(nan, 4, C)
    assert info.value.source == (2, 4)


def test_a_failed_round_names_the_partition_and_element_of_the_users_rdd():
    net = trained()
    elements = tagged(partition=3)
    elements[10] = ((3, 10), (X[:2], Y[:1]))
    with pytest.raises(ex.PartitionError, match=r"^\[kit.spark\] partition 3 \(element 10, round 5\): ValueError"):
        run_round(spec_for(net, round=5), net, [(0, elements)])  # run on partition 0, named by where it began


def test_count_and_export_fingerprint_the_same_examples_in_order(tmp_path):
    ((partition, n, digest),) = ex.count_task(per_batch=4, num_classes=C)(2, iter(tagged(2)))
    written = list(ex.export_task(str(tmp_path), per_round=10, per_batch=4, num_classes=C)(2, iter(tagged(2))))
    assert (partition, n) == (2, 24) and [w[3] for w in written] == [10, 20, 24]
    assert written[-1][4] == digest and len(digest) == len(hashlib.sha256().hexdigest())
    ((_, _, other),) = ex.count_task(per_batch=4, num_classes=C)(2, iter(tagged(2)[::-1]))
    assert other != digest  # the order is part of the fingerprint


def test_round_records_give_each_round_its_own_elements():
    records = list(ex.round_records(per_round=3, stored_rounds=4)(1, iter(range(7))))
    assert records == [(4, [0, 1, 2]), (5, [3, 4, 5]), (6, [6])]


def test_a_dataframe_row_becomes_a_one_example_pair():
    class Vector:  # what pyspark.ml's vectors offer
        def __init__(self, values):
            self.values = values

        def toArray(self):
            return np.array(self.values)

    x, y = ex.row_to_pair((Vector([1.0, 2.0]), 2))
    assert x.tolist() == [[1.0, 2.0]] and y.tolist() == [2]
    x, y = ex.row_to_pair(([0.5, 0.5], Vector([0.0, 1.0])))
    assert x.shape == (1, 2) and y.tolist() == [[0.0, 1.0]]


def test_a_task_given_a_gpu_address_beyond_what_cupy_sees_says_how_to_fix_it():
    given = {"gpu": SimpleNamespace(addresses=["99"])}
    if gpu_count() == 0:
        with pytest.raises(RuntimeError, match=r"Spark gave this task GPU 99 but kit sees no GPU on this executor"):
            ex.task_device(given)
    else:
        with pytest.raises(RuntimeError, match=r"GPU address 99 but CuPy sees \d+ GPU\(s\)"):
            ex.task_device(given)


# ---- evaluation ---------------------------------------------------------------------------------


def test_evaluation_sums_are_those_of_evaluation_and_score_on_the_whole_data():
    net = trained()
    task = eval_task(net.configuration.to_json(), Broadcast(net.params().numpy()), ("evaluation", "score", "roc"), 7, C)
    elements = [(X[i : i + 3], Y[i : i + 3]) for i in range(0, 24, 3)]
    ((confusion, (loss, count), (labels, scores)),) = task(0, iter(elements))
    ds = DataSet(X, Y, num_classes=C)
    local = Evaluation(C)
    local.eval(ds.labels, net.output(ds.features))
    np.testing.assert_array_equal(confusion, local.confusion)
    assert count == 24 and loss / count == pytest.approx(net.score(ds), rel=1e-5)
    np.testing.assert_array_equal(np.concatenate(labels), ds.labels.numpy())  # ROC's inputs, batch by batch
    np.testing.assert_allclose(np.concatenate(scores), net.output(ds.features).numpy(), rtol=1e-6)
    ((empty_confusion, (zero, none), _),) = task(1, iter([]))
    assert int(np.sum(empty_confusion)) == 0 and (zero, none) == (0.0, 0)
