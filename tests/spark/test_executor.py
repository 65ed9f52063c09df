"""kit.spark.executor without Spark: its tasks are plain functions of (partition, iterator), so they
run here in-process on lists, with a stand-in for a broadcast. A round trains exactly as
Network.fit_batch does on the same batches (DIRECT, EXPORT to Spark's storage, EXPORT to files);
state packs and unpacks (a mixed network's master weights included); SHARED's messages are what
the worker applied; errors name the element where it began; evaluation's sums are Evaluation's."""

import hashlib
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from kit.core.devices import gpu_count
from kit.data import ArrayIterator, DataSet
from kit.nn import Adam, Network, Sgd, mlp
from kit.nn.evaluation import Evaluation
from kit.parallel import TrainingMode
from kit.parallel.threshold import AdaptiveThresholdAlgorithm, threshold_decode
from kit.spark import SharedTrainingMaster
from kit.spark import executor as ex
from kit.spark.executor_eval import eval_task
from kit.spark.wire import ThresholdSettings

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


def spec_for(net, send_updater=True, mode=TrainingMode.AVERAGING, **kw):
    keys = ex.state_keys(net) if send_updater else ("params",)
    sizes = tuple(net.state_arrays()[k].shape[0] for k in keys)
    return ex.RoundSpec(
        config_json=net.configuration.to_json(),
        keys=keys,
        sizes=sizes,
        round=kw.pop("round", 0),
        base_iteration=net.iteration,
        num_classes=C,
        send_updater=send_updater,
        mode=mode,
        stored_rounds=kw.pop("stored_rounds", 1),
        **kw,
    )


def cut(partition=0, per_batch=4, elements=None, offsets=None):
    """A partition's elements cut into mini-batches, as kit.spark.prepared does it (one place, any approach)."""
    pieces = ex.cut_task(per_batch, C, offsets)(
        partition, iter(elements if elements is not None else tagged(partition))
    )
    return list(ex.join_pieces(iter(pieces)))


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
    (record,) = ex.round_records(per_round=6, stored_rounds=1)(0, iter(cut()))  # (worker * stored + round, batches)
    result = run_round(spec, net, [record])
    scores = fit_batches(ref)
    assert isinstance(result, ex.RoundResult) and isinstance(result.stats, ex.WorkerStats)
    assert result.worker == 0 and result.sizes == [4] * 6 and result.finite
    assert result.iterations == 6 and result.skipped == [False] * 6  # the steps moved the counter by 6
    np.testing.assert_allclose(result.scores, scores, rtol=1e-6)
    np.testing.assert_allclose(result.state, ex.pack_state(ref, spec.keys), rtol=1e-6, atol=1e-7)
    stats = result.stats
    assert (stats.examples, stats.batches, stats.round, stats.attempt) == (24, 6, 0, 0)
    assert stats.received_bytes == ex.pack_state(net, spec.keys).nbytes


def test_without_the_updater_each_round_starts_it_fresh_and_sends_the_parameters_only():
    net = trained()
    ref = net.clone()
    for arr in ref.updater_state.values():  # DL4J's saveUpdater(false)
        arr.assign(np.zeros(arr.shape, arr.dtype))
    spec = spec_for(net, send_updater=False)
    (record,) = ex.round_records(per_round=6, stored_rounds=1)(0, iter(cut()))
    result = run_round(spec, net, [record])
    fit_batches(ref)
    assert result.state.shape == (net.num_params,)
    np.testing.assert_allclose(result.state, ref.params().numpy(), rtol=1e-6, atol=1e-7)


def test_every_source_reads_the_same_mini_batches_and_trains_alike(tmp_path):
    """DIRECT (cached arrays), EXPORT into Spark's storage (.npz bytes) and EXPORT to files read
    the mini-batches cut in one place; the spec says which record a task gets (no sniffing)."""
    net = trained(Sgd(0.1))
    batches = cut(1)
    (cached,) = ex.round_records(per_round=6, stored_rounds=2)(1, iter(batches))
    (stored,) = ex.export_records(per_round=6, stored_rounds=2)(1, iter(batches))
    (written,) = ex.export_task(str(tmp_path), per_round=6)(1, iter(batches))
    worker, k, path, n, _digest, attempt = written
    assert cached[0] == stored[0] == 2 and isinstance(stored[1], bytes)  # key 2 = worker 1, round 0
    assert (worker, k, n, attempt) == (1, 0, 24, 0) and path.endswith("w1_r0.npz")
    results = {
        source: run_round(spec_for(net, source=source, stored_rounds=2), net, [record], partition=1)
        for source, record in (
            (ex.RoundSource.CACHED, cached),
            (ex.RoundSource.STORED, stored),
            (ex.RoundSource.FILE, (worker, path)),
        )
    }
    direct = results[ex.RoundSource.CACHED]
    for other in results.values():
        assert other.worker == direct.worker == 1 and other.sizes == direct.sizes
        np.testing.assert_array_equal(other.state, direct.state)


def test_an_empty_partition_is_a_worker_with_nothing_to_do():
    net = trained()
    result = run_round(spec_for(net), net, [], partition=3)
    assert (result.worker, result.state, result.scores, result.stats.examples) == (3, None, [], 0)
    assert result.stats.as_row() == {"worker": 3, "round": 0, "pid": result.stats.pid, "examples": 0, "attempt": 0}


def test_a_shared_round_sends_exactly_what_the_worker_applied_and_keeps_the_worker_s_state():
    net = trained(Sgd(0.5))
    threshold = ThresholdSettings(1e-3, 1e-4, 1e-2, 0.5 ** (1 / 20))
    spec = spec_for(net, mode=TrainingMode.SHARED_GRADIENTS, threshold=threshold)
    start = net.params().numpy().astype(np.float64)
    (record,) = ex.round_records(per_round=6, stored_rounds=1)(0, iter(cut()))
    result = run_round(spec, net, [record])
    applied = np.zeros(net.num_params, np.float32)
    for message in result.messages:
        threshold_decode(message, applied)
    worker = ex.network_for(spec.config_json, spec.workspace_mode)  # the executor's network, reused
    np.testing.assert_allclose(worker.params().numpy(), start - applied, rtol=1e-6, atol=1e-6)
    assert result.messages and result.state is None and result.stats.state_from == "new"
    own = result.worker_state
    assert isinstance(own, ex.SharedWorkerState)
    assert own.rounds == 1 and own.residual.shape == (net.num_params,) and set(own.updater) == set()
    tree = own.as_tree()  # the driver's (and a checkpoint's) form, and back
    assert ex.SharedWorkerState.from_tree(tree).rounds == 1 and set(tree) >= {"residual", "updater", "tau"}
    spec1 = spec_for(net, mode=TrainingMode.SHARED_GRADIENTS, threshold=threshold, round=1)
    again = run_round(spec1, net, [record], workers={0: own})
    assert again.stats.state_from == "driver (round 1 of this worker)" and again.worker_state.rounds == 2


# ---- the shared worker's step: a threshold at least the step's largest update entry (issue 44)


def _steps(update: np.ndarray, steps: int, multiple: float | None) -> tuple[ex.SharedWorkerState, np.ndarray, list]:
    """`steps` identical updates through encode_step with SharedTrainingMaster's default threshold
    settings; the worker's state, what its messages moved, and the threshold of each step."""
    algo = AdaptiveThresholdAlgorithm(**SharedTrainingMaster(16).threshold)
    state, sent, taus = ex.SharedWorkerState(np.zeros(update.size, np.float32)), np.zeros(update.size, np.float32), []
    for it in range(steps):
        message, _ = ex.encode_step(state, update, algo, multiple, it)
        if message is not None:
            threshold_decode(message, sent)
        taus.append(state.tau)
    return state, sent, taus


def test_a_step_bigger_than_the_threshold_raises_it_and_no_entry_falls_behind():
    """Powers of two, so nothing rounds. With the default floor the threshold is the largest entry,
    2**-8, every step, and after 8 steps every entry has been sent whole: 8, 4 and 1 quanta. Without
    it (DL4J's threshold alone, kit's default before) the threshold stays at 1e-3 (four entries:
    every message a bitmap, counted as 1/16, within the band) and a message moves an entry by one
    threshold a step, so the two big entries fall further behind every step."""
    update = np.array([2**-8, -(2**-9), 2**-11, 0.0], np.float32)
    assert SharedTrainingMaster(16).options.threshold_update_multiple == 1.0
    state, sent, taus = _steps(update, 8, 1.0)
    assert taus == [2**-8] * 8
    np.testing.assert_array_equal(sent, [8 * 2**-8, -4 * 2**-8, 2**-8, 0.0])
    np.testing.assert_array_equal(state.residual, np.zeros(4))
    state, sent, taus = _steps(update, 8, None)
    tau = float(np.float32(1e-3))
    assert taus == [1e-3] * 8
    np.testing.assert_array_equal(sent[:2], [8 * tau, -8 * tau])
    np.testing.assert_allclose(state.residual[:2], [8 * (2**-8 - tau), -8 * (2**-9 - tau)], rtol=1e-5)


FLOOR_ROWS = [  # (updater, input scale, max_target_sparsity): learning rates and layer scales far apart
    (Adam(1e-3), 1.0, 1 / 16),
    (Adam(1e-2), 1.0, 1 / 16),
    (Adam(1e-1), 1.0, 1e-2),
    (Adam(1e-2), 30.0, 1e-2),
    (Sgd(0.05), 1.0, 1 / 16),
    (Sgd(0.5), 10.0, 1e-2),
    (Sgd(0.5), 0.1, 1e-3),
]


def _residual_over_threshold(updater, scale, sparsity, multiple) -> float:
    """A real network's steps (a tiny MLP, two workers' averaged share) through encode_step: the
    largest |residual| over the largest threshold so far (below 1: no entry fell behind)."""
    net = mlp(8, hidden=(16,), n_out=3, updater=updater, seed=3)
    rng = np.random.default_rng(0)
    x = rng.normal(0, scale, (32, 8)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 32)]
    options = {**SharedTrainingMaster(16).threshold, "max_target_sparsity": sparsity}
    algo, state = AdaptiveThresholdAlgorithm(**options), ex.SharedWorkerState(np.zeros(net.num_params, np.float32))
    worst, highest = 0.0, 0.0
    for it in range(30):
        old = net.params().numpy().copy()
        net.fit_batch(DataSet(x[it % 4 * 8 : it % 4 * 8 + 8], y[it % 4 * 8 : it % 4 * 8 + 8]))
        ex.encode_step(state, (old - net.params().numpy()) / 2, algo, multiple, it)
        highest = max(highest, state.tau)
        worst = max(worst, float(np.abs(state.residual).max()) / highest)
    return worst


@pytest.mark.parametrize("updater, scale, sparsity", FLOOR_ROWS)
def test_with_the_floor_no_entry_falls_behind_at_any_rate_or_scale(updater, scale, sparsity):
    """The residual stays below the largest threshold so far: a step moves no entry by more than
    the threshold, so what is left after one quantum is sent is never more than before."""
    assert _residual_over_threshold(updater, scale, sparsity, 1.0) < 1 + 1e-5


def test_without_the_floor_entries_fall_behind_at_large_rates():
    """The property above is not a given: DL4J's threshold alone lets the residual run away."""
    assert _residual_over_threshold(Adam(1e-1), 1.0, 1e-2, None) > 5


# ---- elements, mini-batches cut once, and the errors that name them -----------------------------


def test_tags_number_elements_where_they_began():
    pair = (X[:3], Y[:3])
    assert [t for t, _ in ex.tag_elements(4, iter([pair, pair]))] == [(4, 0), (4, 1)]


@pytest.mark.parametrize("sizes", [(24,), (1,) * 24, (5, 7, 1, 11), (3, 3, 3, 3, 3, 3, 3, 3)])
@pytest.mark.parametrize("per_batch", [1, 4, 5, 24, 30])
def test_mini_batches_are_per_batch_examples_in_order_whatever_the_elements_hold(sizes, per_batch):
    """The class: any split of the examples into elements, any batch size, one partition or split
    over two (joined after the shuffle): mini-batch b holds examples b * per_batch ... in order."""
    edges = np.cumsum((0, *sizes))
    elements = [(X[a:b], Y[a:b]) for a, b in itertools.pairwise(edges)]
    whole = cut(0, per_batch, list(ex.tag_elements(0, iter(elements))))
    half = len(elements) // 2
    first, second = elements[:half], elements[half:]
    offset = int(sum(len(x) for x, _ in first))
    pieces = list(ex.cut_task(per_batch, C, [0, offset])(0, ex.tag_elements(0, iter(first))))
    pieces += list(ex.cut_task(per_batch, C, [0, offset])(1, ex.tag_elements(1, iter(second))))
    joined = list(ex.join_pieces(iter(pieces[::-1])))  # any order after a shuffle
    for batches in (whole, joined):
        assert [len(x) for x, _ in batches] == [len(X[i : i + per_batch]) for i in range(0, len(X), per_batch)]
        np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), X)
        np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), Y)


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


@pytest.mark.parametrize(
    ("index", "element", "message"),
    [
        (10, (X[:2], Y[:1]), r"ValueError: features of shape \(2, 6\) and labels of shape \(1,\) differ"),
        (9, (X[9:10], np.array([C])), r"label 3 at index 0 is out of range for 3 classes"),
        (4, (np.full((1, F), np.nan, np.float32), Y[4:5]), "NaN or infinity"),
        (2, "text", r"an element is a str"),
    ],
)
def test_cutting_names_a_bad_element_by_where_it_began(index, element, message):
    """The cut checks every piece as a mini-batch (shape, finite features, labels) and names the
    partition and element of the user's RDD, before any shuffle moves it."""
    elements = tagged(partition=3)
    elements[index] = ((3, index), element)
    with pytest.raises(
        ex.PartitionError, match=rf"^\[kit.spark\] partition 3 \(element {index}, prepare\): .*{message}"
    ):
        cut(partition=0, elements=elements)  # run on partition 0, named by where it began


def test_count_and_export_fingerprint_the_same_mini_batches_in_order(tmp_path):
    batches = cut(2)
    ((worker, n, count, digest, attempt),) = ex.count_task(2, iter(batches))
    written = list(ex.export_task(str(tmp_path), per_round=2)(2, iter(batches)))
    assert (worker, n, count, attempt) == (2, 24, 6, 0) and [w[3] for w in written] == [8, 16, 24]
    assert written[-1][4] == digest and len(digest) == len(hashlib.sha256().hexdigest())
    ((_, _, _, other, _),) = ex.count_task(2, iter(batches[::-1]))
    assert other != digest  # the order is part of the fingerprint
    assert list(ex.count_examples(2, iter(tagged(2)))) == [(2, 24, 0)]


def test_round_records_give_each_round_its_own_mini_batches():
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
