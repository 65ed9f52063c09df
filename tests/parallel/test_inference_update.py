"""ParallelInference.update_model: after an update every answer is the new model's own output(),
whatever changed (parameters, layers, loss and output activation, dtype, shapes); nothing that
does not change answers is required to match; an update that cannot be made is refused clearly
and loses no request."""

import asyncio
import threading

import numpy as np
import pytest

from kit.core.devices import host_device_count
from kit.nn import MSE, Adam, BatchNorm, Dense, Layer, Nesterovs, Network, ReLU, Sgd, mlp
from kit.nn.workspace_mgr import ArrayType
from kit.parallel import InferenceMode, ParallelInference
from kit.parallel.inference.delivery import Request

N_IN = 6


class UpdateGate(Layer):
    """An identity layer that holds the thread running it until `release` is set."""

    release = threading.Event()
    entered = threading.Event()

    def forward(self, x, mgr, training):
        UpdateGate.entered.set()
        UpdateGate.release.wait(timeout=30)
        y = mgr.create(ArrayType.ACTIVATIONS, x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def batchnorm_net(mean_shift):
    net = Network([Dense(8), BatchNorm(), ReLU(), Dense(3)], (N_IN,), seed=3)
    bn = net.layers[1]
    bn.params["mean"].numpy()[...] = mean_shift  # running statistics: parameters no updater trains
    bn.params["var"].numpy()[...] = 1.0 + abs(mean_shift)
    return net


def other_device():
    return "cpu:1" if host_device_count() >= 2 else None


# (old model, new model): each new model differs from the old one in one thing only
CHANGES = {
    "parameters": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=2)),
    "loss and output activation": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=1, loss=MSE())),
    "layer width": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (16,), 3, seed=1)),
    "depth": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8, 8), 3, seed=1)),
    "hidden activation": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=1, activation="tanh")),
    "output size": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 5, seed=1)),
    "dtype": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=1, dtype="float64")),
    "input shape": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN + 2, (8,), 3, seed=1)),
    "running statistics": lambda: (batchnorm_net(0.0), batchnorm_net(0.7)),
    # nothing below changes answers: the update must not ask for it to match
    "updater type": lambda: (mlp(N_IN, (8,), 3, seed=1, updater=Adam()), mlp(N_IN, (8,), 3, seed=2, updater=Sgd())),
    "updater state": lambda: (
        mlp(N_IN, (8,), 3, seed=1, updater=Sgd()),
        mlp(N_IN, (8,), 3, seed=2, updater=Nesterovs(0.1, 0.5)),
    ),
    "l2 and workspace modes": lambda: (
        mlp(N_IN, (8,), 3, seed=1),
        mlp(N_IN, (8,), 3, seed=2, l2=1e-3, training_workspace_mode="NONE", inference_workspace_mode="NONE"),
    ),
    "the model's device": lambda: (mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=2, device=other_device())),
}

KINDS = ["output", "submit", "output_async"]


def ask(pi, kind, x, timeout=30):
    if kind == "output":
        return pi.output(x, timeout=timeout)
    if kind == "submit":
        return pi.submit(x, timeout=timeout).result(timeout=timeout)

    async def awaited():
        return await pi.output_async(x, timeout=timeout)

    return asyncio.run(awaited())


def expect_answers_of(pi, kind, model, rng):
    """A batch and a single example, each answered exactly as `model.output` answers it."""
    batch = rng.standard_normal((4, *model.input_shape)).astype(np.float32)
    got = ask(pi, kind, batch)
    want = model.output(batch)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    one = ask(pi, kind, batch[1])
    assert one.shape == want.shape[1:] and one.dtype == want.dtype
    np.testing.assert_allclose(one.numpy(), want.numpy()[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_an_update_to_a_model_with_another_loss_answers_with_its_output_activation(mode):
    """Issue 5: the same layers with MSE (identity output) after softmax cross-entropy: the
    answers were still probabilities (the parameters were copied, the loss was not)."""
    old = mlp(N_IN, (8,), 3, seed=1)
    new = mlp(N_IN, (8,), 3, seed=1, loss=MSE())
    x = np.random.default_rng(0).standard_normal((5, N_IN)).astype(np.float32) * 3
    with ParallelInference(old, workers=2, inference_mode=mode) as pi:
        np.testing.assert_allclose(pi.output(x).numpy().sum(axis=1), 1.0, rtol=1e-5)  # probabilities
        pi.update_model(new)
        np.testing.assert_allclose(pi.output(x).numpy(), new.output(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", list(InferenceMode))
@pytest.mark.parametrize("change", list(CHANGES))
def test_after_an_update_every_answer_is_the_new_models_output(change, mode, kind):
    old, new = CHANGES[change]()
    rng = np.random.default_rng(7)
    with ParallelInference(old, workers=2, inference_mode=mode) as pi:
        expect_answers_of(pi, kind, old, rng)
        pi.update_model(new)
        expect_answers_of(pi, kind, new, rng)
        empty = ask(pi, kind, np.zeros((0, *new.input_shape), np.float32))
        assert empty.shape == (0, *new.output_shape) and empty.dtype == new.dtype
        pi.update_model(old)  # and back
        expect_answers_of(pi, kind, old, rng)
        assert [r.device for r in pi.replicas] == pi.devices  # the replicas stay where they were


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_updates_while_clients_call_answer_with_the_old_model_or_the_new_one_then_the_new(mode):
    """Clients keep calling while the loss flips back and forth: every answer is one of the two
    models' own; every answer to a request made after update_model returned is the new one's."""
    models = [mlp(N_IN, (8,), 3, seed=1), mlp(N_IN, (8,), 3, seed=1, loss=MSE())]
    x = np.random.default_rng(1).standard_normal((2, N_IN)).astype(np.float32) * 3
    wanted = [m.output(x).numpy() for m in models]
    wrong, stop = [], threading.Event()
    with ParallelInference(models[0], workers=2, inference_mode=mode) as pi:

        def client():
            while not stop.is_set():
                got = pi.output(x, timeout=30).numpy()
                if not any(np.allclose(got, w, rtol=1e-5, atol=1e-6) for w in wanted):
                    wrong.append(got)

        clients = [threading.Thread(target=client) for _ in range(4)]
        for t in clients:
            t.start()
        try:
            for k in range(20):
                pi.update_model(models[k % 2])
                np.testing.assert_allclose(pi.output(x, timeout=30).numpy(), wanted[k % 2], rtol=1e-5, atol=1e-6)
        finally:
            stop.set()
            for t in clients:
                t.join(timeout=30)
        assert not any(t.is_alive() for t in clients) and not wrong


def hold_and_queue(pi, mode, x):
    """Hold the only replica in the gate with one request and have a second wait behind it
    (queued, or INPLACE waiting for the replica). Returns the threads and their answers."""
    UpdateGate.release.clear()
    UpdateGate.entered.clear()
    answers = {}

    def call(name):
        try:
            answers[name] = pi.output(x, timeout=30).numpy()
        except Exception as exc:
            answers[name] = exc

    held = threading.Thread(target=call, args=("held",))
    held.start()
    assert UpdateGate.entered.wait(timeout=10)
    waiting = threading.Thread(target=call, args=("waiting",))
    waiting.start()
    engine = pi._engine
    for _ in range(1000):  # until the second one waits: queued, or for the replica
        if pi.queued() == 1 or engine.has_replica.count == 1:
            break
        threading.Event().wait(0.01)
    assert pi.queued() == 1 or engine.has_replica.count == 1
    return [held, waiting], answers


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_an_update_to_another_input_shape_with_requests_in_flight_is_refused_and_loses_none(mode):
    old = Network([UpdateGate(), Dense(3)], (N_IN,), seed=1)
    new = Network([UpdateGate(), Dense(3)], (N_IN + 2,), seed=1)
    x = np.linspace(-1, 1, N_IN, dtype=np.float32)
    with ParallelInference(old, workers=1, inference_mode=mode) as pi:
        threads, answers = hold_and_queue(pi, mode, x)
        try:
            with pytest.raises(ValueError) as refused:
                pi.update_model(new)
            message = str(refused.value)
            assert "(8,)" in message and "(6,)" in message and "2 request(s)" in message, message
        finally:
            UpdateGate.release.set()
            for t in threads:
                t.join(timeout=30)
        want = old.output(x[None]).numpy()[0]
        for name in ("held", "waiting"):  # both answered, by the model they were made for
            np.testing.assert_allclose(answers[name], want, rtol=1e-5, atol=1e-6)
        assert pi.model is old and pi.requests_served == 2
        pi.update_model(new)  # nothing in flight now: the update is made
        y = np.linspace(-1, 1, N_IN + 2, dtype=np.float32)
        np.testing.assert_allclose(pi.output(y).numpy(), new.output(y[None]).numpy()[0], rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError, match=r"expected one example of shape \(8,\) or a batch \(n, 8\), got \(6,\)"):
            pi.output(x)


@pytest.mark.parametrize("mode", [InferenceMode.SEQUENTIAL, InferenceMode.BATCHED])
def test_a_request_checked_against_the_old_input_shape_is_refused_when_it_arrives_after_the_swap(mode):
    """The window between a caller's shape check and its queueing: an update to another input
    shape in between must not hand the request to a model that cannot take it."""
    old, new = mlp(N_IN, (8,), 3), mlp(N_IN + 2, (8,), 3)
    with ParallelInference(old, workers=1, inference_mode=mode) as pi:
        arr, single, _ = pi._prepare(np.zeros(N_IN, np.float32))  # checked against the old model
        pi.update_model(new)
        with pytest.raises(ValueError, match=r"got \(1, 6\): update_model changed the input shape"):
            pi._engine.submit(Request(arr, single), None)
        assert pi.queued() == 0 and pi.output(np.zeros(N_IN + 2, np.float32)).shape == (3,)


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_update_model_refuses_what_is_not_a_network_and_keeps_serving(mode):
    net = mlp(N_IN, (8,), 3)
    with ParallelInference(net, workers=2, inference_mode=mode) as pi:
        with pytest.raises(TypeError, match=r"update_model needs a kit\.nn\.Network, got dict"):
            pi.update_model({"layers": []})
        x = np.ones(N_IN, np.float32)
        np.testing.assert_allclose(pi.output(x).numpy(), net.output(x[None]).numpy()[0], rtol=1e-6)
