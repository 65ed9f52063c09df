"""Network: digits accuracy, workspace modes, clones, bad input (answers, state, training: test_network_*.py)."""

import numpy as np
import pytest

import kit
from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import (
    Adam,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    MaxPool2D,
    Nesterovs,
    Network,
    ReLU,
    Sgd,
    WorkspaceMode,
    lenet,
    mlp,
    resnet18,
)


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def test_mlp_reaches_95_percent_on_the_embedded_digits(digits):
    train, test = digits
    net = mlp(64, hidden=(128,), n_out=10, updater=Adam(1e-2), seed=1)
    net.fit(ArrayIterator(train, batch_size=32, shuffle=True, seed=1), epochs=10)
    acc = net.evaluate(ArrayIterator(test, batch_size=128)).accuracy()
    assert acc >= 0.95, f"test accuracy {acc:.3f}"
    assert net.iteration == 10 * 45 and net.epoch == 10


def test_training_is_identical_in_every_workspace_mode(digits):
    train, _ = digits
    results = {}
    for mode in WorkspaceMode:
        net = mlp(64, hidden=(32, 16), n_out=10, training_workspace_mode=mode, inference_workspace_mode=mode)
        net.fit(ArrayIterator(train, batch_size=50), epochs=2)
        results[mode] = net.params().numpy()
    np.testing.assert_array_equal(results[WorkspaceMode.NONE], results[WorkspaceMode.SINGLE])
    np.testing.assert_array_equal(results[WorkspaceMode.NONE], results[WorkspaceMode.SEPARATE])


@pytest.mark.parametrize("mode", [WorkspaceMode.SINGLE, WorkspaceMode.SEPARATE])
def test_zero_heap_allocations_per_iteration_after_learning(digits, mode):
    train, _ = digits
    net = Network(
        [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
        (1, 8, 8),
        training_workspace_mode=mode,
    )
    images = DataSet(train.features.numpy().reshape(-1, 1, 8, 8)[:256], train.labels.numpy()[:256])
    it = ArrayIterator(images, batch_size=32)
    net.fit(it, epochs=2)  # learning: OVER_TIME working memory needs 2 x layers cycles
    before = kit.memory.heap_allocations(this_thread=True)
    net.fit(it, epochs=1)
    assert kit.memory.heap_allocations(this_thread=True) == before
    none = Network(
        [Conv2D(4, 3, padding=1), BatchNorm(), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
        (1, 8, 8),
        training_workspace_mode="NONE",
    )
    before = kit.memory.heap_allocations(this_thread=True)
    none.fit(it, epochs=1)
    assert kit.memory.heap_allocations(this_thread=True) - before > 8 * 20


def test_separate_peak_is_smaller_than_single_on_a_deep_net():
    x = np.random.default_rng(0).random((16, 3, 16, 16))
    y = np.random.default_rng(1).integers(0, 10, 16)
    ds = DataSet(x, y, num_classes=10)
    peaks = {}
    for mode in (WorkspaceMode.SINGLE, WorkspaceMode.SEPARATE):
        layers = []
        for _ in range(6):
            layers += [Conv2D(8, 3, padding=1), BatchNorm(), ReLU()]
        net = Network([*layers, Flatten(), Dense(10)], (3, 16, 16), training_workspace_mode=mode)
        for _ in range(15):
            net.fit(ds)
        stats = net.workspace_stats()["training"]
        peaks[mode] = sum(s["peak_used"] for s in stats.values())
    assert peaks[WorkspaceMode.SEPARATE] < 0.8 * peaks[WorkspaceMode.SINGLE], peaks


def test_clone_is_independent(digits):
    train, _ = digits
    net = mlp(64, hidden=(16,), n_out=10)
    twin = net.clone()
    np.testing.assert_array_equal(twin.params().numpy(), net.params().numpy())
    twin.fit(ArrayIterator(train, batch_size=64), epochs=1)
    assert not np.array_equal(twin.params().numpy(), net.params().numpy())


def test_params_and_set_params():
    net = mlp(4, hidden=(3,), n_out=2)
    p = net.params().numpy()
    assert p.shape == (4 * 3 + 3 + 3 * 2 + 2,)
    net.set_params(np.zeros_like(p))
    assert not net.params().numpy().any()
    with pytest.raises(ValueError, match="expected 23 values"):
        net.set_params(np.zeros(5))


def test_bad_input_gets_clear_errors(digits):
    _train, _ = digits
    net = mlp(64, hidden=(8,), n_out=10)
    with pytest.raises(ValueError, match=r"label 12 at index 1 is out of range for 10 classes"):
        DataSet(np.zeros((3, 64)), [0, 12, 3], num_classes=10)
    with pytest.raises(
        ValueError, match=r"features of shape \(2, 65\) do not fit the first layer, which expects \(batch, 64\)"
    ):
        net.fit(DataSet(np.zeros((2, 65)), [0, 1], num_classes=10))
    bad = np.zeros((4, 64))
    bad[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"features contain NaN or infinity \(1 values; first at index \[2, 5\]\)"):
        net.fit(DataSet(bad, [0, 1, 2, 3], num_classes=10))
    # floating data of another dtype is cast where it meets the network (issue 21, item 16)
    np.testing.assert_array_equal(
        net.output(kit.zeros((2, 64), dtype="float64")).numpy(), net.output(kit.zeros((2, 64))).numpy()
    )
    with pytest.raises(TypeError, match=r"features must be floating point, got dtype int64"):
        DataSet(kit.zeros((2, 64), dtype="int64"), [0, 1], num_classes=10)
    with pytest.raises(ValueError, match=r"labels of shape \(2, 3\) do not match the network's output \(2, 10\)"):
        net.fit(DataSet(np.zeros((2, 64)), [0, 2], num_classes=3))
    with pytest.raises(ValueError, match="Dense needs flat inputs"):
        Network([Dense(3)], (2, 2))
    with pytest.raises(ValueError, match=r"must be a finite number > 0 \(the learning rate\)"):
        Adam(-1)
    with pytest.raises(ValueError, match="does not fit an input of size 3"):
        Network([Conv2D(2, 5)], (1, 3, 3))


def test_resnet18_forward_and_backward_on_a_tiny_batch():
    net = resnet18(num_classes=10, in_channels=1, size=16)
    assert 11_000_000 < net.num_params < 11_300_000  # d2l's ResNet-18: about 11.2 M parameters
    x = np.random.default_rng(0).random((2, 1, 16, 16))
    ds = DataSet(x, [3, 7], num_classes=10)
    score = net.compute_gradient_and_score(ds)
    assert np.isfinite(score)
    grads = net.flat_grads.numpy()
    assert np.all(np.isfinite(grads)) and np.count_nonzero(grads) > 0.5 * grads.size
    assert net.output(x).shape == (2, 10)


def test_a_subclass_of_a_layer_without_working_memory_gets_its_scope_back():
    # Dense and ReLU's forward skip SEPARATE's per-layer working-memory scope; a subclass that
    # writes its own forward/backward and allocates working memory there must still get one
    from kit.nn.layers import BP, FF

    class ScaledReLU(ReLU):
        def forward(self, x, mgr, training):
            tmp = mgr.create(FF, x.shape, x.dtype, x.device)  # working memory in forward
            x.device.xp.multiply(x.data, 1.0, out=tmp.data)
            return super().forward(x, mgr, training)

    class CheckedDense(Dense):
        def backward(self, eps, mgr):
            mgr.create(BP, eps.shape, eps.dtype, eps.device)  # working memory in backward
            return super().backward(eps, mgr)

    assert ScaledReLU.forward_working_memory and not ReLU.forward_working_memory
    assert CheckedDense.backward_working_memory and not CheckedDense.forward_working_memory
    rng = np.random.default_rng(0)
    ds = DataSet(rng.random((16, 5)), rng.integers(0, 3, 16), num_classes=3)
    for mode in WorkspaceMode:
        net = Network([CheckedDense(8), ScaledReLU(), Dense(3)], (5,), training_workspace_mode=mode, seed=1)
        ref = Network([Dense(8), ReLU(), Dense(3)], (5,), training_workspace_mode=mode, seed=1)
        for _ in range(3):
            assert net.fit_batch(ds) == pytest.approx(ref.fit_batch(ds), rel=1e-6)


def test_label_rows_within_the_tolerance_pass_and_others_are_named():
    net = mlp(4, hidden=(5,), n_out=3, seed=0)
    x = np.zeros((3, 4), np.float32)
    soft = np.array([[1.0008, 0, 0], [0.5, 0.5, 0], [0, 0, 1]], np.float32)  # sums within 1e-3 of 1
    net.fit_batch(DataSet(x, soft))
    for row, bad in ((1, [0.5, 0.502, 0]), (2, [0, 0, 1.5]), (0, [-0.1, 1.1, 0])):
        labels = soft.copy()
        labels[row] = bad
        with pytest.raises(ValueError, match=rf"label row {row} is .*1 row\(s\) are not"):
            net.fit_batch(DataSet(x, labels))


def test_half_precision_networks_train_with_every_updater_and_keep_float32_state():
    # float16 moments underflow (g * g is 0 below |g| ~ 2e-4) and Adam's epsilon is 0 in float16:
    # the first Adam step used to divide 0 by 0. The state and its arithmetic are float32.
    previous = kit.backend.get_default_dtype()
    kit.backend.set_default_dtype("float16")
    try:
        rng = np.random.default_rng(0)
        ds = DataSet(rng.random((16, 6)), rng.integers(0, 3, 16), num_classes=3)
        for updater in (Sgd(0.1), Nesterovs(0.05), Adam(1e-2)):
            net = mlp(6, hidden=(5,), n_out=3, updater=updater, dtype="float16", seed=0)
            scores = [net.fit_batch(ds) for _ in range(30)]
            assert np.isfinite(net.flat_params.numpy()).all() and np.isfinite(scores).all(), type(updater).__name__
            assert scores[-1] < scores[0]
            assert net.flat_params.dtype == np.float16
            assert all(s.dtype == np.float32 for s in net.updater_state.values())
    finally:
        kit.backend.set_default_dtype(previous)


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


def test_empty_arrays_in_a_new_workspace_and_through_the_network():
    ws = kit.get_workspace_for_current_thread(name="EMPTY_FIRST")
    with ws:
        z = kit.zeros((0,))
        assert z.shape == (0,) and float(z.sum()) == 0.0
    net = mlp(6, hidden=(4,), n_out=3)
    assert net.output(np.zeros((0, 6))).shape == (0, 3)
    with pytest.raises(ValueError, match="0 examples"):
        net.fit_batch(DataSet(np.zeros((0, 6)), np.zeros((0, 3))))


def test_empty_dataset_tuple_and_zero_sizes_get_clear_errors():
    net = mlp(6, hidden=(4,), n_out=3)
    with pytest.raises(ValueError, match="0 examples"):
        net.fit(DataSet(np.zeros((0, 6)), np.zeros((0, 3))))
    with pytest.raises(TypeError, match="wrap features and labels in a DataSet"):
        net.fit((np.zeros((2, 6)), np.zeros(2)))
    with pytest.raises(ValueError, match=r"input_shape=\(0,\)"):
        mlp(0, hidden=(4,), n_out=3)
    with pytest.raises(ValueError, match=r"input_shape=\(0, 28, 28\)"):
        lenet(in_channels=0)


def test_set_params_refuses_values_that_overflow_the_network_dtype():
    net = mlp(4, hidden=(4,), n_out=3, dtype="float16")
    with pytest.raises(ValueError, match=r"magnitude 1e\+06 does not fit this network's float16"):
        net.set_params(np.full(net.num_params, 1e6))


def test_a_classification_loss_on_outputs_that_are_not_rows_is_refused_in_words_and_its_remedy_runs():
    """It failed inside NumPy ("output parameter for reduction operation maximum has the wrong
    number of dimensions"). It also offered loss=MSE(), with which no labels could be trained on:
    labels are (N,) or (N, C), never (N, 3, 4)."""
    from kit.nn import Dense, Flatten, Network, ReLU

    x = kit.ones((2, 3, 4))
    net = Network([ReLU()], input_shape=(3, 4))
    for call in (lambda: net.output(x), lambda: net.output(x), lambda: net.fit_batch(DataSet(x.numpy(), [0, 1]))):
        with pytest.raises(
            ValueError, match=r"shape \(2, 3, 4\) \(each example \(3, 4\)\); end the layers with Flatten"
        ):
            call()  # twice: the second call is the one a plan would answer
    flat = Network([ReLU(), Flatten(), Dense(5)], input_shape=(3, 4))
    assert flat.output(x).shape == (2, 5) and np.isfinite(flat.fit_batch(DataSet(x.numpy(), [0, 4], num_classes=5)))


@pytest.mark.parametrize("path", ["set_params", "copy_state_from", "assign"])
def test_a_value_the_networks_dtype_cannot_hold_is_refused_never_stored_as_inf(path):
    """Issue 43's sweep of the paths that write values into a network: copy_state_from stored 1e6
    into a float16 network as inf."""
    from kit.nn import mlp

    src = mlp(4, hidden=(3,), n_out=2, seed=0)
    dst = mlp(4, hidden=(3,), n_out=2, dtype="float16", seed=1)
    values = src.params().numpy().copy()
    values[0] = 1e6
    src.set_params(values)
    before = dst.params().numpy().copy()
    write = {
        "set_params": lambda: dst.set_params(values),
        "copy_state_from": lambda: dst.copy_state_from(src),
        "assign": lambda: dst.flat_params.assign(values),
    }[path]
    with pytest.raises(ValueError, match=r"1e\+06|does not fit this network's float16"):
        write()
    np.testing.assert_array_equal(dst.params().numpy(), before)
