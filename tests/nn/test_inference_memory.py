"""An inference pass keeps nothing of its batch: no layer holds its input, its output or what only
a backward reads once `output`, `score` or `evaluate` has answered, in every inference workspace
mode, for every layer kit has. On the heap, such a pass then holds what the next layer still
reads, not every array of the pass (a ResNet-18 evaluated at batch 1,024 on a GPU held tens of GB
in CuPy's pool before this). Counted in bytes (tracemalloc), never timed."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import kit
from kit.arrays.ndarray import NDArray
from kit.data import ArrayIterator, DataSet
from kit.nn import BatchNorm, Conv2D, Network, Residual
from kit.nn.activations import ReLU, Sigmoid, Softmax, Tanh
from kit.nn.layers import Dense, Dropout, Flatten, Layer, Sequential
from kit.nn.pooling import AvgPool2D, GlobalAvgPool, MaxPool2D
from kit.nn.workspace_mgr import WorkspaceMode

BATCH = 13  # no parameter of these networks has 13 rows: an array of 13 rows is the batch's


def _every_layer_networks(mode):
    conv = [
        Conv2D(4, 3, padding=1),
        BatchNorm(),
        ReLU(),
        Residual(4),
        Residual(6, use_1x1conv=True, stride=2),
        MaxPool2D(2),
        AvgPool2D(1),
        Dropout(0.5),
        Tanh(),
        Sequential([Conv2D(5, 1), Sigmoid()]),
        GlobalAvgPool(),
        Dense(7),
        Softmax(),
    ]
    flat = [Flatten(), Dense(9), BatchNorm(), ReLU(), Dense(3)]
    return [
        Network(conv, (2, 8, 8), seed=0, inference_workspace_mode=mode),
        Network(flat, (2, 4, 4), seed=0, inference_workspace_mode=mode),
    ]


def _layers(layers):
    for layer in layers:
        yield layer
        for child in vars(layer).values():
            if isinstance(child, Layer):
                yield from _layers([child])
            elif isinstance(child, list | tuple) and child and all(isinstance(c, Layer) for c in child):
                yield from _layers(child)


def _batch_arrays(obj):
    """Names of obj's attributes that hold an array with the batch's rows."""
    found = []
    for name, value in vars(obj).items():
        raw = value._data if isinstance(value, NDArray) else value  # not .data: a stale array is found, not raised
        if isinstance(raw, np.ndarray) and raw.ndim and raw.shape[0] == BATCH:
            found.append(name)
    return found


def test_the_networks_cover_every_layer_kit_has():
    covered = {type(layer).__name__ for net in _every_layer_networks("NONE") for layer in _layers([net.body])}
    kinds = {n for n, cls in Layer.registry.items() if cls.__module__.startswith("kit.") and not n.startswith("_")}
    assert kinds <= covered, f"add {sorted(kinds - covered)} to _every_layer_networks"


@pytest.mark.parametrize("mode", list(WorkspaceMode))
def test_no_layer_keeps_the_batch_after_an_inference_pass(mode):
    rng = np.random.default_rng(0)
    for net in _every_layer_networks(mode):
        x = rng.standard_normal((BATCH, *net.input_shape)).astype(np.float32)
        y = rng.integers(0, net.output_shape[0], BATCH)
        data = DataSet(x, y, num_classes=net.output_shape[0])
        for what, call, arg in (
            ("output, unplanned", lambda d, net=net: net.output(d, planned=False), x),
            ("output", net.output, x),  # twice: the second records a plan (which owns its buffers)
            ("output, planned", net.output, x),
            ("score", net.score, data),
            ("evaluate", lambda d, net=net: net.evaluate(ArrayIterator(d, BATCH)), data),
        ):
            call(arg)
            kept = {type(layer).__name__: _batch_arrays(layer) for layer in _layers([net.body])}
            kept = {k: v for k, v in kept.items() if v}
            assert not kept, f"{mode.value}, {what}: after an inference pass these layers hold the batch: {kept}"


def test_a_training_step_still_keeps_what_its_backward_reads():
    """The other side: a forward that a backward may follow keeps its arrays (or the gradients
    would be wrong, which tests/nn/test_gradients.py checks value by value)."""
    net = _every_layer_networks("NONE")[0]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, *net.input_shape)).astype(np.float32)
    mgr = net.train_mgr
    with mgr.iteration():
        net._forward(kit.asarray(x), mgr, True)
        kept = {type(layer).__name__ for layer in _layers([net.body]) if _batch_arrays(layer)}
    assert {"Conv2D", "BatchNorm", "ReLU", "Dense", "Residual", "MaxPool2D"} <= kept, kept


def _inference_bytes(net, x):
    """(peak bytes during an unplanned output(), bytes still held once it answered), the answer excluded."""
    net.output(x, planned=False)  # one pass first: lazily built state is not what is measured
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        answer = net.output(x, planned=False)
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base, now - base - answer.data.nbytes


def test_on_the_heap_an_inference_pass_holds_a_few_layers_not_the_sum():
    """A deep conv net's activations summed are many times its largest layer's arrays; on the
    heap (NONE) the pass peaks near a few of the largest, and holds nothing once it answers."""
    layers = [Conv2D(16, 3, padding=1), BatchNorm(), ReLU()]
    layers += [Residual(16) for _ in range(6)]
    net = Network([*layers, GlobalAvgPool(), Dense(10)], (1, 16, 16), seed=0, inference_workspace_mode="NONE")
    x = np.random.default_rng(0).standard_normal((32, 1, 16, 16)).astype(np.float32)
    activation = 32 * 16 * 16 * 16 * 4  # one (B, 16, 16, 16) float32 array
    columns = 16 * 9 * 32 * 16 * 16 * 4  # one 3x3 convolution's im2col matrix
    peak, held = _inference_bytes(net, x)
    # every array the pass makes, summed: 6 blocks of 2 convolutions (columns + output), 2 BN
    # (normalised input + output), 2 ReLUs and an add, and the stem
    summed = 6 * (2 * (columns + activation) + 2 * 2 * activation + 2 * activation + activation)
    assert held < activation, f"{held:,} bytes still held after the pass"
    assert peak < 3 * (columns + activation), f"peak {peak:,} bytes; the sum of the pass is {summed:,}"
    assert summed > 6 * (columns + activation)  # the bound is a real cut, not a formality


def test_a_plan_too_big_for_its_bound_costs_no_more_than_an_unplanned_pass():
    """output() records a plan the second time it sees a batch size; a plan over max_bytes used to
    make every buffer of the pass before finding out (a ResNet-18 at batch 128: 3 GB for 334 MB)."""
    layers = [Conv2D(16, 3, padding=1), BatchNorm(), ReLU(), *[Residual(16) for _ in range(6)]]
    net = Network([*layers, GlobalAvgPool(), Dense(10)], (1, 16, 16), seed=0, inference_workspace_mode="NONE")
    net.output_plans.resize(max_bytes=1 << 20)  # far below this pass's sum
    x = np.random.default_rng(0).standard_normal((32, 1, 16, 16)).astype(np.float32)
    unplanned, _ = _inference_bytes(net, x)
    tracemalloc.start()
    try:
        peaks = []
        for _ in range(3):  # seen once, then recorded (and given up), then run unplanned again
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            answer = net.output(x)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()
    assert net.output_plans.captured == 1 and len(net.output_plans) == 0  # tried once, kept none
    assert max(peaks) < 1.5 * unplanned, (peaks, unplanned)
    np.testing.assert_allclose(answer.numpy(), net.output(x, planned=False).numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", list(WorkspaceMode))
def test_no_layer_keeps_the_batch_after_a_training_step(mode):
    """What a backward reads is let go once it has read it: after fit, the layers hold nothing of
    the last batch (on the heap, that memory stayed allocated until the next step)."""
    rng = np.random.default_rng(2)
    for net in _every_layer_networks("NONE"):
        net = Network(list(net.body.layers), net.input_shape, seed=0, training_workspace_mode=mode)
        x = rng.standard_normal((BATCH, *net.input_shape)).astype(np.float32)
        y = rng.integers(0, net.output_shape[0], BATCH)
        net.fit(ArrayIterator(DataSet(x, y, num_classes=net.output_shape[0]), BATCH))
        kept = {type(layer).__name__: _batch_arrays(layer) for layer in _layers([net.body])}
        assert not {k: v for k, v in kept.items() if v}, f"{mode.value}: after fit these layers hold the batch: {kept}"
