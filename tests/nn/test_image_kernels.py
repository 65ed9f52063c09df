"""kit.nn.image_kernels (Conv2D, BatchNorm, the residual add) and kit.nn.im2col's pooling kernels:
every image layer computes there, so a step of a network made of them is replayed (kit.nn.replay)
with the same bits as its layers give, in every workspace mode; and at iteration 20 a replayed
step runs the kernels, not the layers' forward, while the switch off runs the layers."""

import contextlib
import sys

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet
from kit.nn import (
    AvgPool2D,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    MaxPool2D,
    Network,
    ReLU,
    Residual,
    Sgd,
    im2col,
    image_kernels,
    lenet,
    resnet18,
)
from kit.nn.replay import replay_off


class _ChunkedConv2D(Conv2D):
    """Columns built one example at a time (a large layer's path), never kept for backward."""

    column_bytes = 1
    keep_columns = False


def _image(*makers, mode="SEPARATE"):
    """A maker of Network([each maker's layer, Flatten(), Dense(5)]) on (2, 8, 8) images; with
    workspaces off, GlobalAvgPool for Flatten (whose view of a heap array a replay cannot fill)."""
    modes = {"training_workspace_mode": mode, "inference_workspace_mode": mode}
    head = GlobalAvgPool if mode == "NONE" else Flatten
    return lambda: Network([*(make() for make in makers), head(), Dense(5)], (2, 8, 8), updater=Sgd(0.05), **modes)


def _small_resnet():
    """resnet18's parts at a tenth of its width: a stem, a block, a block that halves with a projection."""
    stem = [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), MaxPool2D(3, stride=1, padding=1)]
    blocks = [Residual(4), Residual(8, use_1x1conv=True, stride=2)]
    return Network([*stem, *blocks, GlobalAvgPool(), Dense(5)], (1, 8, 8), updater=Sgd(0.01))


def _nets():
    """(name, network maker, input shape): each image layer kind, alone or in its family."""
    img = (2, 8, 8)
    return [
        ("lenet", lambda: lenet(num_classes=5, size=12, updater=Sgd(0.05)), (1, 12, 12)),
        ("resnet-small", _small_resnet, (1, 8, 8)),
        ("conv-same", _image(lambda: Conv2D(3, 3, padding=1)), img),
        ("conv-stride2-col2im", _image(lambda: Conv2D(3, 3, stride=2, padding=1)), img),
        ("conv-large-bank", _image(lambda: Conv2D(260, 3, padding=1)), img),
        ("conv-chunked", _image(lambda: _ChunkedConv2D(3, 3, padding=1)), img),
        ("conv-none-mode", _image(lambda: Conv2D(3, 3, padding=1), lambda: MaxPool2D(2), mode="NONE"), img),
        ("batchnorm-images", _image(lambda: BatchNorm(), lambda: ReLU()), img),
        ("batchnorm-flat", lambda: Network([Dense(6), BatchNorm(), ReLU(), Dense(5)], (12,)), (12,)),
        ("maxpool", _image(lambda: MaxPool2D(2)), img),
        ("maxpool-overlap-padded", _image(lambda: MaxPool2D(3, stride=2, padding=1)), img),
        ("avgpool", _image(lambda: AvgPool2D(2)), img),
        ("avgpool-overlap-padded", _image(lambda: AvgPool2D(3, stride=1, padding=1)), img),
        ("global-avgpool", lambda: Network([GlobalAvgPool(), Dense(5)], img), img),
        ("residual", _image(lambda: Residual(2)), img),
        ("residual-projection", _image(lambda: Residual(4, use_1x1conv=True, stride=2)), img),
        ("residual-none-mode", _image(lambda: Residual(2), mode="NONE"), img),
    ]


def _data(shape, n=8, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *shape)).astype("float32")
    return DataSet(x, np.eye(5, dtype="float32")[rng.integers(0, 5, n)])


@pytest.mark.parametrize(("name", "make", "shape"), _nets(), ids=[n[0] for n in _nets()])
def test_replay_on_and_off_give_the_same_bits_for_every_image_layer(name, make, shape):
    data = _data(shape)
    replayed, plain = make(), make()
    scores = {True: [], False: []}
    for net, on in ((replayed, True), (plain, False)):
        kit.seed(7)
        with contextlib.nullcontext() if on else replay_off():
            for _ in range(5):  # the workspaces learn their sizes over the first steps
                scores[on] += [net.fit_batch(ds) for ds in ArrayIterator(data, batch_size=4)]
    assert np.isfinite(scores[False]).all(), scores[False]  # nan would fail the comparison for the wrong reason
    assert scores[True] == scores[False]  # every score, bit for bit: BatchNorm's training form
    np.testing.assert_array_equal(replayed.flat_params.numpy(), plain.flat_params.numpy())  # and running stats
    assert replayed.train_plans.used > 0, replayed.train_plans.declined
    x = data.features.numpy()[:3]
    for _ in range(3):  # BatchNorm's inference form
        with replay_off():
            expected = plain.output(x).numpy()
        np.testing.assert_array_equal(replayed.output(x).numpy(), expected)
    assert replayed.output_plans.used == 2, replayed.output_plans.declined


def test_a_recomputed_residual_block_runs_its_layers_and_says_why():
    net = Network([Residual(2, recompute=True), Flatten(), Dense(5)], (2, 8, 8))
    for ds in ArrayIterator(_data((2, 8, 8)), batch_size=4):
        net.fit_batch(ds)
        net.fit_batch(ds)
    assert net.train_plans.used == 0 and "Residual" in net.train_plans.declined


class _Calls:
    """How many times each watched code object ran (a sys.setprofile trace: where a debugger's
    breakpoint would stop)."""

    def __init__(self, **codes):
        self.names = {code: name for name, code in codes.items()}
        self.counts = dict.fromkeys(codes, 0)

    def __enter__(self):
        def profile(frame, event, arg):
            if event == "call" and frame.f_code in self.names:
                self.counts[self.names[frame.f_code]] += 1

        sys.setprofile(profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def _watched():
    kernels = ("conv2d_into", "conv2d_backward_into", "batchnorm_train_into", "add_relu_into")
    codes = {name: getattr(image_kernels, name).__wrapped__.__code__ for name in kernels}
    codes["max_pool_into"] = im2col.max_pool_into.__wrapped__.__code__
    for layer in (Conv2D, BatchNorm, MaxPool2D, Residual):
        codes[f"{layer.__name__}.forward"] = layer.forward.__code__
    return codes


def test_at_iteration_20_the_kernels_replay_and_the_layers_do_not_run_unless_the_switch_is_off():
    net = Network(
        [Conv2D(3, 3, padding=1), BatchNorm(), ReLU(), MaxPool2D(2), Residual(3), Flatten(), Dense(5)],
        (2, 8, 8),
        updater=Sgd(0.05),
    )
    ds = _data((2, 8, 8), n=4)
    for _ in range(19):
        net.fit_batch(ds)
    assert net.train_plans.used > 0, net.train_plans.declined
    with _Calls(**_watched()) as on:
        net.fit_batch(ds)  # iteration 20, replayed
    layers = {name: n for name, n in on.counts.items() if name.endswith(".forward")}
    assert layers == dict.fromkeys(layers, 0)  # no layer's forward ran
    assert on.counts["conv2d_into"] == 3 and on.counts["conv2d_backward_into"] == 3  # stem + the block's two
    assert on.counts["batchnorm_train_into"] == 3 and on.counts["max_pool_into"] == 1
    assert on.counts["add_relu_into"] == 1
    with replay_off(), _Calls(**_watched()) as off:
        net.fit_batch(ds)  # iteration 21, through the layers
    assert off.counts["Conv2D.forward"] == 3 and off.counts["BatchNorm.forward"] == 3
    assert off.counts["MaxPool2D.forward"] == 1 and off.counts["Residual.forward"] == 1
    assert off.counts["conv2d_into"] == 3  # the layers call the same kernels


def test_d2l_resnet18_answers_and_trains_replayed_with_the_layers_bits():
    replayed, plain = (resnet18(num_classes=5, size=4, updater=Sgd(0.01)) for _ in range(2))
    data = _data((1, 4, 4), n=4)  # at batch 2, BatchNorm over 1x1 maps of two examples diverges to nan
    with replay_off():
        expected = [plain.fit_batch(data) for _ in range(4)]
    assert np.isfinite(expected).all(), expected  # nan != nan: a diverged run could not compare its bits
    assert [replayed.fit_batch(data) for _ in range(4)] == expected
    assert replayed.train_plans.used > 0, replayed.train_plans.declined
    x = data.features.numpy()
    for _ in range(3):
        with replay_off():
            answer = plain.output(x).numpy()
        np.testing.assert_array_equal(replayed.output(x).numpy(), answer)
    assert replayed.output_plans.used == 2, replayed.output_plans.declined
