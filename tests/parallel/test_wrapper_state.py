"""ParallelWrapper's state after what a round can meet (the 2026-11-29 pass over its state machine):
a round every worker refused, a skipped mixed-precision step, a fixed loss scale that never steps,
BatchNorm's running statistics in SHARED_GRADIENTS, a layer hyperparameter changed between fits,
a model changed behind the wrapper's back. Each in both training modes where both apply."""

from __future__ import annotations

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet
from kit.nn import MSE, Adam, BatchNorm, Dense, Network, ReLU, Sgd
from kit.nn.mixed import FIXED_GIVE_UP
from kit.parallel import ParallelWrapper
from kit.parallel.wrapper import WorkerError
from kit.training.earlystopping import InvalidScoreIterationTerminationCondition

RNG = np.random.default_rng(0)
GOOD = [
    DataSet(RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(4, 2)).astype(np.float32)) for _ in range(6)
]
BAD = DataSet(np.full((4, 3), 1e25, np.float32), np.zeros((4, 2), np.float32))  # MSE's square overflows
MODES = ["AVERAGING", "SHARED_GRADIENTS"]


def _mse():
    return Network([Dense(2)], input_shape=(3,), loss=MSE(), updater=Adam(1e-2), seed=0)


@pytest.mark.parametrize("mode", MODES)
def test_a_round_every_worker_refused_changes_nothing_and_later_rounds_equal_a_clean_run(mode):
    def run(with_bad):
        net = _mse()
        with ParallelWrapper(net, workers=2, prefetch_buffer=0, training_mode=mode) as pw:
            pw.fit(GOOD[:2])
            if with_bad:
                before = net.params().numpy().copy()
                loop = pw.make_loop(iteration_conditions=[InvalidScoreIterationTerminationCondition()])
                with pw.session([BAD, BAD]) as source:
                    loop.run(source, 1)
                pw.sync()
                assert loop.stopped_by is not None
                np.testing.assert_array_equal(net.params().numpy(), before)  # nothing moved
                assert pw.iteration == net.iteration == 1 and [r.iteration for r in pw.replicas] == [1, 1]
            pw.fit(GOOD[2:6])
            return net.params().numpy().copy(), net.iteration

    (clean, n_clean), (refused, n_refused) = run(False), run(True)
    assert n_clean == n_refused == 3
    np.testing.assert_array_equal(refused, clean)  # Adam's t was not one ahead on the replicas


@pytest.mark.parametrize(("mode", "workers"), [("AVERAGING", 2), ("SHARED_GRADIENTS", 1), ("SHARED_GRADIENTS", 3)])
def test_batchnorm_s_running_statistics_are_one_network_s_in_every_mode(mode, workers):
    """SHARED_GRADIENTS encoded their movement as ±tau updates: the running mean stayed near 0."""

    def make():
        return Network([BatchNorm(decay=0.5), Dense(2)], input_shape=(1,), updater=Sgd(1e-9), seed=0)

    x = RNG.normal(size=(64, 1)).astype(np.float32)
    data = DataSet(x - x.mean() + 10, np.arange(64) % 2, num_classes=2)  # a batch mean of 10
    single = make()
    net = make()
    with ParallelWrapper(net, workers=workers, prefetch_buffer=0, training_mode=mode) as pw:
        for _ in range(4):
            single.fit_batch(data)
            pw.fit([data] * workers)
            np.testing.assert_allclose(
                net.layers[0].params["mean"].numpy(), single.layers[0].params["mean"].numpy(), rtol=1e-5
            )


@pytest.mark.parametrize("mode", MODES)
def test_a_fixed_loss_scale_that_never_steps_gives_up_in_the_wrapper_too(mode):
    data = DataSet(RNG.normal(size=(64, 4)).astype(np.float32), RNG.integers(0, 3, 64), num_classes=3)
    net = Network([Dense(16), ReLU(), Dense(3)], input_shape=(4,), updater=Adam(1e-2), dtype="float16",
                  master_dtype="float32", loss_scale=2.0**24, seed=0)  # fmt: skip
    pw = ParallelWrapper(net, workers=2, prefetch_buffer=0, training_mode=mode)
    with pytest.raises(WorkerError, match=f"overflowed the gradients {FIXED_GIVE_UP} steps in a row"):
        pw.fit(ArrayIterator(data, 8), epochs=10)
    assert pw.closed


@pytest.mark.parametrize("mode", MODES)
def test_a_layer_hyperparameter_changed_between_fits_reaches_the_replicas(mode):
    net = Network([Dense(8), BatchNorm(), ReLU(), Dense(2)], input_shape=(3,), loss=MSE(), seed=0)
    with ParallelWrapper(net, workers=2, prefetch_buffer=0, training_mode=mode) as pw:
        pw.fit(GOOD[:2])
        net.layers[1].eps = 10.0
        net.layers[1].decay = 0.5
        pw.fit(GOOD[2:4])
        assert [(r.layers[1].eps, r.layers[1].decay) for r in pw.replicas] == [(10.0, 0.5), (10.0, 0.5)]
        assert net.iteration == pw.iteration == 2 and not pw.closed


def test_a_hyperparameter_is_checked_whenever_it_is_set():
    bn = BatchNorm()
    for name, bad in (("decay", 5.0), ("eps", -1.0), ("decay", float("nan"))):
        with pytest.raises(ValueError, match=rf"BatchNorm\({name}={bad!r}\): must be a finite number"):
            setattr(bn, name, bad)
    assert (bn.decay, bn.eps) == (0.9, 1e-5)


def test_sync_refuses_a_model_changed_since_the_wrapper_wrote_it_and_a_closed_wrapper():
    net = _mse()
    pw = ParallelWrapper(net, workers=2, prefetch_buffer=0)
    pw.fit(GOOD[:2])
    net.fit(GOOD[2])  # trained on its own meanwhile
    kept = net.params().numpy().copy()
    with pytest.raises(
        RuntimeError, match=r"the model changed since this wrapper last wrote it \(it is at iteration 2\)"
    ):
        pw.sync()
    np.testing.assert_array_equal(net.params().numpy(), kept)
    pw.fit(GOOD[3:5])  # the remedy: fit again, from the model as it is
    assert net.iteration == 3
    pw.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pw.sync()
