"""kit.nn.replay as a wrapper around the step: the layers' code runs whenever the switch is off, a
replay calls exactly the kernels the layers called, with the same numbers bit for bit, for every
layer kind; and no layer carries an entry point of its own for it."""

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest

import kit
from kit import settings
from kit.data import ArrayIterator, DataSet
from kit.nn import (
    MSE,
    Adam,
    BatchNorm,
    Dense,
    Dropout,
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
from kit.nn import replay as replay_module
from kit.nn.kernels import TAPE
from kit.nn.losses import Loss
from kit.nn.replay import record, replay_off


def _data(shape, n_out=5, n=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *shape)).astype("float32")
    return DataSet(x, np.eye(n_out, dtype="float32")[rng.integers(0, n_out, n)])


class _Calls:
    """How many times each watched function's code ran, seen by a sys.setprofile trace (the
    breakpoint a debugger would set in it)."""

    def __init__(self, *funcs):
        self.codes = {f.__code__: f.__qualname__ for f in funcs}
        self.counts = dict.fromkeys(self.codes.values(), 0)

    def __enter__(self):
        def profile(frame, event, arg):
            if event == "call" and frame.f_code in self.codes:
                self.counts[self.codes[frame.f_code]] += 1

        sys.setprofile(profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def test_with_the_switch_off_dense_forward_and_backward_run_at_iteration_20():
    ds = _data((12,), n=8)
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1))
    for _ in range(19):
        net.fit_batch(ds)
    assert net.train_plans.used > 0  # by iteration 20 the step is replayed
    with _Calls(Dense.forward, Dense.backward) as on:
        net.fit_batch(ds)
    assert on.counts == {"Dense.forward": 0, "Dense.backward": 0}  # the kernels ran, not the layers
    used = net.train_plans.used
    with replay_off(), _Calls(Dense.forward, Dense.backward) as off:
        net.fit_batch(ds)  # iteration 21, through the code the book teaches
        net.output(ds.features), net.output(ds.features)
    assert off.counts == {"Dense.forward": 2 + 4, "Dense.backward": 2}  # two layers: a step, two answers
    assert net.train_plans.used == used and net.output_plans.used == 0


def test_a_replay_calls_exactly_the_kernels_the_layers_called():
    ds = _data((12,), n=8)
    net = Network([Dense(16), Tanh(), Dropout(0.5), Dense(8), Sigmoid(), Dense(5)], (12,), updater=Adam(0.01), l2=1e-3)
    for _ in range(30):
        net.fit_batch(ds)
        if net.train_plans.used:
            break
    (plan,) = net.train_plans._plans.values()
    replayed = [func.__name__ for func, _ in plan.tape.calls]
    with replay_off():
        _, calls = record(lambda: net.fit_batch(ds))  # the same iteration, through the layers
    assert replayed == [func.__name__ for func, _, _ in calls]
    assert replayed[:3] == ["dense_into", "tanh_into", "uniform_into"]  # Dropout draws anew at each replay
    assert TAPE.calls is None  # nothing records once a recording ends


def _nets():
    """(name, network, input shape, replayed in training, replayed in inference): every layer kind."""
    img = (1, 8, 8)
    return [
        ("mlp-relu", lambda: mlp(12, hidden=(16, 8), n_out=5, updater=Sgd(0.1)), (12,), True, True),
        ("tanh", lambda: Network([Dense(16), Tanh(), Dense(5)], (12,), updater=Adam(0.01)), (12,), True, True),
        ("sigmoid-l2", lambda: Network([Dense(16), Sigmoid(), Dense(5)], (12,), l2=1e-3), (12,), True, True),
        ("softmax-mse", lambda: Network([Dense(5), Softmax()], (12,), loss=MSE()), (12,), True, True),
        ("dropout", lambda: Network([Dense(16), ReLU(), Dropout(0.5), Dense(5)], (12,)), (12,), True, True),
        ("flatten-inside", lambda: Network([Dense(12), Flatten(), Dense(5)], (12,)), (12,), True, True),
        ("lenet-conv-pool", lambda: lenet(num_classes=5, size=12), (1, 12, 12), True, True),
        ("batchnorm", lambda: Network([Dense(16), BatchNorm(), ReLU(), Dense(5)], (12,)), (12,), True, True),
        ("residual", lambda: Network([Residual(1), GlobalAvgPool(), Dense(5)], img), img, True, True),
        (
            "mixed-precision",
            lambda: mlp(12, hidden=(8,), n_out=5, dtype="float16", master_dtype="float32", loss_scale="dynamic"),
            (12,),
            False,
            True,
        ),
    ]


@pytest.mark.parametrize(("name", "make", "shape", "trains", "answers"), _nets(), ids=[n[0] for n in _nets()])
def test_replay_on_and_off_give_the_same_bits_for_every_layer_kind(name, make, shape, trains, answers):
    data = _data(shape, seed=1)
    dtype = "float16" if name == "mixed-precision" else "float32"
    data = DataSet(data.features.numpy().astype(dtype), data.labels.numpy().astype(dtype))
    replayed, plain = make(), make()
    scores = {True: [], False: []}
    for net, on in ((replayed, True), (plain, False)):
        kit.seed(7)  # Dropout's draws: the same generator state for both
        with contextlib.nullcontext() if on else replay_off():
            for _ in range(6):  # SEPARATE's working memory learns its size over the first steps
                scores[on] += [net.fit_batch(ds) for ds in ArrayIterator(data, batch_size=8)]
    assert scores[True] == scores[False]  # every score, bit for bit
    np.testing.assert_array_equal(replayed.flat_params.numpy(), plain.flat_params.numpy())
    assert (replayed.train_plans.used > 0) == trains, replayed.train_plans.declined
    x = data.features.numpy()[:4]
    for _ in range(3):
        with replay_off():
            expected = plain.output(x).numpy()
        np.testing.assert_array_equal(replayed.output(x).numpy(), expected)
    assert (replayed.output_plans.used == 2) == answers, replayed.output_plans.declined


def test_no_layer_or_loss_defines_an_entry_point_for_replay():
    import kit.nn  # noqa: F401  (every layer and loss class registered)

    for cls in [*Layer.registry.values(), *Loss.registry.values()]:
        own = [name for name in vars(cls) if name.startswith("plan")]
        assert not own, f"{cls.__name__} defines {own}: layers keep forward and backward only"
        methods = {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
        assert not methods & {"record", "replay", "step"}, cls.__name__
    nn_dir = os.path.dirname(replay_module.__file__)
    leftovers = {"plan.py", "train_plan.py", "plan_recording.py", "train_recording.py"} & set(os.listdir(nn_dir))
    assert not leftovers  # recording, replay and replayed inference: kit.nn.recording, replay, replay_inference


def test_kit_replay_reads_yes_and_no_and_refuses_anything_else():
    assert settings.replay({}) is True
    assert settings.replay({"KIT_REPLAY": "No"}) is False and settings.replay({"KIT_REPLAY": "1"}) is True
    with pytest.raises(settings.SettingError, match="KIT_REPLAY='sometimes'"):
        settings.replay({"KIT_REPLAY": "sometimes"})


def test_kit_replay_no_in_the_environment_turns_the_switch_off():
    code = "from kit.nn import replay; print(replay.switch.on)"
    env = {**os.environ, "KIT_REPLAY": "no"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("on", [True, False], ids=["replay-on", "replay-off"])
def test_the_training_panel_says_how_many_steps_were_replayed(on, capsys):
    from kit.monitor.widgets import TrainingPanel

    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode="SINGLE")
    panel = TrainingPanel(widgets=False, memory=False)
    with contextlib.nullcontext() if on else replay_off():
        net.fit(ArrayIterator(_data((12,), n=24), batch_size=8), epochs=2, listeners=[panel])
    panel.close()
    assert panel.replayed == net.train_plans.used == (4 if on else 0)  # seen twice, then replayed
    assert f"steps replayed {panel.replayed} of 6" in capsys.readouterr().out


def test_the_memory_timeline_marks_each_replayed_answer_and_sees_every_training_step_run_its_layers():
    net = mlp(12, hidden=(8,), n_out=5, updater=Sgd(0.1), training_workspace_mode="SINGLE")
    ds = _data((12,), n=8)
    for _ in range(3):
        net.fit_batch(ds)
    used = net.train_plans.used
    x = ds.features.numpy()
    with kit.memory_timeline() as tl:
        answers = [net.output(x) for _ in range(4)]  # seen once, recorded, then replayed twice
        net.fit_batch(ds)
    replays = [e for e in tl.events if e["kind"] == "replay"]
    assert len(replays) == 2 == net.output_plans.used - 1
    assert replays[0]["nbytes"] == net.output_plans._plans[8].buffer_bytes
    assert sum(r["replays"] for r in tl.summary()) == 2
    assert net.train_plans.used == used  # the step ran its layers: its arrays are in the timeline
    assert any(e["kind"] == "alloc" and e["array_type"] == "ACTIVATIONS" for e in tl.events)
    for a in answers[1:]:
        np.testing.assert_array_equal(a.numpy(), answers[0].numpy())
