"""Every path that writes values into a network (issue 43's class, the 2026-11-29 pass): a value its
dtype cannot hold, or a state that is not finite, is refused in words that name the true cause,
and the network is as it was (parameters, updater state, counters, BatchNorm's running statistics);
a step not taken leaves the state of a run that never saw it; a recorded plan never replays a
hyperparameter that changed."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet
from kit.nn import MSE, Adam, BatchNorm, Dense, Dropout, Network, ReLU, Sgd, mlp
from kit.nn.loop import NonFiniteScoreError
from kit.nn.mixed import FIXED_GIVE_UP, LossScaleError
from kit.parallel import ParallelWrapper

RNG = np.random.default_rng(0)
GOOD = [DataSet(RNG.normal(size=(8, 4)).astype(np.float32), RNG.integers(0, 3, 8), num_classes=3) for _ in range(3)]


def _bn_net(**kw):
    return Network([Dense(8), BatchNorm(), ReLU(), Dense(3)], input_shape=(4,), updater=Adam(1e-2), seed=0, **kw)


def _mse_net(dtype="float32"):
    return Network([Dense(2)], input_shape=(3,), loss=MSE(), updater=Adam(1e-2), dtype=dtype, seed=0)


def _state(net):
    """Everything a refused write must leave as it was."""
    arrays = {k: v.numpy().copy() for k, v in net.state_arrays().items()}
    return arrays, net.iteration, net.epoch


def _same(before, net):
    arrays, iteration, epoch = before
    now = {k: v.numpy() for k, v in net.state_arrays().items()}
    return (
        (iteration, epoch) == (net.iteration, net.epoch)
        and arrays.keys() == now.keys()
        and all(np.array_equal(arrays[k], now[k], equal_nan=True) for k in arrays)
    )


OVERFLOWING = DataSet(np.full((4, 3), 1e25, np.float32), np.zeros((4, 2), np.float32))  # MSE's square: inf


def _infinite_params(net):
    net.flat_params.data[0] = np.inf
    return net


# (the network, the write, the exception, words the message must hold)
WRITES = {
    "labels a float16 network cannot hold": (
        lambda: _mse_net("float16"),
        lambda n: n.fit_batch(DataSet(np.ones((4, 3), np.float16), np.full((4, 2), 7e4, np.float32))),
        ValueError,
        "labels: 8 finite values exceed float16's range",
    ),
    "whole-number features a float16 network cannot hold": (
        lambda: _mse_net("float16"),
        lambda n: n.output(np.full((2, 3), 70_000, np.int64)),
        ValueError,
        "features: 6 finite values exceed float16's range",
    ),
    "features a float32 network cannot hold, on the replayed path": (
        lambda: _mse_net(),
        lambda n: [n.output(np.ones((2, 3))), n.output(np.ones((2, 3))), n.output(np.full((2, 3), 1e39))],
        ValueError,
        "exceed float32's range (largest 3.40282e+38); first at index [0, 0], 1e+39; scale the features (divide "
        "by their largest value) or train a network of a wider dtype (float64)",
    ),
    "a gradient that is not finite, applied by hand": (
        lambda: _mse_net(),
        lambda n: [n.compute_gradient_and_score(OVERFLOWING), n.apply_update()],
        NonFiniteScoreError,
        "apply_update: the gradients hold NaN or infinity",
    ),
    "a loss that is not finite, in fit": (
        lambda: _mse_net(),
        lambda n: n.fit(OVERFLOWING),
        NonFiniteScoreError,
        "the loss is inf",
    ),
    "saving a state that is not finite": (
        lambda: _infinite_params(mlp(4, hidden=(3,), n_out=2)),
        lambda n: n.save("/tmp/never-written.npz"),
        ValueError,
        "save: params contain NaN or infinity",
    ),
    "copying a state that is not finite": (
        lambda: mlp(4, hidden=(3,), n_out=2),
        lambda n: n.copy_state_from(_infinite_params(mlp(4, hidden=(3,), n_out=2))),
        ValueError,
        "copy_state_from: params contain NaN or infinity",
    ),
    "set_params with infinity": (
        lambda: mlp(4, hidden=(3,), n_out=2),
        lambda n: n.set_params(np.full(n.num_params, np.inf)),
        ValueError,
        "NaN or infinity",
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_value_the_network_cannot_hold_is_refused_naming_it_and_changes_nothing(write):
    make, call, error, said = WRITES[write]
    net = make()
    net.fit_batch(DataSet(np.ones((4, *net.input_shape), net.dtype), np.eye(net.output_shape[0])[[0, 1, 0, 1]]))
    before = _state(net)
    with pytest.raises(error) as info:
        call(net)
    assert said in str(info.value), str(info.value)
    if write != "saving a state that is not finite" and write != "copying a state that is not finite":
        assert _same(before, net)  # (those two start from a network whose state is already not finite)


def test_a_refused_step_is_no_iteration_and_adam_s_later_steps_equal_a_clean_run():
    clean, refused = _mse_net(), _mse_net()
    data = [DataSet(RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(4, 2)).astype(np.float32))] * 3
    clean.fit(data[0])
    refused.fit(data[0])
    with pytest.raises(NonFiniteScoreError):
        refused.fit(DataSet(np.full((4, 3), 1e25, np.float32), np.zeros((4, 2), np.float32)))
    assert refused.iteration == clean.iteration == 1
    for ds in data[1:]:
        clean.fit(ds)
        refused.fit(ds)
    np.testing.assert_array_equal(refused.params().numpy(), clean.params().numpy())


def test_batchnorm_s_running_statistics_move_only_on_finite_batch_statistics():
    """Features of 1e20 are finite in float32, their squares are not: the batch variance overflowed
    and the running variance became inf, every later answer 0.5/0.5."""
    net = Network([BatchNorm(), Dense(2)], input_shape=(2,), seed=0)
    bn = net.layers[0]
    net.fit_batch(DataSet(np.array([[1e20, -1e20], [-1e20, 1e20]], np.float32), np.eye(2)))
    assert np.all(np.isfinite(bn.params["var"].numpy())) and np.all(np.isfinite(bn.params["mean"].numpy()))


@pytest.mark.parametrize("scale", ["dynamic", 2.0**10], ids=["dynamic", "fixed"])
def test_a_skipped_mixed_precision_step_leaves_batchnorm_and_the_master_weights_as_a_clean_run(scale):
    clean, skipped = (_bn_net(dtype="float16", master_dtype="float32", loss_scale=scale) for _ in range(2))
    clean.fit_batch(GOOD[0])
    skipped.fit_batch(GOOD[0])
    bad = DataSet(np.full((8, 4), 6e4, np.float32) * np.array([1, -1, 1, -1], np.float32), GOOD[0].labels)
    skipped.fit_batch(bad)  # the float16 forward overflows: skipped, not an error
    assert skipped.last_step_skipped
    np.testing.assert_array_equal(skipped.params().numpy(), clean.params().numpy())
    np.testing.assert_array_equal(skipped.flat_master.numpy(), clean.flat_master.numpy())
    for ds in GOOD[1:]:
        clean.fit_batch(ds)
        skipped.fit_batch(ds)
    assert np.all(np.isfinite(skipped.output(GOOD[0].features).numpy()))
    if scale != "dynamic":  # a fixed scale does not back off: the two runs are the same run
        np.testing.assert_array_equal(skipped.params().numpy(), clean.params().numpy())


def test_a_fixed_loss_scale_that_can_never_take_a_step_says_so_and_its_remedy_trains():
    data = DataSet(RNG.normal(size=(64, 4)).astype(np.float32), RNG.integers(0, 3, 64), num_classes=3)

    def make(scale):
        return Network([Dense(16), ReLU(), Dense(3)], input_shape=(4,), updater=Adam(1e-2), dtype="float16",
                       master_dtype="float32", loss_scale=scale, seed=0)  # fmt: skip

    net = make(2.0**24)
    with pytest.raises(LossScaleError, match=f"overflowed the gradients {FIXED_GIVE_UP} steps in a row") as info:
        net.fit(ArrayIterator(data, 8), epochs=5)
    assert net.loss_scaler.skipped_steps == FIXED_GIVE_UP - 1  # the step that gave up changed nothing
    remedies = re.findall(r"loss_scale=('dynamic'|[\d.e+]+)", str(info.value))
    assert remedies[0] == "'dynamic'" and len(remedies) == 2
    for remedy in remedies:  # each as printed
        trained = make(eval(remedy))
        before = trained.params().numpy().copy()
        trained.fit(ArrayIterator(data, 8), epochs=1)
        assert not np.array_equal(before, trained.params().numpy()), remedy
    with pytest.raises(ValueError, match=r"loss_scale=1e\+300\): give None"):
        make(1e300)


def test_averaging_float16_replicas_sums_where_their_sum_fits():
    net = Network([Dense(2)], input_shape=(3,), dtype="float16", updater=Sgd(1e-6), seed=0)
    p = net.params().numpy().astype(np.float32)
    p[6:8] = 40_000.0  # each fits float16 (largest 65504); two of them added do not
    net.set_params(p)
    data = DataSet(RNG.normal(size=(8, 3)).astype(np.float16), np.arange(8) % 2, num_classes=2)
    with ParallelWrapper(net, workers=2, prefetch_buffer=0, averaging_frequency=1) as pw:
        pw.fit(ArrayIterator(data, 4), epochs=1)
    assert np.all(np.isfinite(net.params().numpy())) and net.params().numpy()[6] == pytest.approx(40_000, rel=1e-3)


# a recorded step or answer replays the hyperparameters it was recorded with: changing one must drop it
HYPERPARAMETERS = {
    "BatchNorm eps": (lambda: _bn_net(), lambda n: setattr(n.layers[1], "eps", 10.0)),
    "BatchNorm decay": (lambda: _bn_net(), lambda n: setattr(n.layers[1], "decay", 0.1)),
    "Dropout retain": (
        lambda: Network([Dense(8), Dropout(0.5), Dense(3)], input_shape=(4,), updater=Adam(1e-2), seed=0),
        lambda n: setattr(n.layers[1], "retain", 1.0),
    ),
}


@pytest.mark.parametrize("change", list(HYPERPARAMETERS))
def test_a_changed_hyperparameter_is_never_replayed(change):
    from kit.core.devices import seed
    from kit.nn.replay import replay_off

    make, set_it = HYPERPARAMETERS[change]
    runs = []
    for replayed in (True, False):
        seed(0)
        net = make()
        with replay_off() if not replayed else _nothing():
            for ds in GOOD * 2:
                net.fit_batch(ds)
            net.output(GOOD[0].features), net.output(GOOD[0].features)
            set_it(net)
            for ds in GOOD:
                net.fit_batch(ds)
            runs.append((net.params().numpy(), net.output(GOOD[0].features).numpy()))
        if replayed:
            assert net.train_plans.used > 0  # the comparison is with a replayed run
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_the_non_finite_advice_fits_the_network_s_dtype():
    """A float32 network was told to "train in float32 (or with master_dtype='float32' and a loss
    scale)": the first changed nothing, the second hid the divergence behind skipped steps."""
    data = DataSet(RNG.normal(size=(8, 4)).astype(np.float32), RNG.integers(0, 3, 8), num_classes=3)
    net = Network([Dense(64), ReLU(), Dense(64), ReLU(), Dense(3)], input_shape=(4,), updater=Sgd(1e30), seed=0)
    with pytest.raises(NonFiniteScoreError) as info:
        net.fit(ArrayIterator(data, 4), epochs=3)
    said = str(info.value)
    assert "train in float32" not in said and ("lower the learning rate" in said.lower() or "Lower" in said), said
