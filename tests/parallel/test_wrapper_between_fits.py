"""ParallelWrapper between fits and at shutdown: every training hyper-parameter changed on the
model between two fits reaches the replicas (as it reaches `Network.fit`), and a shutdown()
from another thread during fit() says that the wrapper was shut down."""

import random
import threading

import numpy as np
import pytest
from _datasets import random_dataset

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import MSE, Adam, Nesterovs, Sgd, mlp
from kit.parallel import ParallelWrapper


@pytest.fixture(scope="module")
def small():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240])


def kit_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith(("ParallelWrapper", "kit-prefetch"))]


def set_attr(name, value):
    def change(net):
        setattr(net.updater, name, value)

    return change


def replace_updater(make):
    def change(net):
        net.updater = make()

    return change


# (the updater to start with, a change made to the model between two fits)
CHANGES = {
    "Sgd lr": (lambda: Sgd(0.1), set_attr("lr", 0.02)),
    "Nesterovs lr": (lambda: Nesterovs(0.05, 0.9), set_attr("lr", 0.2)),
    "Nesterovs momentum": (lambda: Nesterovs(0.05, 0.9), set_attr("momentum", 0.3)),
    "Adam lr": (lambda: Adam(1e-2), set_attr("lr", 1e-3)),
    "Adam beta1": (lambda: Adam(1e-2), set_attr("beta1", 0.5)),
    "Adam beta2": (lambda: Adam(1e-2), set_attr("beta2", 0.9)),
    "Adam epsilon": (lambda: Adam(1e-2), set_attr("epsilon", 1e-2)),
    "a new updater object": (lambda: Adam(1e-2), replace_updater(lambda: Adam(3e-3, beta1=0.8, epsilon=1e-6))),
    "another updater type": (lambda: Adam(1e-2), replace_updater(lambda: Sgd(0.05))),
    "l2": (lambda: Sgd(0.1), lambda net: setattr(net, "l2", 1e-2)),
    "loss": (lambda: Sgd(0.1), lambda net: setattr(net, "loss", MSE())),
    "nothing": (lambda: Adam(1e-2), lambda net: None),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_hyper_parameter_changed_between_fits_reaches_the_replica_as_it_reaches_network_fit(small, change):
    """Issue 13: the replicas kept the updater (and L2, loss) they were built with: a learning-rate
    change between fits was ignored. One worker trains exactly as the network itself does."""
    make, modify = CHANGES[change]
    net = mlp(64, hidden=(16,), n_out=10, updater=make(), seed=2)
    ref = net.clone()
    with ParallelWrapper(net, workers=1, prefetch_buffer=0) as pw:
        pw.fit(ArrayIterator(small, 40))
        ref.fit(ArrayIterator(small, 40))
        np.testing.assert_array_equal(net.params().numpy(), ref.params().numpy())
        modify(net)
        modify(ref)
        pw.fit(ArrayIterator(small, 40), epochs=2)
        ref.fit(ArrayIterator(small, 40), epochs=2)
        assert pw.replicas[0].updater.config() == net.updater.config()
        assert pw.replicas[0].updater is not net.updater  # a copy: the replica shares no live object
    np.testing.assert_array_equal(net.params().numpy(), ref.params().numpy())
    assert (net.iteration, net.epoch) == (ref.iteration, ref.epoch)


@pytest.mark.parametrize("workers", [2, 3])
def test_a_learning_rate_schedule_between_fits_trains_every_replica_with_it(small, workers):
    """Several workers: SGD at frequency 1 equals one model on the concatenated batches, also
    when the learning rate changes between fits (a schedule applied by hand)."""
    net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
    ref = net.clone()
    pw = ParallelWrapper(net, workers=workers, prefetch_buffer=0)
    for lr in (0.1, 0.02, 0.3):
        net.updater.lr = ref.updater.lr = lr
        pw.fit(ArrayIterator(small, 20))
        ref.fit(ArrayIterator(small, 20 * workers))
        for i in range(workers):
            assert pw.run_on_worker(i, lambda w: w.replica.updater.lr) == lr
        np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=2e-6)
    pw.shutdown()
    assert not kit_threads()


def test_shutdown_from_another_thread_during_fit_says_it_was_shut_down(small):
    """Issue 13: fit() reported 'worker 0 ... died without reporting' after a shutdown() from
    another thread; now it says that the wrapper was shut down, and the model keeps what it held
    when that fit() began."""
    net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=1)
    pw = ParallelWrapper(net, workers=2, prefetch_buffer=0)
    pw.fit(ArrayIterator(small, 20))
    before = net.params().numpy().copy()

    class ShutDownFromElsewhere:
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == before_iteration + 3 and info["worker"] == 0:
                other = threading.Thread(target=pw.shutdown)
                other.start()
                other.join(timeout=30)  # the workers are idle between rounds: they stop now

    before_iteration = pw.iteration
    pw.listeners.append(ShutDownFromElsewhere())
    with pytest.raises(RuntimeError, match="ParallelWrapper was shut down while fit") as info:
        pw.fit(ArrayIterator(small, 20), epochs=3)
    assert "died without reporting" not in str(info.value)
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert pw.threads_alive() == 0 and not kit_threads()
    with pytest.raises(RuntimeError, match="shut down"):
        pw.fit(ArrayIterator(small, 20))


@pytest.mark.parametrize("workers", [1, 2])
def test_shutdown_at_any_moment_of_a_fit_ends_it_cleanly(small, workers):
    """Load test: shutdown() from another thread at random moments of a fit with a prefetch
    queue. fit() either finishes or raises the shut-down error; never a worker error; no hang,
    no thread left."""
    rng = random.Random(workers)
    outcomes = []
    for _ in range(8):
        net = mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=1)
        pw = ParallelWrapper(net, workers=workers, prefetch_buffer=2)
        delay = rng.uniform(0.0, 0.05)
        stopper = threading.Timer(delay, pw.shutdown)
        stopper.start()
        try:
            pw.fit(ArrayIterator(small, 10), epochs=20)
            outcomes.append("finished")
        except RuntimeError as exc:
            assert type(exc) is RuntimeError and "ParallelWrapper was shut down" in str(exc), exc
            outcomes.append("shut down")
        stopper.join(timeout=30)
        assert not stopper.is_alive()
        assert pw.threads_alive() == 0
    assert not kit_threads()
    assert len(outcomes) == 8


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


def test_the_wrapper_sees_parameters_set_between_fits():
    net = mlp(6, hidden=(4,), n_out=3, updater=Sgd(0.1))
    ref = net.clone()
    w0 = net.params().numpy().copy()
    with ParallelWrapper(net, workers=2, prefetch_buffer=0) as pw:
        pw.fit(ArrayIterator(random_dataset(), 8))
        net.set_params(w0)  # back to the start, behind the wrapper's back
        pw.fit(ArrayIterator(random_dataset(), 8))
    with ParallelWrapper(ref, workers=2, prefetch_buffer=0) as pw:
        pw.fit(ArrayIterator(random_dataset(), 8))  # one fit from w0
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-6, atol=1e-7)
