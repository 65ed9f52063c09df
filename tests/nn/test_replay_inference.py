"""Replayed inference (kit.nn.replay_inference): the same answers as Network.output, one allocation per call
(the answer), parameters read in place, bad input refused."""

import weakref

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet
from kit.nn import (
    MSE,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Layer,
    Network,
    ReLU,
    Residual,
    Sgd,
    Sigmoid,
    Softmax,
    Tanh,
    lenet,
    mlp,
)
from kit.nn.replay import PlanDeclinedError, replay_off
from kit.nn.replay_inference import InferencePlan
from kit.nn.workspace_mgr import ArrayType
from kit.parallel import InferenceMode, ParallelInference


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: mlp(12, hidden=(16, 8), n_out=4), (5, 12)),
        (lambda: mlp(12, hidden=(16,), n_out=4, activation="tanh", dropout_retain=0.5), (3, 12)),
        (lambda: Network([Flatten(), Dense(5), Sigmoid(), Dense(3)], input_shape=(2, 3)), (4, 2, 3)),
    ],
)
def test_a_plan_answers_like_network_output(make, shape):
    net = make()
    x = np.random.default_rng(0).random(shape).astype(np.float32)
    plan = net.plan_inference(shape[0])
    for _ in range(3):  # replayed, not only recorded
        np.testing.assert_allclose(plan.output(x).numpy(), net.output(x).numpy(), rtol=1e-5, atol=1e-6)
    computing = [layer for layer in net.body.layers if not isinstance(layer, Flatten)]
    assert len(plan.tape.calls) == len(computing) + 1  # one kernel call per layer, and the loss's


def test_common_layers_become_direct_kernel_calls_and_allocate_only_the_answer():
    net = mlp(12, hidden=(16,), n_out=4)
    plan = net.plan_inference(2)
    assert plan.buffer_bytes > 0
    x = np.ones((2, 12), np.float32)
    plan.output(x)
    before = kit.memory.heap_allocations(this_thread=True)
    for _ in range(10):
        plan.output(x)
    assert kit.memory.heap_allocations(this_thread=True) - before == 10  # the answers, nothing else


def test_a_plan_sees_training_between_calls():
    rng = np.random.default_rng(1)
    net = mlp(6, hidden=(8,), n_out=3, updater=Sgd(0.5))
    plan = net.plan_inference(4)
    x = rng.random((4, 6)).astype(np.float32)
    before = plan.output(x).numpy().copy()
    net.fit(ArrayIterator(DataSet(rng.random((32, 6)), rng.integers(0, 3, 32), num_classes=3), 8))
    after = plan.output(x).numpy()
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, net.output(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_plan_refuses_other_batch_sizes_and_nan():
    net = mlp(6, hidden=(8,), n_out=3)
    plan = net.plan_inference(4)
    with pytest.raises(ValueError, match=r"serves batches of shape \(4, 6\), got \(3, 6\)"):
        plan.output(np.zeros((3, 6)))
    bad = np.zeros((4, 6))
    bad[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"features contain NaN or infinity \(1 values; first at index \[2, 5\]\)"):
        plan.output(bad)
    with pytest.raises(ValueError, match=r"plan_inference\(batch_size=.*\): must be a whole number >= 1"):
        InferencePlan(net, 0)


# ---- Network.output plans by itself ---------------------------------------------------------


def _probe(net, batch=3, seed=0):
    shape = (batch, *net.input_shape)
    return np.random.default_rng(seed).random(shape).astype(np.float32)


def _same(a, b):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_output_answers_from_a_plan_from_the_second_call_of_a_batch_size():
    net = mlp(12, hidden=(16, 8), n_out=4)
    plans = net.output_plans
    x = _probe(net)
    first = net.output(x)
    assert (plans.used, plans.recorded, len(plans)) == (0, 0, 0)  # a batch size seen once: no plan yet
    second = net.output(x)
    assert (plans.used, plans.recorded, plans.batch_sizes) == (1, 1, [3])
    third = net.output(kit.asarray(x))  # an NDArray of the network's device and dtype too
    assert plans.used == 2 and plans.recorded == 1
    for answer in (first, second, third):
        _same(answer, net.output(x, planned=False))
    assert plans.used == 2  # planned=False and train=True are never planned
    net.output(x, train=True)
    assert plans.used == 2


def test_planned_answers_stay_valid_after_the_next_call():
    net = mlp(12, hidden=(16,), n_out=4)
    x1, x2 = _probe(net, seed=1), _probe(net, seed=2)
    net.output(x1)
    a = net.output(x1)
    kept = a.numpy().copy()
    b = net.output(x2)
    assert net.output_plans.used == 2
    np.testing.assert_array_equal(a.numpy(), kept)  # not the plan's buffer, which b overwrote
    assert not np.allclose(a.numpy(), b.numpy()) and not a.is_attached


def test_planned_output_matches_unplanned_for_every_layer_kind():
    nets = [
        mlp(12, hidden=(16,), n_out=4, activation="tanh", dropout_retain=0.5),
        Network([Dense(5), Sigmoid(), Dense(2), Softmax()], input_shape=(3,), loss=MSE()),
        Network([Flatten(), Dense(5), ReLU(), Dense(3)], input_shape=(2, 3)),
        lenet(),  # Conv2D and pooling: kit.nn.image_kernels
        Network(
            [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Residual(4), GlobalAvgPool(), Flatten(), Dense(3)],
            input_shape=(2, 6, 6),
        ),
    ]
    for net in nets:
        x = _probe(net, batch=2)
        for _ in range(3):
            _same(net.output(x), net.output(x, planned=False))
        assert net.output_plans.used == 2, net.output_plans.declined  # every layer kind is replayed
        assert net.output_plans.declined is None


def _mutations():
    rng = np.random.default_rng(7)
    data = DataSet(rng.random((16, 12)).astype(np.float32), rng.integers(0, 4, 16), num_classes=4)

    def set_params(net):
        net.set_params(np.random.default_rng(1).normal(size=net.num_params) * 0.3)

    def fit(net):
        net.fit(ArrayIterator(data, 8), epochs=2)

    def fit_batch(net):
        net.fit_batch(data)

    def compute_and_apply(net):
        net.compute_gradient_and_score(data)
        net.apply_update()

    def copy_state_from(net):
        other = mlp(12, hidden=(16,), n_out=4, seed=5, updater=Sgd(0.5))
        net.copy_state_from(other)

    def assign_flat_params(net):
        net.flat_params.assign(net.flat_params.numpy() * 0.5)

    def new_loss(net):
        net.loss = MSE()  # what ParallelWrapper does to its replicas

    def swap_a_layer(net):
        tanh = Tanh()
        tanh.build(net.body.layers[1].input_shape)
        net.body.layers[1] = tanh

    def new_updater(net):
        net.updater = Sgd(0.1)

    return [set_params, fit, fit_batch, compute_and_apply, copy_state_from, assign_flat_params, new_loss,
            swap_a_layer, new_updater]  # fmt: skip


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_after_every_mutation_output_equals_the_unplanned_forward(mutate):
    net = mlp(12, hidden=(16,), n_out=4, updater=Sgd(0.5))
    x = _probe(net)
    net.output(x)
    before = net.output(x).numpy().copy()
    assert net.output_plans.used == 1
    mutate(net)
    after, again = net.output(x), net.output(x)  # a new structure: a new plan from its second call
    assert net.output_plans.used >= 2
    for answer in (after, again):
        _same(answer, net.output(x, planned=False))
    if mutate.__name__ != "new_updater":
        assert not np.allclose(after.numpy(), before)


def test_structure_changes_make_a_new_plan_and_value_changes_do_not():
    net = mlp(12, hidden=(16,), n_out=4)
    x = _probe(net)
    net.output(x), net.output(x)
    net.set_params(net.params().numpy() * 2)  # values, read in place by the plan
    net.output(x)
    assert net.output_plans.recorded == 1
    net.loss = MSE()  # what the plan's last step computes
    net.output(x), net.output(x)
    assert net.output_plans.recorded == 2 and net.output_plans.used == 3


def test_a_loaded_or_cloned_network_plans_its_own_outputs(tmp_path):
    net = mlp(12, hidden=(16,), n_out=4)
    x = _probe(net)
    net.output(x), net.output(x)
    net.save(tmp_path / "m.npz")
    for twin in (Network.load(tmp_path / "m.npz"), net.clone()):
        assert twin.output_plans is not net.output_plans and len(twin.output_plans) == 0
        twin.output(x)
        _same(twin.output(x), net.output(x, planned=False))
        assert twin.output_plans.used == 1


def test_the_plans_are_bounded_in_number_and_bytes():
    net = mlp(12, hidden=(16,), n_out=4)
    plans = net.output_plans
    plans.resize(limit=3)
    for batch in (1, 2, 3, 4, 5, 2):
        x = _probe(net, batch=batch)
        net.output(x)
        _same(net.output(x), net.output(x, planned=False))
    assert plans.batch_sizes == [4, 5, 2] and plans.recorded == 6  # least recently used dropped first
    plans.resize(max_bytes=plans.buffer_bytes // 3)  # room for about one small plan
    for batch in (2, 64, 64, 128, 128):
        x = _probe(net, batch=batch)
        _same(net.output(x), net.output(x, planned=False))
    assert 64 not in plans.batch_sizes and 128 not in plans.batch_sizes
    assert 0 < plans.buffer_bytes <= plans.max_bytes
    plans.resize(limit=0)
    assert len(plans) == 0
    x = _probe(net, batch=2)
    net.output(x), net.output(x)
    assert len(plans) == 0 and plans.used == 9  # the one recording pass of a plan too big to keep answered too


def test_a_network_with_plans_is_freed_as_soon_as_it_is_dropped():
    net = mlp(6, hidden=(8,), n_out=3)
    x = np.zeros((4, 6), np.float32)
    net.output(x), net.output(x)
    assert len(net.output_plans) == 1
    gone = weakref.ref(net)
    del net
    assert gone() is None  # no reference cycle through the plans: freed without a garbage collection


def test_planned_output_refuses_nan_with_output_s_message():
    net = mlp(6, hidden=(8,), n_out=3)
    ok = np.zeros((4, 6))
    net.output(ok), net.output(ok)
    bad = ok.copy()
    bad[2, 5] = np.inf
    for given in (bad, bad.astype(np.float32)):  # copied into the plan; read where it lies
        with pytest.raises(ValueError, match=r"features contain NaN or infinity \(1 values; first at index \[2, 5\]\)"):
            net.output(given)
    assert net.output_plans.used == 1
    fresh = mlp(6, hidden=(8,), n_out=3)
    for _ in range(2):  # the second call would record a plan: the check comes first
        with pytest.raises(ValueError, match=r"features contain NaN or infinity \(1 values; first at index \[2, 5\]\)"):
            fresh.output(bad)
    assert len(fresh.output_plans) == 0 and fresh.output_plans.used == 0


def test_the_callers_array_read_in_place_gives_the_copied_inputs_answer():
    net = mlp(6, hidden=(8,), n_out=3)
    wide = np.random.default_rng(4).random((4, 12)).astype(np.float32)
    strided = wide[:, ::2]  # float32 but not contiguous
    for x in (np.ascontiguousarray(strided), strided, strided.astype(np.float64), kit.asarray(strided.copy())):
        net.output(x)
        _same(net.output(x), net.output(x, planned=False))
        np.testing.assert_allclose(net.output(x).numpy(), net.plan_inference(4).output(x).numpy(), rtol=1e-6)
    assert net.output_plans.used == 11 and net.output_plans.recorded == 1  # all but the first call


def test_inputs_a_plan_does_not_take_go_unplanned():
    net = mlp(6, hidden=(8,), n_out=3)
    x = np.zeros((4, 6), np.float32)
    for arg in (x.tolist(), kit.asarray(x.astype(np.float64)), np.zeros((0, 6))):
        for _ in range(2):
            net.output(arg)
    assert net.output_plans.used == 0
    with pytest.raises(TypeError, match="features must be numbers"):
        net.output(np.zeros((4, 6), bool))
    with pytest.raises(ValueError, match="do not fit the first layer"):
        net.output(np.zeros((4, 5)))
    with replay_off():  # the switch
        net.output(x), net.output(x)
    assert net.output_plans.used == 0


class _Doubled(Layer):
    """A layer that computes outside kit.nn.kernels and says nothing: it is not replayed."""

    def forward(self, x, mgr, training):
        y = mgr.create(ArrayType.ACTIVATIONS, x.shape, x.dtype, x.device)
        x.device.xp.multiply(x.data, 2, out=y.data)
        return y


def test_a_layer_computing_outside_the_kernels_declines_the_plan_cleanly():
    net = Network([Dense(5), _Doubled(), Dense(3)], input_shape=(4,))
    x = np.ones((2, 4), np.float32)
    for _ in range(3):
        _same(net.output(x), net.output(x, planned=False))
    assert net.output_plans.used == 0 and "layer 1 (_Doubled" in net.output_plans.declined
    with pytest.raises(PlanDeclinedError, match=r"layer 1 \(_Doubled.*computes outside kit.nn.kernels"):
        net.plan_inference(2)
    assert not _Doubled.replayable and Dense.replayable  # a subclass's own forward is not promised


def test_parallel_inference_replicas_answer_from_plans():
    net = mlp(6, hidden=(8,), n_out=3)
    x = np.random.default_rng(0).random((4, 6)).astype(np.float32)
    with ParallelInference(net, workers=1, inference_mode=InferenceMode.SEQUENTIAL) as pi:
        answers = [pi.output(x) for _ in range(3)]
        replica = pi.replicas[0]
    for a in answers:
        _same(a, net.output(x, planned=False))
    assert replica.output_plans.used == 2  # net.output() there: the second and third requests
