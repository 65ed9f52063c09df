"""Planned inference (kit.nn.plan): the same answers as Network.output, one allocation per call
(the answer), parameters read in place, bad input refused."""

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet
from kit.nn import (
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Network,
    ReLU,
    Residual,
    Sgd,
    lenet,
    mlp,
)
from kit.nn.plan import InferencePlan


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: mlp(12, hidden=(16, 8), n_out=4), (5, 12)),
        (lambda: mlp(12, hidden=(16,), n_out=4, activation="tanh", dropout_retain=0.5), (3, 12)),
        (lambda: lenet(), (2, 1, 28, 28)),
        (
            lambda: Network(
                [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Residual(4), GlobalAvgPool(), Flatten(), Dense(3)],
                input_shape=(2, 6, 6),
            ),
            (2, 2, 6, 6),
        ),
    ],
)
def test_a_plan_answers_like_network_output(make, shape):
    net = make()
    x = np.random.default_rng(0).random(shape).astype(np.float32)
    plan = net.plan_inference(shape[0])
    for _ in range(3):  # replayed, not only captured
        np.testing.assert_allclose(plan.output(x).numpy(), net.output(x).numpy(), rtol=1e-5, atol=1e-6)
    assert plan.direct_steps + plan.replayed_steps == len(net.body.layers) + 1


def test_common_layers_become_direct_kernel_calls_and_allocate_only_the_answer():
    net = mlp(12, hidden=(16,), n_out=4)
    plan = net.plan_inference(2)
    assert plan.replayed_steps == 0 and plan.buffer_bytes > 0
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
    with pytest.raises(ValueError, match="positive integer"):
        InferencePlan(net, 0)
