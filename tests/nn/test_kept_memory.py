"""What a training step keeps, in bytes that do not depend on the clock (issue 40's cuts, each
class of layer in one table): what each layer adds to the ACTIVATIONS workspace in its forward
pass (its output, and only what its backward reads), a ReLU in place where the layer before it
does not read its own output, a layer's input kept by reference (never a copy), activation
gradients in SEPARATE's slots (two for a chain, as DL4J's alternating pair; three inside a
residual block), a gradient read after its slot was handed back refused in words, and the same
gradients whichever way the memory was saved."""

import math

import numpy as np
import pytest

import kit
from kit.data import DataSet
from kit.nn import (
    MSE,
    AvgPool2D,
    BatchNorm,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool,
    MaxPool2D,
    Network,
    ReLU,
    Residual,
    Sequential,
    Sgd,
    Sigmoid,
    Softmax,
    Tanh,
    resnet18,
)
from kit.nn.layers import Layer, call_backward, call_forward
from kit.nn.replay import replay_off
from kit.nn.workspace_mgr import WS_ACTIVATION_GRAD, WS_ALL_LAYERS_ACT, ArrayType, LayerWorkspaceMgr, WorkspaceMode
from kit.workspaces.workspace import ALIGNMENT, StaleArrayError

B = 4  # examples


def carved(nbytes):
    """Bytes an array of `nbytes` takes in an arena (aligned blocks)."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def f32(*shape):
    return carved(4 * math.prod(shape))


def kept_per_layer(layers, input_shape):
    """Bytes each top-level layer's training forward adds to the ACTIVATIONS workspace (SEPARATE),
    and the layers' outputs."""
    net = Network(layers, input_shape, loss=MSE(), training_workspace_mode="SEPARATE")
    mgr = net.train_mgr
    x = kit.asarray(np.random.default_rng(0).standard_normal((B, *input_shape)).astype(np.float32))
    act = mgr.workspace(WS_ALL_LAYERS_ACT)
    added, outs = [], []
    with mgr.iteration():
        h = x
        for layer in net.body.layers:  # the top-level layers (net.layers lists a block's too)
            before = act.tally()[1]  # bytes carved in this cycle (spilled or not: the first cycle learns)
            h = call_forward(layer, h, mgr, True)
            added.append(act.tally()[1] - before)
            outs.append((h, getattr(layer, "_x", None), h.data.__array_interface__["data"][0]))
    return added, outs, net


IMG = (3, 8, 8)
# (layers, input shape, bytes each adds): the output, plus only what its backward reads
CASES = {
    "Dense keeps its output only": ([Dense(6), Dense(5)], (7,), [f32(B, 6), f32(B, 5)]),
    "ReLU after Dense runs in place": ([Dense(6), ReLU()], (7,), [f32(B, 6), 0]),
    "ReLU after Tanh keeps its own output": ([Dense(6), Tanh(), ReLU()], (7,), [f32(B, 6), f32(B, 6), f32(B, 6)]),
    "ReLU after ReLU keeps its own output": ([Dense(6), ReLU(), ReLU()], (7,), [f32(B, 6), 0, f32(B, 6)]),
    "ReLU after Dropout runs in place (the mask is kept)": (
        [Dense(6), Dropout(0.5), ReLU()],
        (7,),
        [f32(B, 6), 2 * f32(B, 6), 0],
    ),
    "ReLU after Flatten keeps its own output (a view of the layer before)": (
        [Conv2D(2, 3), Flatten(), ReLU()],
        IMG,
        [f32(B, 2, 6, 6), 0, f32(B, 72)],
    ),
    "Conv2D keeps its output, no columns": (
        [Conv2D(4, 3, padding=1), Conv2D(2, 3)],
        IMG,
        [f32(B, 4, 8, 8), f32(B, 2, 6, 6)],
    ),
    "BatchNorm keeps its output and [mean, 1/std], not the normalised input": (
        [Conv2D(4, 3, padding=1), BatchNorm()],
        IMG,
        [f32(B, 4, 8, 8), f32(2, 4) + f32(B, 4, 8, 8)],
    ),
    "ReLU after BatchNorm runs in place": (
        [Conv2D(4, 3, padding=1), BatchNorm(), ReLU()],
        IMG,
        [f32(B, 4, 8, 8), f32(2, 4) + f32(B, 4, 8, 8), 0],
    ),
    "MaxPool2D keeps its output and a byte per output": (
        [Conv2D(4, 3, padding=1), MaxPool2D(2), ReLU()],
        IMG,
        [f32(B, 4, 8, 8), f32(B, 4, 4, 4) + carved(B * 4 * 4 * 4), 0],
    ),
    "GlobalAvgPool keeps its output": ([Conv2D(4, 3, padding=1), GlobalAvgPool()], IMG, [f32(B, 4, 8, 8), f32(B, 4)]),
    # conv1, bn1 (+ stats), relu in place, conv2, bn2 (+ stats); the sum and its ReLU over bn2's output
    "Residual: four arrays and two BatchNorm statistics": (
        [Conv2D(4, 3, padding=1), Residual(4)],
        IMG,
        [f32(B, 4, 8, 8), 4 * f32(B, 4, 8, 8) + 2 * f32(2, 4)],
    ),
    "Residual with a 1x1 shortcut: and the shortcut's output": (
        [Conv2D(4, 3, padding=1), Residual(6, use_1x1conv=True, stride=2)],
        IMG,
        [f32(B, 4, 8, 8), 5 * f32(B, 6, 4, 4) + 2 * f32(2, 6)],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_layer_keeps_its_output_and_only_what_its_backward_reads(case, monkeypatch):
    monkeypatch.setattr(Conv2D, "keep_columns", False)  # DL4J's rule: columns built again in backward
    layers, input_shape, expected = CASES[case]
    added, _outs, _net = kept_per_layer(layers, input_shape)
    assert added == expected


def test_by_default_columns_that_fit_one_chunk_are_kept_and_larger_ones_built_again(monkeypatch):
    first, second = 4 * 3 * 9 * B * 64, 4 * 4 * 9 * B * 36  # each layer's whole-batch columns, float32
    assert Conv2D.keep_columns is None  # the default: keep what fits column_bytes
    monkeypatch.setattr(Conv2D, "column_bytes", (first + second) // 2)  # the second fits, the first does not
    added, _outs, net = kept_per_layer([Conv2D(4, 3, padding=1), Conv2D(2, 3)], IMG)
    assert [layer.kept_bytes for layer in net.body.layers] == [0, second]
    assert added == [f32(B, 4, 8, 8), f32(B, 2, 6, 6) + f32(4 * 9, B * 6 * 6)]


def test_keeping_the_columns_is_an_option_that_costs_their_bytes(monkeypatch):
    monkeypatch.setattr(Conv2D, "keep_columns", True)
    added, _outs, net = kept_per_layer([Conv2D(4, 3, padding=1), Conv2D(2, 3)], IMG)
    columns = [f32(3 * 9, B * 8 * 8), f32(4 * 9, B * 6 * 6)]
    assert added == [f32(B, 4, 8, 8) + columns[0], f32(B, 2, 6, 6) + columns[1]]
    assert [layer.kept_bytes for layer in net.body.layers] == [4 * 3 * 9 * B * 64, 4 * 4 * 9 * B * 36]


@pytest.mark.parametrize(
    "layers",
    [[Dense(6), Dense(5)], [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Conv2D(2, 3)], [Dense(6), ReLU(), Dense(3)]],
    ids=["dense", "conv-bn", "dense-relu"],
)
def test_a_layer_keeps_its_input_by_reference_never_a_copy(layers):
    shape = (7,) if isinstance(layers[0], Dense) else IMG
    _added, outs, net = kept_per_layer(layers, shape)
    for i, layer in enumerate(net.body.layers[1:], 1):
        kept = outs[i][1]
        if kept is not None:  # what the layer holds for backward is the array the layer before returned
            assert kept is outs[i - 1][0], type(layer).__name__
        if isinstance(layer, ReLU):  # in place: its output is its input's memory
            assert outs[i][2] == outs[i - 1][2]


def _slots_after_one_step(net, ds):
    net.fit_batch(ds)
    stats = net.workspace_stats()["training"]
    return sorted(name for name in stats if name.startswith(WS_ACTIVATION_GRAD))


@pytest.mark.parametrize(
    ("make", "shape", "slots"),
    [
        (lambda: [Dense(8), ReLU(), Dense(6), Tanh(), Dense(3)], (5,), 2),  # a chain: DL4J's alternating pair
        (lambda: [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Flatten(), Dense(3)], IMG, 2),
        (lambda: [Conv2D(4, 3, padding=1), Residual(4), Residual(4), GlobalAvgPool(), Dense(3)], IMG, 3),
        (lambda: [Conv2D(4, 3, padding=1), Residual(6, use_1x1conv=True, stride=2), GlobalAvgPool(), Dense(3)], IMG, 3),
    ],
    ids=["mlp", "conv-chain", "residual", "residual-1x1"],
)
def test_activation_gradients_take_two_slots_in_a_chain_and_three_in_a_residual_block(make, shape, slots):
    rng = np.random.default_rng(1)
    ds = DataSet(rng.standard_normal((B, *shape)).astype(np.float32), rng.integers(0, 3, B), num_classes=3)
    net = Network(make(), shape, updater=Sgd(0.1), training_workspace_mode="SEPARATE")
    with replay_off():  # the taught path
        names = _slots_after_one_step(net, ds)
        assert names == [f"{WS_ACTIVATION_GRAD}_{i}" for i in range(slots)]
        for _ in range(3):  # later steps take the same slots
            assert _slots_after_one_step(net, ds) == names
    stats = net.workspace_stats()["training"]
    assert all(not stats[n]["spilled_count"] or stats[n]["arena_allocations"] for n in names)


def test_resnet18_backward_holds_at_most_three_gradients():
    rng = np.random.default_rng(2)
    net = resnet18(updater=Sgd(0.1), size=8)
    ds = DataSet(rng.random((2, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 2), num_classes=10)
    assert len(_slots_after_one_step(net, ds)) == 3


def test_a_gradient_read_after_its_slot_was_handed_back_is_refused():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "KEPT_", kit.devices.as_device(None))
    with mgr.iteration():
        g = mgr.create(ArrayType.ACTIVATION_GRAD, (3,), np.dtype(np.float32), g_dev := kit.devices.as_device(None))
        g.data.fill(1)
        mgr.pin(g)
        mgr.release(g)  # pinned: kept
        assert g.numpy().tolist() == [1, 1, 1]
        mgr.unpin(g)
        mgr.release(g)
        other = mgr.create(ArrayType.ACTIVATION_GRAD, (3,), np.dtype(np.float32), g_dev)
        assert other.workspace is g.workspace  # the slot is lent again
        with pytest.raises(StaleArrayError, match="cycle 1 ended"):
            g.numpy()
        mgr.release(g)  # a second release does nothing
        assert other.is_valid
    mgr.destroy()


def test_gradients_are_made_inside_an_iteration_only():
    mgr = LayerWorkspaceMgr(WorkspaceMode.SEPARATE, "OUT_", kit.devices.as_device(None))
    with pytest.raises(kit.workspace.WorkspaceScopeError, match="ACTIVATION_GRAD is not open"):
        mgr.create(ArrayType.ACTIVATION_GRAD, (3,), np.dtype(np.float32), kit.devices.as_device(None))
    mgr.destroy()


@pytest.mark.parametrize("mode", list(WorkspaceMode), ids=lambda m: m.value)
def test_the_cuts_change_no_gradient(mode, monkeypatch):
    """Columns rebuilt in chunks, BatchNorm's normalised input made again, ReLU in place, gradients
    in slots: the same gradients (float64) as with every array kept and one chunk per batch."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 6, 6))
    y = rng.integers(0, 3, 3)

    def grads():
        net = Network(
            [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Residual(5, use_1x1conv=True, stride=2), GlobalAvgPool(),
             Dense(3)],
            (2, 6, 6), dtype="float64", seed=4, training_workspace_mode=mode,
        )  # fmt: skip
        net.compute_gradient_and_score(DataSet(x, y, num_classes=3))
        return net.flat_grads.numpy().copy()

    lean = grads()
    monkeypatch.setattr(Conv2D, "keep_columns", True)
    monkeypatch.setattr(ReLU, "runs_in_place", False)
    kept = grads()
    np.testing.assert_allclose(lean, kept, rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(Conv2D, "column_bytes", 1)  # one example per chunk
    monkeypatch.setattr(Conv2D, "keep_columns", False)
    np.testing.assert_allclose(grads(), kept, rtol=1e-12, atol=1e-14)


# every layer class of kit with a sample: its output's memory may be overwritten (a ReLU in place
# after it) only if its backward truly does not read that output
SAMPLES = {
    "AvgPool2D": (lambda: AvgPool2D(2), (2, 4, 4)),
    "BatchNorm": (lambda: BatchNorm(), (3, 4, 4)),
    "Conv2D": (lambda: Conv2D(3, 3, padding=1), (2, 5, 5)),
    "Dense": (lambda: Dense(4), (5,)),
    "Dropout": (lambda: Dropout(0.6), (5,)),
    "Flatten": (lambda: Flatten(), (2, 3, 3)),
    "GlobalAvgPool": (lambda: GlobalAvgPool(), (2, 3, 3)),
    "MaxPool2D": (lambda: MaxPool2D(2), (2, 4, 4)),
    "ReLU": (lambda: ReLU(), (5,)),
    "Residual": (lambda: Residual(2), (2, 4, 4)),
    "Sequential": (lambda: Sequential([Dense(4), Tanh()]), (5,)),
    "Sigmoid": (lambda: Sigmoid(), (5,)),
    "Softmax": (lambda: Softmax(), (5,)),
    "Tanh": (lambda: Tanh(), (5,)),
}


def test_every_layer_class_has_a_sample():
    kit_layers = {name for name, cls in Layer.registry.items() if cls.__module__.startswith("kit.") and name[0] != "_"}
    assert kit_layers == set(SAMPLES)


def _backward_after(make, shape, overwrite):
    """dx and the parameter gradients of one float64 training step; `overwrite`: garbage written
    over the layer's output between forward and backward (what a ReLU in place would do)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, *shape))
    net = Network([make()], shape, loss=MSE(), dtype="float64", seed=6, training_workspace_mode="NONE")
    layer, mgr = net.body.layers[0], net.train_mgr
    layer.skip_input_grad = False  # a network's first layer makes no input gradient; this one must
    kit.devices.as_device(None).rng().bit_generator.state = np.random.PCG64(7).state  # Dropout's draws
    with mgr.iteration():
        y = layer.forward(kit.asarray(x), mgr, True)
        eps = rng.standard_normal(y.shape)
        if overwrite:
            y.data[...] = 1e3 * rng.standard_normal(y.shape)
        dx = layer.backward(kit.asarray(eps), mgr)
        return dx.numpy().copy(), net.flat_grads.numpy().copy()


@pytest.mark.parametrize("name", list(SAMPLES))
def test_a_layer_that_says_its_backward_does_not_read_its_output_does_not(name):
    make, shape = SAMPLES[name]
    if make().output_read_by_backward:
        pytest.skip(f"{name} says its backward reads its output: nothing runs in place over it")
    clean, spoiled = _backward_after(make, shape, False), _backward_after(make, shape, True)
    np.testing.assert_array_equal(clean[0], spoiled[0])
    np.testing.assert_array_equal(clean[1], spoiled[1])


def _live_heap_between_layers(net, ds):
    """NONE mode, recorded by kit.memory_timeline: the heap bytes alive after the forward pass and
    after each top-level layer's backward."""
    from kit.monitor.timeline import memory_timeline

    mgr = net.train_mgr
    x, y = net.checked_batch(ds)
    marks = []
    with memory_timeline() as tl:
        out = net.body.forward(x, mgr, True)
        marks.append(len(tl.events))
        _score, eps = net.loss.value_and_grad(out, y, mgr)
        del out
        for layer in reversed(net.body.layers):
            eps = call_backward(layer, eps, mgr)
            marks.append(len(tl.events))
    live, trace = 0, []
    for e in tl.events:
        if e["workspace"] is None:
            live += {"alloc": e["nbytes"], "release": -e["nbytes"]}.get(e["kind"], 0)
        trace.append(live)
    return [trace[m - 1] for m in marks]


def test_on_the_heap_the_live_bytes_fall_as_backward_passes_each_layer():
    rng = np.random.default_rng(4)
    net = resnet18(updater=Sgd(0.1), size=12, training_workspace_mode="NONE")
    ds = DataSet(rng.random((4, 1, 12, 12)).astype(np.float32), rng.integers(0, 10, 4), num_classes=10)
    net.fit_batch(ds)
    live = _live_heap_between_layers(net, ds)
    after_forward, backward = live[0], live[1:]
    assert after_forward > 0 and backward[-1] == 0  # the last layer's backward leaves nothing of the step
    half = len(backward) // 2
    assert max(backward[half:]) < after_forward  # from half way through backward, less than the forward left
    assert backward[half:] == sorted(backward[half:], reverse=True)  # and it keeps falling


@pytest.mark.parametrize("mode", ["SINGLE", "SEPARATE"])
def test_every_learned_arena_is_its_largest_cycle_plus_the_stated_over_allocation(mode):
    """No arena of a trained network holds more than its largest cycle, over-allocated by its
    configuration's limit (and rounded up to whole 64-byte blocks)."""
    from kit.workspaces.workspace import AllocationPolicy

    rng = np.random.default_rng(5)
    net = Network(
        [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), Residual(4), GlobalAvgPool(), Dense(3)],
        IMG,
        updater=Sgd(0.1),
        training_workspace_mode=mode,
    )
    for n in (4, 4, 6, 4, 6):  # two batch sizes: a larger cycle regrows an arena once
        net.fit_batch(DataSet(rng.random((n, *IMG)).astype(np.float32), rng.integers(0, 3, n), num_classes=3))
    for name, stats in net.workspace_stats()["training"].items():
        ws = kit.get_workspace_for_current_thread(name=stats["name"])
        cfg = ws.config
        over = cfg.overallocation_limit if cfg.policy_allocation is AllocationPolicy.OVERALLOCATE else 0.0
        bound = carved(int(stats["max_cycle_bytes"] * (1 + over)))
        assert stats["capacity"] <= max(bound, cfg.min_size), (name, stats["capacity"], stats["max_cycle_bytes"], over)


class _TwoPath(Layer):
    """A user's composite: y = a(x) + b(x), one gradient sent down two paths, knowing nothing of pin."""

    def __init__(self, n):
        super().__init__()
        self.a, self.b = Sequential([Dense(n), ReLU()]), Sequential([Dense(n)])

    def sublayers(self):
        return [self.a, self.b]

    def build(self, shape):
        self.input_shape = tuple(shape)
        self.a.build(shape)
        self.output_shape = self.b.build(shape)
        return self.output_shape

    def forward(self, x, mgr, training):
        ya, yb = self.a.forward(x, mgr, training), self.b.forward(x, mgr, training)
        y = mgr.create(ArrayType.ACTIVATIONS, ya.shape, ya.dtype, ya.device)
        np.add(ya.data, yb.data, out=y.data)
        return y

    def backward(self, eps, mgr):
        da = self.a.backward(eps, mgr)
        db = self.b.backward(eps, mgr)  # reads eps again: nothing below may have handed it back
        dx = mgr.create(ArrayType.ACTIVATION_GRAD, da.shape, da.dtype, da.device)
        np.add(da.data, db.data, out=dx.data)
        return dx


@pytest.mark.parametrize("mode", list(WorkspaceMode), ids=lambda m: m.value)
def test_a_users_composite_that_reads_its_gradient_twice_keeps_it(mode):
    """Review finding: a nested Sequential handed back the gradient it was given, under a composite
    that reads it again (ArrayFromOldCycleError in SEPARATE; NONE and the old code were right)."""
    rng = np.random.default_rng(11)
    ds = DataSet(rng.standard_normal((5, 3)), rng.integers(0, 3, 5), num_classes=3)

    def grads(m):
        net = Network([Dense(4), _TwoPath(4), Dense(3)], input_shape=(3,), dtype="float64", seed=2,
                      training_workspace_mode=m)  # fmt: skip
        net.compute_gradient_and_score(ds)
        return net.flat_grads.numpy().copy()

    np.testing.assert_allclose(grads(mode), grads(WorkspaceMode.NONE), rtol=1e-12, atol=1e-14)
