"""The one training loop: the same listener calls and numbering on every path that trains
(Network.fit, ParallelWrapper.fit, EarlyStoppingTrainer, EarlyStoppingParallelTrainer), the
saved best model's epoch counter, stop conditions, empty and used-up data."""

import numpy as np
import pytest
from _datasets import random_dataset

from kit.data import ArrayIterator, DataSet
from kit.nn import Network, Sgd, mlp
from kit.nn.loop import EmptyDataError, NonFiniteScoreError, StepResult, TrainingLoop
from kit.parallel import ParallelWrapper
from kit.training.earlystopping import (
    ClassificationScoreCalculator,
    DataSetLossCalculator,
    EarlyStoppingConfig,
    EarlyStoppingParallelTrainer,
    EarlyStoppingTrainer,
    InMemoryModelSaver,
    LocalFileModelSaver,
    MaxEpochsTerminationCondition,
    MaxScoreIterationTerminationCondition,
    TerminationReason,
)


def data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((n, 8)), rng.integers(0, 3, n), num_classes=3)


class Recorder:
    """Every call a listener receives, with the numbers it was given."""

    def __init__(self):
        self.calls = []

    def on_fit_start(self, model):
        self.calls.append(("fit_start",))

    def on_epoch_start(self, model, epoch):
        self.calls.append(("epoch_start", epoch))

    def iteration_done(self, model, iteration, epoch, **info):
        self.calls.append(("iteration", iteration, epoch))

    def on_epoch_end(self, model, epoch):
        self.calls.append(("epoch_end", epoch))


def net():
    return mlp(8, hidden=(8,), n_out=3, updater=Sgd(0.05), seed=1)


def run_network(epochs):
    rec = Recorder()
    net().fit(ArrayIterator(data(), 16), epochs=epochs, listeners=[rec])
    return rec.calls


def run_wrapper(epochs):
    rec = Recorder()
    # one worker: the same batches, one per round, so the same number of iterations
    with ParallelWrapper(net(), workers=1, prefetch_buffer=0, listeners=[rec]) as pw:
        pw.fit(ArrayIterator(data(), 16), epochs=epochs)
    return rec.calls


def es_config(epochs, saver=None):
    return EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(epochs)],
        score_calculator=DataSetLossCalculator(data(24, seed=5)),
        model_saver=saver or InMemoryModelSaver(),
    )


def run_es(epochs):
    rec = Recorder()
    EarlyStoppingTrainer(es_config(epochs), net(), ArrayIterator(data(), 16), listeners=[rec]).fit()
    return rec.calls


def run_es_parallel(epochs):
    rec = Recorder()
    trainer = EarlyStoppingParallelTrainer(
        es_config(epochs), net(), ArrayIterator(data(), 16), workers=1, prefetch_buffer=0, listeners=[rec]
    )
    trainer.fit()
    return rec.calls


@pytest.mark.usefixtures("host_devices")
def test_listener_numbering_is_the_same_on_every_training_path():
    expected = [("fit_start",)]
    iteration = 0
    for epoch in range(3):  # DL4J: epoch callbacks get the index of the epoch starting / just ended
        expected.append(("epoch_start", epoch))
        for _ in range(3):  # 48 examples in batches of 16
            iteration += 1
            expected.append(("iteration", iteration, epoch))
        expected.append(("epoch_end", epoch))
    seen = {
        "Network.fit": run_network(3),
        "ParallelWrapper.fit": run_wrapper(3),
        "EarlyStoppingTrainer": run_es(3),
        "EarlyStoppingParallelTrainer": run_es_parallel(3),
    }
    for path, calls in seen.items():
        assert calls == expected, f"{path} numbered its listener calls differently"


@pytest.mark.usefixtures("host_devices")
def test_two_workers_number_rounds_like_one_network_numbers_iterations():
    rec = Recorder()
    with ParallelWrapper(net(), workers=2, prefetch_buffer=0, listeners=[rec]) as pw:
        pw.fit(ArrayIterator(data(), 8), epochs=2)  # 6 batches: 3 rounds of 2 per epoch
    iterations = [c for c in rec.calls if c[0] == "iteration"]
    assert iterations == [
        ("iteration", i, e) for e, rounds in ((0, (1, 2, 3)), (1, (4, 5, 6))) for i in rounds for _ in (0, 1)
    ]


@pytest.mark.usefixtures("host_devices")
@pytest.mark.parametrize("parallel", [False, True])
def test_saved_best_model_carries_the_best_epoch(tmp_path, parallel):
    saver = LocalFileModelSaver(tmp_path)
    cfg = es_config(4, saver)
    if parallel:
        trainer = EarlyStoppingParallelTrainer(cfg, net(), ArrayIterator(data(), 16), workers=2, prefetch_buffer=0)
    else:
        trainer = EarlyStoppingTrainer(cfg, net(), ArrayIterator(data(), 16))
    result = trainer.fit()
    assert result.termination_reason is TerminationReason.EPOCH_TERMINATION_CONDITION
    assert result.total_epochs == 4 and sorted(result.score_vs_epoch) == [0, 1, 2, 3]
    best = Network.load(tmp_path / "best_model.npz")
    assert best.epoch == result.best_model_epoch
    assert result.best_model.epoch == result.best_model_epoch


def test_an_iteration_condition_stops_mid_epoch_and_the_epoch_still_ends():
    rec = Recorder()
    model = net()
    loop = TrainingLoop(
        model,
        model.train_step,
        listeners=[rec],
        iteration_conditions=[MaxScoreIterationTerminationCondition(-1.0)],  # any score is above -1
    )
    assert loop.run(ArrayIterator(data(), 16), epochs=5) == 1
    assert loop.interrupted and isinstance(loop.stopped_by, MaxScoreIterationTerminationCondition)
    assert rec.calls == [("fit_start",), ("epoch_start", 0), ("iteration", 1, 0), ("epoch_end", 0)]
    assert model.iteration == 1 and model.epoch == 1


def test_a_step_reports_one_result_per_batch_to_every_listener():
    rec = Recorder()

    class Counters:
        iteration = 0
        epoch = 0

    seen = []

    def step(batches):
        seen.append(len(batches))
        return [StepResult(1.0, b.num_examples, worker=i) for i, b in enumerate(batches)]

    loop = TrainingLoop(object(), step, listeners=[rec], counters=Counters, batches_per_step=2)
    loop.run(ArrayIterator(data(40), 8), epochs=1)  # 5 batches: rounds of 2, 2, 1
    assert seen == [2, 2, 1] and Counters.iteration == 3 and Counters.epoch == 1
    assert [c[1] for c in rec.calls if c[0] == "iteration"] == [1, 1, 2, 2, 3]


def test_empty_data_and_a_used_up_generator_are_errors_not_silent_epochs():
    model = net()
    with pytest.raises(EmptyDataError, match="produced no mini-batches"):
        model.fit([], epochs=1)
    batches = (b for b in ArrayIterator(data(), 16))  # a generator: one pass only
    with pytest.raises(EmptyDataError, match="in epoch 1 after producing some before: a generator"):
        model.fit(batches, epochs=3)
    assert model.epoch == 1  # the first epoch trained; the second found nothing and does not count


def test_a_tuple_instead_of_a_dataset_gets_a_clear_error():
    x, y = np.zeros((4, 8)), np.zeros(4, dtype=int)
    with pytest.raises(TypeError, match=r"wrap features and labels in a DataSet"):
        net().fit((x, y))


def test_bad_epochs_are_rejected_with_the_value():
    with pytest.raises(ValueError, match=r"epochs=0"):
        net().fit(ArrayIterator(data(), 16), epochs=0)


# ---- regressions for the defects issue 13's adversarial pass found ------------------------------


def test_an_overflowing_loss_stops_fit_instead_of_training_on_nan():
    net = mlp(4, hidden=(8,), n_out=2, updater=Sgd(0.1))
    huge = DataSet(np.full((10, 4), 3e38, dtype=np.float32), np.arange(10) % 2, num_classes=2)
    with pytest.raises(NonFiniteScoreError, match=r"iteration 1 \(epoch 0\): the loss is (nan|inf)"):
        net.fit(ArrayIterator(huge, 5), epochs=3)
    assert net.iteration == 0  # it stopped at once, and the refused step (nothing updated) is no iteration


@pytest.mark.parametrize("parallel", [False, True])
def test_stop_fit_from_a_listener_stops_every_training_path(parallel):
    class StopAt3:
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == 3:
                model.stop_fit()

    net = mlp(6, hidden=(4,), n_out=3)
    cfg = EarlyStoppingConfig(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        score_calculator=ClassificationScoreCalculator("ACCURACY", random_dataset(16, seed=3)),
    )
    if parallel:
        trainer = EarlyStoppingParallelTrainer(
            cfg, net, ArrayIterator(random_dataset(), 8), workers=2, prefetch_buffer=0, listeners=[StopAt3()]
        )
    else:
        trainer = EarlyStoppingTrainer(cfg, net, ArrayIterator(random_dataset(), 8), listeners=[StopAt3()])
    result = trainer.fit()
    assert net.iteration == 3
    assert result.termination_details == "stop_fit() was called" and result.total_epochs == 0


def test_network_and_wrapper_are_trainable_and_their_loops_train_as_fit_does():
    import numpy as np

    from kit.data import ArrayIterator, load_digits
    from kit.nn import mlp
    from kit.nn.loop import Trainable
    from kit.parallel import ParallelWrapper

    train, _ = load_digits()
    a, b = mlp(64, hidden=(16,), n_out=10), mlp(64, hidden=(16,), n_out=10)
    b.set_params(a.params())
    a.fit(ArrayIterator(train, 64), epochs=1)
    assert b.make_loop().run(ArrayIterator(train, 64), 1) == 1
    assert isinstance(b, Trainable) and (a.iteration, a.epoch) == (b.iteration, b.epoch)
    assert np.array_equal(a.params().numpy(), b.params().numpy())
    with ParallelWrapper(mlp(64, hidden=(16,), n_out=10), workers=2, prefetch_buffer=0) as w:
        assert isinstance(w, Trainable) and not w.closed
        loop = w.make_loop()
        with w.session(ArrayIterator(train, 64)) as source:
            loop.run(source, 1)
        assert loop.counters is w and loop.batches_per_step == 2 and w.iteration > 0
    assert w.closed


def test_early_stopping_reads_no_private_attribute_of_what_it_trains():
    import ast
    from pathlib import Path

    import kit.training.earlystopping
    import kit.training.earlystopping_config

    trees = [ast.parse(Path(m.__file__).read_text()) for m in (kit.earlystopping, kit.earlystopping_config)]
    reads = [
        f"line {node.lineno}: .{node.attr}"
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert reads == []


def test_make_loop_takes_only_the_loop_s_hooks_and_names_anything_else():
    from kit.nn import mlp

    net = mlp(4, hidden=(4,), n_out=2)
    with pytest.raises(
        TypeError, match=r"Network\.make_loop: unknown argument\(s\) \['counters'\]; it takes listeners"
    ):
        net.make_loop(counters=object())
    loop = net.make_loop(listeners=[], iteration_conditions=[], epoch_end=lambda epoch: False)
    assert loop.counters is net and loop.batches_per_step == 1 and loop.epoch_end(0) is False
