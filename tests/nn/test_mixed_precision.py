"""Mixed precision (kit.nn.mixed): float16 compute, float32 master weights, dynamic loss scaling.

Each claim of the module's docstring is checked here: accuracy as float32's, a skipped step on
overflow, growth after clean steps, the failure of plain float16 it fixes, gradients against a
float64 finite-difference reference, save/load, the parallel paths, early stopping, workspaces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import MSE, Adam, BatchNorm, Dense, ModelFileError, Network, ReLU, Sgd, Tanh, mlp
from kit.nn.config import NetworkConfig, NetworkConfigError
from kit.nn.loop import NonFiniteScoreError
from kit.nn.mixed import LossScaleError, LossScaler
from kit.parallel import ParallelInference, ParallelWrapper
from kit.training.earlystopping import (
    DataSetLossCalculator,
    EarlyStoppingConfig,
    EarlyStoppingTrainer,
    InMemoryModelSaver,
    LocalFileModelSaver,
    MaxEpochsTerminationCondition,
)
from kit.training.listeners import ScoreIterationListener

MIXED = {"dtype": "float16", "master_dtype": "float32", "loss_scale": "dynamic"}


@pytest.fixture(scope="module")
def digits():
    return load_digits()


def _digits_net(updater=None, **kw) -> Network:
    return Network([Dense(64), ReLU(), Dense(10)], input_shape=(64,), updater=updater or Adam(1e-2), seed=0, **kw)


def _batches(digits, n: int, size: int = 64) -> list[DataSet]:
    return list(ArrayIterator(digits[0], size))[:n]


# ---- training ------------------------------------------------------------------------------
def test_mixed_precision_reaches_float32_accuracy_on_digits(digits):
    train, test = digits
    acc = {}
    for name, kw in (("float32", {"dtype": "float32"}), ("mixed", MIXED)):
        net = _digits_net(**kw)
        net.fit(ArrayIterator(train, 64), epochs=5)
        acc[name] = net.evaluate(ArrayIterator(test, 256)).accuracy()
    assert acc["float32"] > 0.9
    assert abs(acc["mixed"] - acc["float32"]) <= 0.02, acc
    assert net.flat_params.dtype == np.float16 and net.flat_grads.dtype == np.float16
    assert net.flat_master.dtype == np.float32 and all(s.dtype == np.float32 for s in net.updater_state.values())
    np.testing.assert_array_equal(net.flat_params.numpy(), net.flat_master.numpy().astype(np.float16))
    assert net.loss_scaler.skipped_steps == 0 and net.iteration == 5 * 23


def test_plain_float16_stalls_where_mixed_precision_trains(digits):
    """Fine-tuning a converged digits net with a small learning rate, full batch: float16 gradients
    underflow (tens of times more of them are 0 than with scaling) and most updates are smaller
    than half a float16 spacing, so plain float16 parameters stop changing; mixed trains as float32."""
    train = digits[0]
    ref = _digits_net()
    ref.fit(ArrayIterator(train, 64), epochs=15)
    runs = {}
    for name, kw in (("float32", {"dtype": "float32"}), ("float16", {"dtype": "float16"}), ("mixed", MIXED)):
        net = _digits_net(Sgd(0.002), **kw)
        net.set_params(ref.params())
        net.compute_gradient_and_score(train)
        grads = net.flat_grads.numpy().astype(np.float64) / (net.loss_scaler.scale if net.loss_scaler else 1)
        before, start = net.params().numpy().copy(), net.score(train)
        for _ in range(20):
            net.fit_batch(train)
        runs[name] = {
            "grads": grads,
            "changed": float(np.mean(net.params().numpy() != before)),
            "gain": start - net.score(train),
        }
    nonzero = runs["float32"]["grads"] != 0
    lost = {k: float(np.mean(runs[k]["grads"][nonzero] == 0)) for k in ("float16", "mixed")}
    assert lost["float16"] > 5 * lost["mixed"], lost  # underflow to 0, which scaling prevents
    assert runs["float16"]["changed"] < 0.05 < 0.1 < runs["mixed"]["changed"], runs
    assert runs["mixed"]["gain"] > 0.9 * runs["float32"]["gain"] > 0
    assert runs["float16"]["gain"] < 0.3 * runs["float32"]["gain"]


def test_an_overflow_skips_the_step_and_halves_the_scale(digits):
    ds = _batches(digits, 1)[0]
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**40))
    params, master = net.flat_params.numpy().copy(), net.flat_master.numpy().copy()
    score = net.fit_batch(ds)  # the seed times 2**40 is inf in float16
    assert np.isfinite(score)  # the loss itself is fine: the step is skipped, not an error
    scaler = net.loss_scaler
    assert (scaler.scale, scaler.skipped_steps, scaler.clean_steps) == (2.0**39, 1, 0)
    np.testing.assert_array_equal(net.flat_params.numpy(), params)
    np.testing.assert_array_equal(net.flat_master.numpy(), master)
    assert np.isfinite(net.flat_params.numpy()).all()
    assert all(not s.numpy().any() for s in net.updater_state.values())  # Adam's moments untouched
    assert net.iteration == 1  # the iteration is counted (as PyTorch's loop counts it)
    while net.loss_scaler.skipped_steps == net.iteration:  # back off until a step applies
        net.fit_batch(ds)
    assert net.loss_scaler.scale < 2.0**39 and net.loss_scaler.clean_steps == 1
    # the first applied step is Adam's step 1 (t did not advance on the skipped ones): as a fresh net's
    fresh = _digits_net(**MIXED)
    fresh.fit_batch(ds)
    np.testing.assert_allclose(net.flat_master.numpy(), fresh.flat_master.numpy(), rtol=0, atol=1e-6)


def test_the_scale_grows_after_growth_interval_clean_steps(digits):
    batches = _batches(digits, 7)
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**8, growth_interval=3))
    seen = []
    for ds in batches:
        net.fit_batch(ds)
        seen.append((net.loss_scaler.scale, net.loss_scaler.clean_steps))
    assert seen == [(256, 1), (256, 2), (512, 0), (512, 1), (512, 2), (1024, 0), (1024, 1)]


def test_a_scale_below_the_floor_raises_naming_scale_skips_and_remedy(digits):
    ds = _batches(digits, 1)[0]
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**40, min_scale=2.0**37))
    for _ in range(3):
        net.fit_batch(ds)
    with pytest.raises(
        LossScaleError, match=r"would fall to 6\.87195e\+10, below min_scale 1\.37439e\+11, after 4 skipped"
    ):
        net.fit_batch(ds)
    with pytest.raises(LossScaleError, match="Lower the learning rate"):
        net.fit_batch(ds)


def test_a_fixed_scale_trains_as_no_scale_and_l2_applies_to_the_unscaled_gradient(digits):
    batches = _batches(digits, 5)
    nets = [_digits_net(Adam(1e-2), dtype="float32", l2=1e-3, loss_scale=s) for s in (None, 1024.0)]
    for net in nets:
        scores = [net.fit_batch(ds) for ds in batches]
    np.testing.assert_allclose(nets[1].flat_params.numpy(), nets[0].flat_params.numpy(), atol=1e-6)
    assert nets[1].loss_scaler.scale == 1024.0 and not nets[1].loss_scaler.dynamic
    assert scores[-1] == pytest.approx(nets[0].last_score, rel=1e-5)  # the score holds the L2 penalty


# ---- gradients against a float64 finite-difference reference --------------------------------
def _numeric_gradient(net: Network, ds: DataSet, h: float = 1e-6) -> np.ndarray:
    ref = Network.from_config(net.configuration.replace(dtype="float64", master_dtype=None, loss_scale=None))
    ref.set_params(net.flat_master.numpy().astype(np.float64))
    params = ref.flat_params.numpy()  # a view: edits reach the network
    num = np.zeros_like(params)
    for i in range(params.size):
        keep = params[i]
        params[i] = keep + h
        up = ref.score(ds)
        params[i] = keep - h
        down = ref.score(ds)
        params[i] = keep
        num[i] = (up - down) / (2 * h)
    return num


def _applied_gradient(net: Network, ds: DataSet) -> np.ndarray:
    """The gradient the updater received: Sgd(lr=1) moves the master weights by exactly it."""
    before = net.flat_master.numpy().astype(np.float64)
    net.fit_batch(ds)
    assert net.loss_scaler.skipped_steps == 0
    return before - net.flat_master.numpy().astype(np.float64)


@pytest.mark.parametrize("loss", ["xent", "mse"])
def test_the_scaled_path_matches_finite_differences_in_float64(loss):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4))
    if loss == "xent":
        ds, kw = DataSet(x, rng.integers(0, 3, 5), num_classes=3), {}
    else:
        ds, kw = DataSet(x, rng.standard_normal((5, 3))), {"loss": MSE()}
    net = Network([Dense(6), Tanh(), Dense(3)], (4,), updater=Sgd(1.0), dtype="float64", loss_scale=2.0**10, **kw)
    num = _numeric_gradient(net, ds)
    np.testing.assert_allclose(_applied_gradient(net, ds), num, rtol=1e-5, atol=1e-8)


def test_the_mixed_float16_gradient_matches_a_float64_reference_within_float16_precision():
    rng = np.random.default_rng(1)
    ds = DataSet(rng.standard_normal((16, 4)), rng.integers(0, 3, 16), num_classes=3)
    net = Network([Dense(6), Tanh(), Dense(3)], (4,), updater=Sgd(1.0), **MIXED)
    num = _numeric_gradient(net, ds)  # of the float32 master weights, in float64
    got = _applied_gradient(net, ds)
    np.testing.assert_allclose(got, num, rtol=0, atol=2e-2 * np.abs(num).max())
    assert np.corrcoef(got, num)[0, 1] > 0.999


# ---- configuration and validation ------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"dtype": "float32", "master_dtype": "float16"}, r"master_dtype='float16'.*at least as wide.*master_dtype="),
        ({"dtype": "float64", "master_dtype": "float32"}, r"dtype='float64', master_dtype='float32'"),
        ({"master_dtype": "int32"}, r"master_dtype='int32'"),
        ({"master_dtype": "float128x"}, r"master_dtype='float128x'.*unknown dtype"),
        ({"loss_scale": 0}, r"loss_scale=0\): give None .*'dynamic'"),
        ({"loss_scale": -1}, r"loss_scale=-1\)"),
        ({"loss_scale": float("nan")}, r"loss_scale=nan\)"),
        ({"loss_scale": float("inf")}, r"loss_scale=inf\)"),
        ({"loss_scale": True}, r"loss_scale=True\)"),
        ({"loss_scale": "Dynamic"}, r"loss_scale='Dynamic'\).*did you mean 'dynamic'"),
        ({"loss_scale": "auto"}, r"loss_scale='auto'\): unknown loss scale; give None"),
    ],
)
def test_network_arguments_are_checked_at_the_call_naming_value_and_remedy(kw, message):
    with pytest.raises(ValueError, match=message):
        Network([Dense(2)], (3,), **kw)


def test_the_configuration_keeps_master_dtype_and_loss_scale_and_float32_json_is_unchanged():
    plain = mlp(6, hidden=(5,), n_out=3)
    assert "master_dtype" not in plain.configuration.to_json() and "loss_scale" not in plain.configuration.to_json()
    net = mlp(
        6, hidden=(5,), n_out=3, dtype="float16", master_dtype="float32", loss_scale=LossScaler(growth_interval=7)
    )
    cfg = NetworkConfig.from_json(net.configuration.to_json())
    assert cfg == net.configuration and cfg.master_dtype == "float32"
    assert cfg.loss_scale["growth_interval"] == 7 and cfg.loss_scale["type"] == "dynamic"
    twin = Network.from_config(cfg)
    assert twin.mixed and twin.loss_scaler.growth_interval == 7
    assert mlp(6, hidden=(5,), n_out=3, loss_scale=8).configuration.loss_scale == 8.0
    same = mlp(6, hidden=(5,), n_out=3, dtype="float32", master_dtype="float32")
    assert not same.mixed and same.configuration.master_dtype is None  # the same dtype is no master copy
    for change, message in (
        ({"master_dtype": "float16"}, r"NetworkConfig\(dtype='float32', master_dtype='float16'\)"),
        ({"loss_scale": "Dynamic"}, r"NetworkConfig\(loss_scale='Dynamic'\).*did you mean"),
        ({"loss_scale": {"type": "dynamic", "growth_interval": 0}}, r"growth_interval=0"),
    ):
        with pytest.raises(NetworkConfigError, match=message):
            plain.configuration.replace(**change)


# ---- files, copies, early stopping ------------------------------------------------------------
def _state(net: Network) -> dict[str, np.ndarray]:
    out = {k: v.numpy().copy() for k, v in net.state_arrays().items()}
    out["loss_scaler"] = net.loss_scaler.state()
    return out


def test_save_load_continues_bit_identically_with_master_weights_and_scaler(digits, tmp_path):
    batches = _batches(digits, 12)
    spec = {"dtype": "float16", "master_dtype": "float32", "loss_scale": LossScaler(2.0**20, growth_interval=2)}
    whole = _digits_net(**spec)
    for ds in batches:
        whole.fit_batch(ds)
    first = _digits_net(**spec)
    for ds in batches[:6]:
        first.fit_batch(ds)
    assert first.loss_scaler.skipped_steps > 0  # 2**20 overflows first: the state is worth saving
    first.save(tmp_path / "mixed.npz")
    loaded = Network.load(tmp_path / "mixed.npz")
    assert loaded.configuration == first.configuration and loaded.iteration == 6
    for key, value in _state(first).items():
        np.testing.assert_array_equal(_state(loaded)[key], value, err_msg=key)
    for ds in batches[6:]:
        loaded.fit_batch(ds)
    for key, value in _state(whole).items():
        np.testing.assert_array_equal(_state(loaded)[key], value, err_msg=key)


@pytest.mark.parametrize(
    "edit",
    [
        lambda meta, arrays: meta["config"].update(master_dtype=None),
        lambda meta, arrays: meta["config"]["loss_scale"].update(growth_interval=1),
        lambda meta, arrays: arrays.update(loss_scaler=np.array([2.0**30, 0.0, 0.0])),
        lambda meta, arrays: arrays.update(master=arrays["master"] * 2),
    ],
)
def test_the_integrity_check_covers_the_new_fields_and_arrays(tmp_path, edit):
    net = mlp(6, hidden=(5,), n_out=3, **MIXED)
    path = tmp_path / "m.npz"
    net.save(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes().decode())
    edit(meta, arrays)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(ModelFileError, match="does not match its SHA-256"):
        Network.load(path)


def test_copies_keep_the_scaler_and_refuse_a_precision_mismatch(digits):
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**30))
    net.fit_batch(_batches(digits, 1)[0])
    twin = net.clone()
    assert twin.loss_scaler.state().tolist() == net.loss_scaler.state().tolist()
    np.testing.assert_array_equal(twin.flat_master.numpy(), net.flat_master.numpy())
    with pytest.raises(ValueError, match="one network keeps master weights and the other does not"):
        _digits_net(dtype="float16").copy_state_from(net)


def test_set_params_writes_the_master_weights_at_their_precision():
    net = mlp(3, hidden=(2,), n_out=2, **MIXED)
    values = np.full(net.num_params, 1 + 2**-13)  # between two float16 values, exact in float32
    net.set_params(values)
    assert float(net.flat_master.numpy()[0]) == 1 + 2**-13 and float(net.flat_params.numpy()[0]) != 1 + 2**-13


@pytest.mark.parametrize("saver", ["memory", "file"])
def test_early_stopping_keeps_the_best_models_master_weights_and_scaler(digits, tmp_path, saver):
    train, test = digits
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**18, growth_interval=5))
    config = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(2)],
        score_calculator=DataSetLossCalculator(ArrayIterator(test, 256)),
        model_saver=InMemoryModelSaver() if saver == "memory" else LocalFileModelSaver(str(tmp_path)),
        save_last_model=True,
    )
    result = EarlyStoppingTrainer(config, net, ArrayIterator(train, 64)).fit()
    latest = config.model_saver.get_latest_model()
    assert latest.mixed and latest.loss_scaler is not None
    assert latest.loss_scaler.state().tolist() == net.loss_scaler.state().tolist()
    np.testing.assert_array_equal(latest.flat_master.numpy(), net.flat_master.numpy())
    assert result.best_model.mixed and result.best_model.loss_scaler.skipped_steps >= 2  # 2**18 overflowed


# ---- parallel --------------------------------------------------------------------------------
def test_one_worker_trains_as_the_network_does(digits):
    batches = _batches(digits, 8)
    alone = _digits_net(**MIXED)
    alone.fit(batches, epochs=1)
    net = _digits_net(**MIXED)
    with ParallelWrapper(net, workers=1, prefetch_buffer=0) as pw:
        pw.fit(batches, epochs=1)
    for key, value in _state(alone).items():
        np.testing.assert_array_equal(_state(net)[key], value, err_msg=key)


def test_averaging_gives_replicas_one_state_when_one_of_them_skips(digits):
    batches = _batches(digits, 8)
    net = _digits_net(**MIXED)
    with ParallelWrapper(net, workers=2, averaging_frequency=1, prefetch_buffer=0) as pw:
        pw.run_on_worker(1, lambda w: w.replica.loss_scaler.load_state([2.0**40, 0, 0]))  # worker 1 overflows
        pw.fit(batches[:2], epochs=1)
        states = [r.loss_scaler.state().tolist() for r in pw.replicas]
        assert states[0] == states[1] == [2.0**16, 1, 0]  # the careful (smallest) scale wins; one skip counted
        pw.fit(batches, epochs=1)
        a, b = pw.replicas
        np.testing.assert_array_equal(a.flat_master.numpy(), b.flat_master.numpy())
        np.testing.assert_array_equal(a.flat_params.numpy(), a.flat_master.numpy().astype(np.float16))
    assert np.isfinite(net.flat_master.numpy()).all() and net.iteration == 1 + 4
    np.testing.assert_array_equal(net.flat_params.numpy(), net.flat_master.numpy().astype(np.float16))


def test_shared_gradients_encode_the_float32_master_update(digits):
    train = digits[0]
    nets = {"float32": _digits_net(dtype="float32"), "mixed": _digits_net(**MIXED)}
    for net in nets.values():
        with ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS", prefetch_buffer=0) as pw:
            pw.fit(ArrayIterator(train, 64), epochs=2)
            a, b = pw.replicas
            np.testing.assert_array_equal(a.flat_master.numpy(), b.flat_master.numpy())
            assert pw.run_on_worker(0, lambda w: w.residual.dtype) == np.float32
    mixed = nets["mixed"]
    np.testing.assert_array_equal(mixed.flat_params.numpy(), mixed.flat_master.numpy().astype(np.float16))
    start = _digits_net().flat_params.numpy().astype(np.float64)
    moved = {name: net.flat_master.numpy() - start for name, net in nets.items()}
    assert np.count_nonzero(moved["mixed"]) > 0.5 * start.size  # threshold steps of +-tau, in float32
    assert np.corrcoef(moved["mixed"], moved["float32"])[0, 1] > 0.9  # float32's steps, within float16 noise


def test_parallel_inference_serves_the_float16_copy(digits):
    train, test = digits
    net = _digits_net(**MIXED)
    net.fit(ArrayIterator(train, 64), epochs=1)
    x = test.features.numpy()[:32]
    with ParallelInference(net, workers=2) as pi:
        served = pi.output(x)
    served = served.numpy() if hasattr(served, "numpy") else np.asarray(served)
    assert served.dtype == np.float16
    np.testing.assert_array_equal(served, net.output(x).numpy())


# ---- where the bytes go ------------------------------------------------------------------------
def _training_cycle_bytes(digits, **kw) -> dict[str, int]:
    net = Network(
        [Dense(256), ReLU(), BatchNorm(), Dense(256), ReLU(), Dense(10)], (64,), seed=0, **kw
    )  # SEPARATE: activations, layer working memory and updater working memory in three workspaces
    for ds in _batches(digits, 3, 128):
        net.fit_batch(ds)
    stats = net.workspace_stats()["training"]
    return {name.split("/")[-1]: s["last_cycle_bytes"] for name, s in stats.items()}


def test_float16_activations_halve_the_workspace_bytes(digits):
    f32, f16, mixed = (
        _training_cycle_bytes(digits, **kw) for kw in ({"dtype": "float32"}, {"dtype": "float16"}, MIXED)
    )
    act = "WS_ALL_LAYERS_ACT"  # activations and their gradients: float16 in forward and backward
    assert 0.45 <= mixed[act] / f32[act] <= 0.55, (mixed, f32)
    assert mixed[act] == f16[act]
    # the update works in float32, in the unscaled gradient itself (this step's own array): no
    # temporary beside it, so the updater carves what float32's does (it carved twice as much before)
    assert mixed["WS_UPDATER_WORKING_MEM"] == f16["WS_UPDATER_WORKING_MEM"] == f32["WS_UPDATER_WORKING_MEM"] > 0
    assert sum(mixed.values()) < sum(f32.values())  # so the whole cycle is smaller than float32's


def test_the_score_listener_shows_scale_and_skipped_steps(digits):
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**40))
    listener = ScoreIterationListener(1)
    net.fit(_batches(digits, 2), epochs=1, listeners=[listener])
    assert listener.lines[0].endswith("(loss scale 5.49756e+11, 1 skipped steps)")
    assert listener.lines[1].endswith("(loss scale 2.74878e+11, 2 skipped steps)")
    plain = ScoreIterationListener(1)
    _digits_net().fit(_batches(digits, 1), epochs=1, listeners=[plain])
    assert "loss scale" not in plain.lines[0]


def _overflowing(digits, size=64):
    """A batch whose float16 forward pass overflows in the first Dense layer: finite features of
    60,000 (float16 holds up to 65,504), times 64 inputs' worth of weights."""
    x = np.full((size, 64), 60_000.0, dtype=np.float32)
    return DataSet(x, digits[0].labels.numpy()[:size])


@pytest.mark.parametrize("wrapped", [False, True], ids=["fit", "ParallelWrapper"])
def test_a_skipped_step_is_not_an_error_and_fit_trains_on(digits, wrapped):
    """The dynamic scaler skipped the overflowing batch, and fit() then stopped anyway with
    NonFiniteScoreError blaming the parameters."""
    good = _batches(digits, 2)
    net = _digits_net(**MIXED)
    data = [good[0], _overflowing(digits), good[1]]
    if wrapped:
        with ParallelWrapper(net, workers=1, prefetch_buffer=0) as pw:
            pw.fit(data)
        scaler = pw.replicas[0].loss_scaler if hasattr(pw, "replicas") else net.loss_scaler
    else:
        net.fit(data)
        scaler = net.loss_scaler
    assert scaler.skipped_steps == 1 and scaler.scale == 2.0**15
    assert np.all(np.isfinite(net.params().numpy()))


def test_a_forward_overflow_at_every_scale_names_the_layer_and_changes_nothing(digits):
    """Item 10's error where an error is right: never "the parameters may no longer be finite"."""
    net = _digits_net(dtype="float16", master_dtype="float32", loss_scale=LossScaler(2.0**2, min_scale=1.0))
    bad = _overflowing(digits)
    net.fit_batch(bad)
    net.fit_batch(bad)  # 4 -> 2 -> 1: two skips
    before = (net.loss_scaler.state().tolist(), net.iteration, net.flat_master.numpy().copy())
    with pytest.raises(LossScaleError, match=r"the activations of layer 0 \(Dense\) exceed float16's range"):
        net.fit_batch(bad)
    after = (net.loss_scaler.state().tolist(), net.iteration, net.flat_master.numpy())
    assert before[0] == after[0] and before[1] == after[1]  # nothing moved: scale, counts, iteration
    np.testing.assert_array_equal(before[2], after[2])
    plain = _digits_net(dtype="float16")  # no scaler: the loop's error names the layer too
    with pytest.raises(NonFiniteScoreError, match=r"the activations of layer 0 \(Dense\) exceed float16's range"):
        plain.fit([bad])


@pytest.mark.parametrize("first", [True, False], ids=["on-the-first-step", "later"])
def test_after_a_loss_scale_error_the_state_is_that_of_a_run_without_the_bad_step(digits, first):
    """After a LossScaleError the step counted as skipped but not as an iteration: Adam's step
    count ran one behind, and after a failing first step the next clean one divided by zero."""
    good = _batches(digits, 3)
    kw = {"dtype": "float16", "master_dtype": "float32", "loss_scale": LossScaler(1.0, min_scale=1.0)}
    net, twin = _digits_net(**kw), _digits_net(**kw)
    if not first:
        net.fit_batch(good[0])
        twin.fit_batch(good[0])
    with pytest.raises(LossScaleError):
        net.fit_batch(_overflowing(digits))
    for ds in good[1:]:
        net.fit_batch(ds)  # no ZeroDivisionError in Adam
        twin.fit_batch(ds)
    np.testing.assert_array_equal(net.flat_master.numpy(), twin.flat_master.numpy())
    assert net.loss_scaler.state().tolist() == twin.loss_scaler.state().tolist()
    assert net.iteration == twin.iteration


def test_master_weights_without_a_loss_scale_do_not_move_on_a_non_finite_loss(digits):
    """Review finding: with master_dtype and no loss scale a NaN/inf loss still moved the master
    weights, and the loop then blamed the parameters instead of the overflowing layer."""
    net = _digits_net(dtype="float16", master_dtype="float32")
    before = net.flat_master.numpy().copy()
    with pytest.raises(NonFiniteScoreError, match=r"the activations of layer 0 \(Dense\) exceed float16's range"):
        net.fit([_overflowing(digits)])
    np.testing.assert_array_equal(net.flat_master.numpy(), before)
