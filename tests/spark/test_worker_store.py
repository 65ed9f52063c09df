"""kit.spark.worker_store: a SharedTrainingMaster worker's state kept in a file on the executor,
found only under the rounds it was saved after, written atomically, no pickle."""

import os

import numpy as np
import pytest

from kit.spark import worker_store
from kit.spark.wire import SharedWorkerState

RNG = np.random.default_rng(11)


def _state(rounds, scaler=None):
    return SharedWorkerState(
        RNG.standard_normal(7).astype(np.float32),
        tau=2e-3,
        last_dense=True,
        last_sparsity=0.0625,
        rounds=rounds,
        updater={"m": RNG.standard_normal(7).astype(np.float32), "v": RNG.random(7).astype(np.float64)},
        scaler=scaler,
    )


@pytest.mark.parametrize("scaler", [None, (1024.0, 0.0, 3.0)])
def test_a_saved_state_comes_back_bit_for_bit_with_its_dtypes(tmp_path, scaler):
    state = _state(3, scaler)
    worker_store.save(str(tmp_path), "fit-1", 2, state)
    back = worker_store.load(str(tmp_path), "fit-1", 2, 3)
    assert (back.tau, back.last_dense, back.last_sparsity, back.rounds, back.scaler) == (
        2e-3, True, 0.0625, 3, scaler
    )  # fmt: skip
    for got, want in [(back.residual, state.residual), *((back.updater[k], v) for k, v in state.updater.items())]:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("token", "worker", "rounds"), [("fit-2", 0, 3), ("fit-1", 1, 3), ("fit-1", 0, 2), ("fit-1", 0, 4)]
)
def test_only_the_state_of_that_fit_worker_and_round_is_found(tmp_path, token, worker, rounds):
    worker_store.save(str(tmp_path), "fit-1", 0, _state(3))
    assert worker_store.load(str(tmp_path), token, worker, rounds) is None


def test_the_previous_rounds_file_is_kept_for_a_retry_and_older_ones_go(tmp_path):
    for r in range(1, 5):
        worker_store.save(str(tmp_path), "fit-1", 0, _state(r))
    kept = sorted(os.listdir(tmp_path / "kit-shared-workers" / "fit-1"))
    assert kept == ["worker0-round3.npz", "worker0-round4.npz"]
    assert worker_store.load(str(tmp_path), "fit-1", 0, 3).rounds == 3


def test_a_torn_file_is_not_taken_for_a_state(tmp_path):
    worker_store.save(str(tmp_path), "fit-1", 0, _state(1))
    path = tmp_path / "kit-shared-workers" / "fit-1" / "worker0-round1.npz"
    path.write_bytes(path.read_bytes()[:40])
    assert worker_store.load(str(tmp_path), "fit-1", 0, 1) is None


@pytest.mark.parametrize("token", ["../up", "a b", "", "fit/1"])
def test_a_token_that_could_leave_the_directory_is_refused_by_name(tmp_path, token):
    with pytest.raises(ValueError, match=f"a token of letters, digits.*got {token!r}"):
        worker_store.save(str(tmp_path), token, 0, _state(1))
