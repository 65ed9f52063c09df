"""kit.spark.wire (issue 42 item 3): the typed values a round sends and gets back. They pickle
(Spark pickles a task's closure and its results) and a round run by Spark itself returns a
`RoundResult` whose stats are a `WorkerStats`: no string-keyed dict crosses the wire."""

import dataclasses
import pickle

import numpy as np

from kit.nn import Sgd, mlp
from kit.parallel import TrainingMode
from kit.spark import executor as ex
from kit.spark.aggregation import RoundPartial, array_bytes, merge_round, round_partial
from kit.spark.wire import RoundResult, RoundSource, RoundSpec, SharedWorkerState, ThresholdSettings, WorkerStats

C, F = 3, 6
X = np.random.default_rng(0).random((12, F)).astype(np.float32)
Y = np.arange(12) % C


def _spec(net, **kw):
    keys = ex.state_keys(net)
    sizes = tuple(net.state_arrays()[k].shape[0] for k in keys)
    return RoundSpec(net.configuration.to_json(), keys, sizes, 0, net.iteration, C, True, stored_rounds=1, **kw)


def test_every_wire_value_pickles_whole():
    state = SharedWorkerState(np.ones(4, np.float32), tau=1e-3, rounds=2, updater={"updater_m": np.zeros(4)})
    values = [
        _spec(
            mlp(F, hidden=(4,), n_out=C),
            mode=TrainingMode.SHARED_GRADIENTS,
            threshold=ThresholdSettings(1, 0.1, 0.2, 0.9),
        ),
        RoundResult(2, 5, WorkerStats(2, 5, pid=1, examples=8, attempt=1), scores=[0.5], worker_state=state),
        RoundPartial([], np.zeros(3), 0),
    ]
    for value in values:
        again = pickle.loads(pickle.dumps(value))
        assert type(again) is type(value)
        for f in dataclasses.fields(value):
            a, b = getattr(again, f.name), getattr(value, f.name)
            assert (a == b) if not isinstance(a, (np.ndarray, SharedWorkerState, list)) else repr(a) == repr(b)


def test_stats_rows_keep_what_was_measured_and_bytes_walk_the_dataclasses():
    stats = WorkerStats(1, 0, pid=3, examples=8, fit_ms=2.5, tau=0.1)
    assert stats.as_row() == {"worker": 1, "round": 0, "pid": 3, "examples": 8, "attempt": 0, "fit_ms": 2.5, "tau": 0.1}
    state = SharedWorkerState(np.ones(4, np.float32), updater={"updater_m": np.zeros(4)})
    result = RoundResult(1, 0, stats, messages=[np.zeros(2, np.int32)], worker_state=state)
    assert array_bytes(result) == 8 + 16 + 32
    assert SharedWorkerState.from_tree(state.as_tree()).as_tree().keys() == state.as_tree().keys()


def test_the_tree_carries_results_and_sums_typed():
    def result(w, state):
        return RoundResult(w, 0, WorkerStats(w, 0, pid=0), scores=[0.1], state=np.float32(state))

    partial = merge_round(round_partial(None, result(0, [1, 2])), round_partial(None, result(1, [3, 4])))
    assert isinstance(partial, RoundPartial) and partial.trained == 2
    assert [r.worker for r in partial.workers] == [0, 1] and all(r.state is None for r in partial.workers)
    np.testing.assert_array_equal(partial.sum, [4.0, 6.0])


def test_a_round_run_by_spark_comes_back_typed(sc):
    net = mlp(F, hidden=(4,), n_out=C, updater=Sgd(0.1), seed=0)
    batches = [(X[i : i + 4], Y[i : i + 4]) for i in range(0, 12, 4)]
    (record,) = ex.round_records(per_round=3, stored_rounds=1)(0, iter(batches))
    spec = _spec(net, source=RoundSource.CACHED)
    state = sc.broadcast(ex.pack_state(net, spec.keys))
    try:
        (result,) = sc.parallelize([record], 1).mapPartitionsWithIndex(ex.round_task(spec, state)).collect()
    finally:
        state.destroy()
    assert isinstance(result, RoundResult) and isinstance(result.stats, WorkerStats)
    assert (result.worker, result.sizes, result.iterations, result.stats.attempt) == (0, [4, 4, 4], 3, 0)
    assert result.finite and result.state.shape == (net.num_params,)
