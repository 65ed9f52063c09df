"""ParallelInference: load with many clients, errors reach callers, back-pressure, shutdown."""

import threading

import numpy as np
import pytest

from kit.nn import Dense, Layer, Network, mlp
from kit.parallel import InferenceMode, ParallelInference


def inference_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("InferenceThread")]


@pytest.mark.parametrize("mode", list(InferenceMode))
def test_64_clients_200_requests_each_get_their_own_answer(mode):
    net = mlp(16, hidden=(32,), n_out=5, seed=3)
    requests = 200 if mode is InferenceMode.BATCHED else 40
    failures, served = [], [0]
    lock = threading.Lock()
    with ParallelInference(net, workers=2, inference_mode=mode, batch_limit=32, queue_limit=64) as pi:

        def client(c):
            rng = np.random.default_rng(c)
            for _ in range(requests):
                x = (
                    rng.standard_normal(16).astype(np.float32)
                    if rng.random() < 0.7
                    else rng.standard_normal((int(rng.integers(2, 5)), 16)).astype(np.float32)
                )
                got = pi.output(x).numpy()
                want = net.output(x.reshape(-1, 16)).numpy()
                want = want[0] if x.ndim == 1 else want
                with lock:
                    served[0] += 1
                    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                        failures.append((c, x.shape))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        if mode is InferenceMode.BATCHED:
            assert max(pi.batch_sizes) > 1  # requests really were merged
    assert not failures and served[0] == 64 * requests
    assert pi.requests_served == 64 * requests
    assert not inference_threads()


def test_worker_errors_reach_the_caller_and_the_worker_survives():
    net = mlp(4, hidden=(4,), n_out=2)
    with ParallelInference(net, workers=1) as pi:
        with pytest.raises(ValueError, match="features contain NaN"):
            pi.output(np.array([1.0, np.nan, 0, 0], dtype=np.float32))
        assert pi.output(np.zeros(4, np.float32)).shape == (2,)
        with pytest.raises(ValueError, match=r"expected one example of shape \(4,\) or a batch \(n, 4\), got \(5,\)"):
            pi.output(np.zeros(5, np.float32))


class Gate(Layer):
    """An identity layer that waits for an event: holds a worker busy on purpose."""

    event = threading.Event()

    def forward(self, x, mgr, training):
        Gate.event.wait(timeout=30)
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def mgr_type():
    from kit.nn.workspace_mgr import ArrayType

    return ArrayType.ACTIVATIONS


def test_a_full_queue_makes_callers_wait_and_shutdown_answers_everyone():
    Gate.event.clear()
    net = Network([Gate(), Dense(2)], (3,))
    pi = ParallelInference(net, workers=1, inference_mode="SEQUENTIAL", queue_limit=2)
    results = []

    def client():
        try:
            results.append(pi.output(np.zeros(3, np.float32)).shape)
        except RuntimeError as exc:
            results.append(str(exc))

    clients = [threading.Thread(target=client) for _ in range(4)]
    for t in clients:
        t.start()
    for _ in range(200):  # one request is running, two wait in the queue, one waits for room
        if pi._queue.full():
            break
        threading.Event().wait(0.01)
    assert pi._queue.full() and len(results) == 0
    Gate.event.set()
    for t in clients:
        t.join(timeout=30)
    assert results == [(2,)] * 4
    Gate.event.clear()
    blocked = [threading.Thread(target=client) for _ in range(3)]
    for t in blocked:
        t.start()
    threading.Event().wait(0.2)
    Gate.event.set()
    pi.shutdown()
    for t in blocked:
        t.join(timeout=30)
    assert len(results) == 7 and not inference_threads()
    with pytest.raises(RuntimeError, match="shut down"):
        pi.output(np.zeros(3, np.float32))


def test_update_model_swaps_parameters():
    a, b = mlp(4, hidden=(4,), n_out=2, seed=1), mlp(4, hidden=(4,), n_out=2, seed=2)
    x = np.ones(4, np.float32)
    with ParallelInference(a, workers=2) as pi:
        np.testing.assert_allclose(pi.output(x).numpy(), a.output(x[None]).numpy()[0], rtol=1e-6)
        pi.update_model(b)
        np.testing.assert_allclose(pi.output(x).numpy(), b.output(x[None]).numpy()[0], rtol=1e-6)


def test_invalid_settings():
    net = mlp(4, hidden=(2,), n_out=2)
    with pytest.raises(ValueError, match=r"batch_limit=0\)"):
        ParallelInference(net, batch_limit=0)
    with pytest.raises(ValueError, match="'FAST' is not a valid InferenceMode"):
        ParallelInference(net, inference_mode="FAST")
    assert not inference_threads()
