"""Replayed training (kit.nn.replay): the same numbers and the same counts as the step run through
the layers, in every workspace mode, for every replayable layer, loss and updater; and the layers
run whenever a replay cannot be trusted (a layer computing outside the kernels, a watching tool,
another thread, changed state)."""

import threading
import weakref
from typing import Any

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet
from kit.nn import (
    MSE,
    Adam,
    BatchNorm,
    Dense,
    Flatten,
    Nesterovs,
    Network,
    ReLU,
    Sgd,
    Sigmoid,
    Softmax,
    Tanh,
    WorkspaceMode,
    mlp,
)
from kit.nn.replay import declined, replay_off
from kit.workspaces.workspace import DebugMode, StaleArrayError, set_debug_mode, track_allocation_sites

MODES = list(WorkspaceMode)


def _data(n=40, n_in=12, n_out=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_in)).astype("float32")
    y = np.eye(n_out, dtype="float32")[rng.integers(0, n_out, n)]
    return DataSet(x, y)


_PLAIN = weakref.WeakSet()  # networks these tests train with the switch off


def training_declined(net):
    return declined(net, training=True)


def _twins(make):
    """The same network twice: replayed, and one trained with the switch off (its layers every step)."""
    planned, plain = make(), make()
    _PLAIN.add(plain)
    return planned, plain


def _fit(net, ds):
    if net in _PLAIN:
        with replay_off():
            return net.fit_batch(ds)
    return net.fit_batch(ds)


def _run(net, data, epochs=3, batch=8):
    """Scores of every iteration, the heap allocations counted, the parameters and updater state after."""
    scores = []
    before = kit.memory.heap_allocations(this_thread=True), kit.memory.heap_bytes(this_thread=True)
    for _ in range(epochs):
        for ds in ArrayIterator(data, batch_size=batch):
            scores.append(_fit(net, ds))
    after = kit.memory.heap_allocations(this_thread=True), kit.memory.heap_bytes(this_thread=True)
    state = {k: v.numpy().copy() for k, v in net.updater_state.items()}
    return scores, (after[0] - before[0], after[1] - before[1]), net.flat_params.numpy().copy(), state


def _workspace_counts(net):
    return {
        name.split("/")[-1]: {k: v for k, v in s.items() if k not in ("name", "thread")}
        for name, s in net.workspace_stats()["training"].items()
    }


def _assert_same(planned, plain, data, **kw):
    a, b = _run(planned, data, **kw), _run(plain, data, **kw)
    assert planned.train_plans.used > 0, planned.train_plans.declined
    assert plain.train_plans.used == 0
    assert a[0] == b[0]  # every score, bit for bit
    assert a[1] == b[1]  # heap allocations and bytes
    np.testing.assert_array_equal(a[2], b[2])
    assert a[3].keys() == b[3].keys()
    for k in a[3]:
        np.testing.assert_array_equal(a[3][k], b[3][k])
    assert _workspace_counts(planned) == _workspace_counts(plain)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("updater", [Sgd, Nesterovs, Adam])
def test_same_numbers_and_counts_in_every_mode_and_updater(mode, updater):
    def make():
        return mlp(12, hidden=(16, 8), n_out=5, updater=updater(0.05), training_workspace_mode=mode, seed=4)

    _assert_same(*_twins(make), _data())


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("activation", [ReLU, Tanh, Sigmoid, Softmax])
@pytest.mark.parametrize("loss", ["xent", "mse"])
def test_every_planned_layer_and_loss_with_l2(mode, activation, loss):
    def make():
        layers = [Dense(16), activation(), Dense(8), activation(), Dense(5)]
        return Network(
            layers,
            (12,),
            loss=MSE() if loss == "mse" else None,
            updater=Adam(0.01),
            l2=1e-3,
            training_workspace_mode=mode,
            seed=2,
        )

    _assert_same(*_twins(make), _data(seed=1), epochs=2, batch=10)


def test_separate_mode_records_once_its_working_memory_has_learned():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SEPARATE)
    ds = _data(n=8)
    for _ in range(12):
        net.fit_batch(ds)
    plans = net.train_plans
    assert plans.batch_sizes == [8] and plans.recorded > 1  # the first recordings spilled: not kept
    assert plans.used == 12 - 1 - plans.recorded


def test_first_sight_unplanned_second_recorded_then_replayed():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SINGLE)
    ds = _data(n=8)
    net.fit_batch(ds)
    assert (net.train_plans.recorded, net.train_plans.used, len(net.train_plans)) == (0, 0, 0)
    net.fit_batch(ds)
    assert (net.train_plans.recorded, net.train_plans.used, net.train_plans.batch_sizes) == (1, 0, [8])
    net.fit_batch(ds)
    net.fit_batch(ds)
    assert (net.train_plans.recorded, net.train_plans.used) == (1, 2)
    net.fit_batch(_data(n=5))  # another batch size: its first sight, unplanned
    assert net.train_plans.batch_sizes == [8]


def test_plans_are_bounded_least_recently_used_first():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.NONE)
    net.train_plans.limit = 2
    for n in (3, 4, 5, 3):
        for _ in range(3):
            net.fit_batch(_data(n=n))
    assert net.train_plans.batch_sizes == [5, 3]


def test_a_plan_keeps_no_batch():
    import weakref

    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.NONE)
    x = np.random.default_rng(0).standard_normal((8, 12)).astype("float32")
    net.fit_batch(DataSet(x, np.eye(5, dtype="float32")[np.arange(8) % 5]))
    batch = DataSet(x.copy(), np.eye(5, dtype="float32")[np.arange(8) % 5])
    net.fit_batch(batch)  # recorded on this batch
    assert net.train_plans.recorded == 1
    gone = weakref.ref(batch.features.data.base if batch.features.data.base is not None else batch.features.data)
    del batch
    assert gone() is None


def test_a_layer_computing_outside_the_kernels_trains_through_its_layers_and_says_so():
    class Halved(BatchNorm):
        def forward(self, x, mgr, training):
            y = super().forward(x, mgr, training)
            y.data[...] *= 0.5  # outside every kernel: a replay would skip it
            return y

    net = Network([Dense(8), Halved(), ReLU(), Dense(5)], (12,), updater=Sgd(0.1))
    for _ in range(3):
        net.fit_batch(_data(n=8))
    assert net.train_plans.used == 0 and net.train_plans.recorded == 0
    assert "Halved" in net.train_plans.declined and "run the layers" in net.train_plans.declined


def test_a_view_of_the_batch_handed_to_a_kernel_is_recorded_but_never_replayed():
    planned, plain = _twins(lambda: Network([Flatten(), Dense(5)], (12,), updater=Sgd(0.1), seed=3))
    a, b = _run(planned, _data(), epochs=2), _run(plain, _data(), epochs=2)
    assert planned.train_plans.declined is None and planned.train_plans.recorded > 0
    assert planned.train_plans.used == 0 and len(planned.train_plans) == 0  # Dense reads a view of the batch
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[2], b[2])


def test_a_subclass_with_its_own_backward_is_not_planned_by_its_parents_kernel():
    class Doubled(Dense):
        def backward(self, eps, mgr):
            dx = super().backward(eps, mgr)
            self.grads["W"].data[...] *= 2
            return dx

    class Plain(Dense):
        pass

    assert "Doubled" in training_declined(Network([Doubled(5)], (12,)))
    assert training_declined(Network([Plain(5)], (12,))) is None


def test_mixed_precision_trains_unplanned():
    net = mlp(12, hidden=(8,), n_out=5, dtype="float16", master_dtype="float32", loss_scale="dynamic")
    for _ in range(3):
        net.fit_batch(_data(n=8))
    assert net.train_plans.used == 0 and "mixed precision" in training_declined(net)


def test_batches_that_need_converting_train_unplanned_until_converted_once():
    from kit.data import load_digits

    digits, _ = load_digits()
    assert digits.features.dtype == np.float64
    net = mlp(64, hidden=(8,), n_out=10, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SINGLE)
    batches = list(ArrayIterator(digits.take(np.arange(64)), batch_size=16))
    for ds in batches * 2:
        net.fit_batch(ds)
    assert net.train_plans.used == 0 and net.train_plans.recorded == 0
    raw = DataSet(digits.features.numpy()[:16], digits.labels.numpy()[:16])  # NumPy arrays: asarray'd
    for _ in range(3):
        net.fit_batch(DataSet(raw.features.numpy().astype(net.dtype), raw.labels.numpy()))
    assert net.train_plans.used == 1  # the remedy the module docstring gives: convert once


@pytest.mark.parametrize("tool", ["timeline", "sites", "spill", "bypass", "cache"])
def test_tools_that_watch_every_array_see_an_unplanned_step(tool):
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SINGLE)
    ds = _data(n=8)
    for _ in range(3):
        net.fit_batch(ds)
    used = net.train_plans.used
    assert used == 1
    if tool == "timeline":
        with kit.memory_timeline() as tl:
            net.fit_batch(ds)
        assert sum(len(tl.cycle_events(cycle=c["cycle"], workspace=c["workspace"])[1]) for c in tl.cycles) > 0
    else:
        if tool == "sites":
            track_allocation_sites(True)
        elif tool == "cache":
            kit.memory.set_max_host_cache(1 << 20)
        else:
            set_debug_mode(DebugMode.SPILL_EVERYTHING if tool == "spill" else DebugMode.BYPASS_EVERYTHING)
        net.fit_batch(ds)
    assert net.train_plans.used == used
    kit.state.reset()  # the tool off again, this thread's workspaces destroyed: the plan is recorded anew
    for _ in range(4):
        net.fit_batch(ds)
    assert net.train_plans.used > used


def test_state_the_plan_fixed_changes_and_the_step_follows():
    def make():
        return mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), seed=1)

    planned, plain = _twins(make)
    data = _data()
    for changes in range(4):
        for net in (planned, plain):
            if changes == 1:
                net.updater.lr *= 0.5  # read live: no new plan needed
            elif changes == 2:
                net.updater = Adam(0.01)
                net._allocate_buffers()  # new state buffers for Adam, as a user would get from a new network
            elif changes == 3:
                net.l2 = 1e-2
            _run(net, data, epochs=1)
        np.testing.assert_array_equal(planned.flat_params.numpy(), plain.flat_params.numpy())
    assert planned.train_plans.recorded >= 3  # Adam and l2 each dropped the plans; the lr did not


def test_a_destroyed_workspace_drops_the_plan():
    planned, plain = _twins(lambda: mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), seed=1))
    data = _data()
    _run(planned, data, epochs=1)
    _run(plain, data, epochs=1)
    planned.train_mgr.destroy()
    plain.train_mgr.destroy()
    _assert_same(planned, plain, data, epochs=2)


def test_another_thread_does_not_replay_this_threads_plan():
    planned, plain = _twins(lambda: mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), seed=1))
    data = _data()
    for net in (planned, plain):
        _run(net, data, epochs=2)
    used = planned.train_plans.used

    def other():
        for net in (planned, plain):
            for ds in ArrayIterator(data, batch_size=8):
                _fit(net, ds)

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()
    np.testing.assert_array_equal(planned.flat_params.numpy(), plain.flat_params.numpy())
    # the other thread's own workspaces: it records a plan of its own, on its second batch
    assert planned.train_plans.used >= used


def test_a_stale_batch_raises_planned_as_unplanned():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SINGLE)
    ds = _data(n=8)
    for _ in range(3):
        net.fit_batch(ds)
    assert net.train_plans.used == 1
    ws = kit.get_workspace_for_current_thread(name="BATCHES")
    with ws:
        features = kit.zeros(ds.features.shape)  # carved in the workspace: stale once it closes
        features += ds.features
        stale = DataSet(features, ds.labels)
    with pytest.raises(StaleArrayError):
        net.fit_batch(stale)


def test_bad_input_is_refused_before_the_plan_runs():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode=WorkspaceMode.SINGLE)
    ds = _data(n=8)
    for _ in range(3):
        net.fit_batch(ds)
    before = net.flat_params.numpy().copy()
    x = ds.features.numpy().copy()
    x[2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        net.fit_batch(DataSet(x, ds.labels))
    with pytest.raises(ValueError, match="label row"):
        net.fit_batch(DataSet(ds.features, np.full((8, 5), 0.5, dtype="float32")))
    np.testing.assert_array_equal(net.flat_params.numpy(), before)  # nothing learned from either


class _Shifty(Sgd):
    """Sgd that asks its manager for one working array of `shapes[step % 2]` (None: none) before
    each update: an updater that does not repeat what a plan recorded of it. (It hands `scratch`
    on to Sgd's apply, so it keeps Sgd's update over the gradient: it says so.)"""

    exact_in_place = True

    def __init__(self, lr: float, shapes: tuple[Any, Any]) -> None:
        super().__init__(lr)
        self.shapes, self.calls = shapes, 0

    def apply(self, params, grads, state, step, mgr, scratch=False):
        from kit.nn.workspace_mgr import ArrayType

        self.calls += 1
        shape = self.shapes[self.calls % 2]
        if shape is not None:
            mgr.create(ArrayType.UPDATER_WORKING_MEM, shape, params.dtype, params.device)
        super().apply(params, grads, state, step, mgr, scratch)


@pytest.mark.parametrize(
    ("shapes", "named"),
    [(((3,), (4,)), ["(4,)", "(3,)"]), ((None, (4,)), ["(4,)", "0 array(s) only"])],
    ids=["another-shape", "more-than-recorded"],
)
def test_an_updater_that_asks_for_other_arrays_is_refused_and_the_printed_remedy_runs(shapes, named):
    # the plan is recorded at the second iteration (an even call), replayed from the third (odd)
    net = mlp(12, hidden=(8,), n_out=5, updater=_Shifty(0.1, shapes), training_workspace_mode=WorkspaceMode.SINGLE)
    ds = _data(n=8)
    with pytest.raises(RuntimeError, match=r"net\.train_plans\.clear\(\)") as err:
        for _ in range(6):
            net.fit_batch(ds)
    assert net.updater.calls == 3  # refused at the first replay
    for words in named:  # what it asked for, and what the plan holds
        assert words in str(err.value)
    assert not any(s["open"] for s in net.workspace_stats()["training"].values())  # its scopes closed
    net.train_plans.clear()  # the remedy the message prints
    before = net.flat_params.numpy().copy()
    with replay_off():  # (this updater never repeats itself: train it through its layers)
        net.fit_batch(ds)
    assert not np.array_equal(net.flat_params.numpy(), before)


def test_an_updater_that_asks_for_fewer_arrays_than_recorded_drops_the_plan_and_trains_as_unplanned():
    nets = [
        mlp(12, hidden=(8,), n_out=5, updater=_Shifty(0.1, ((3,), None)), training_workspace_mode=WorkspaceMode.SINGLE)
        for _ in range(2)
    ]
    _PLAIN.add(nets[1])
    ds = _data(n=8)
    for _ in range(6):
        scores = [_fit(net, ds) for net in nets]
        assert scores[0] == scores[1]
    np.testing.assert_array_equal(nets[0].flat_params.numpy(), nets[1].flat_params.numpy())
    assert nets[0].train_plans.recorded >= 2  # recorded again after each replay that asked for less


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_a_kernel_that_raises_in_a_replay_closes_its_scopes_and_training_goes_on_as_unplanned(mode):
    def make():
        return mlp(12, hidden=(16, 8), n_out=5, updater=Sgd(0.05), training_workspace_mode=mode, seed=4)

    planned, plain = _twins(make)
    ds = _data(n=8)
    for _ in range(20):  # until one iteration was replayed (SEPARATE's working memory learns for a few)
        assert planned.fit_batch(ds) == _fit(plain, ds)
        if planned.train_plans.used:
            break
    assert planned.train_plans.used == 1
    huge = DataSet(np.full((8, 12), 3e38, np.float32), ds.labels)  # finite, but x @ W overflows
    for net in (planned, plain):
        before = net.flat_params.numpy().copy()
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow") as err:
            _fit(net, huge)
        replayed = any(entry.name == "replay" for entry in err.traceback)
        assert replayed == (net is planned)  # raised inside the replay (or the unplanned forward)
        np.testing.assert_array_equal(net.flat_params.numpy(), before)  # raised in forward: nothing learned
        assert not any(s["open"] for s in net.workspace_stats()["training"].values())
    assert planned.train_plans.used == 1  # `used` counts the replays that ended
    for _ in range(3):  # and the plan goes on being replayed, with the unplanned twin's numbers
        assert planned.fit_batch(ds) == _fit(plain, ds)
    assert planned.train_plans.used == 4
    np.testing.assert_array_equal(planned.flat_params.numpy(), plain.flat_params.numpy())


def test_an_iteration_inside_its_own_open_workspace_runs_unplanned_and_the_plans_come_back():
    def make():
        return mlp(12, hidden=(16, 8), n_out=5, updater=Sgd(0.05), training_workspace_mode=WorkspaceMode.SINGLE)

    planned, plain = _twins(make)
    ds = _data(n=8)
    for _ in range(3):
        assert planned.fit_batch(ds) == _fit(plain, ds)
    assert planned.train_plans.used == 1
    for net in (planned, plain):  # the iteration's scope is open already: `with ws` re-enters it
        with net.train_mgr.iteration():
            for _ in range(3):
                _fit(net, ds)
    assert planned.train_plans.used == 1  # neither replayed (the plan opens each scope anew) nor recorded
    np.testing.assert_array_equal(planned.flat_params.numpy(), plain.flat_params.numpy())
    assert _workspace_counts(planned) == _workspace_counts(plain)
    for _ in range(4):
        assert planned.fit_batch(ds) == _fit(plain, ds)
    assert planned.train_plans.used > 1  # planned again once the scope closed
    assert _workspace_counts(planned) == _workspace_counts(plain)
