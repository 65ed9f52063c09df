"""Checkpoint and resume (issue 21 item 5): a driver killed with SIGKILL mid-fit, and a new
driver that resumes from the latest checkpoint, end bit for bit where an uninterrupted fit
ends; damaged checkpoints, another network, other data and bad arguments are refused in words."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import (
    CheckpointError,
    ParameterAveragingTrainingMaster,
    SharedTrainingMaster,
    SparkNetwork,
    to_rdd,
)

ROOT = Path(__file__).resolve().parents[2]
EPOCHS, KILL_AFTER = 2, 4  # 240 examples, 2 workers, mini-batches of 20, 2 a round: 3 rounds an epoch

# the driver that gets killed: it trains with a checkpoint every 2 rounds and stops still (as a
# driver whose machine is lost would) once round KILL_AFTER is checkpointed; the test kills it
DRIVER = textwrap.dedent(
    """
    import sys, time
    from tests.spark.test_spark_checkpoint import data, master, network
    from kit.spark import SparkNetwork, local_spark_context, to_rdd

    mode, directory, stop_at, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sc = local_spark_context("local[2]", app_name="kit-killed-driver", driver_memory="512m",
                             conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})

    class StandStill:
        def iteration_done(self, model, iteration, epoch, **info):
            if iteration == stop_at:
                print("STOPPED", iteration, flush=True)
                time.sleep(600)

    SparkNetwork(sc, network(), master(mode, directory, every=2)).fit(
        to_rdd(sc, data()), epochs=epochs, listeners=[StandStill()])
    print("FINISHED", flush=True)
    """
)


def data(n: int = 240) -> DataSet:
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:n], train.labels.numpy()[:n])


def network(hidden: int = 16, seed: int = 0):
    return mlp(64, hidden=(hidden,), n_out=10, updater=Adam(1e-2), seed=seed)


def master(mode: str, directory: str | None = None, every: int | None = None, **options):
    if mode == "averaging":  # save_updater: Adam's moments cross the checkpoint too
        return ParameterAveragingTrainingMaster(
            20, 2, num_workers=2, save_updater=True, checkpoint_every=every, checkpoint_directory=directory, **options
        )
    return SharedTrainingMaster(
        20, 2, num_workers=2, initial_threshold=1e-3, checkpoint_every=every, checkpoint_directory=directory, **options
    )


def _state(net) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in net.state_arrays().items()}


def _assert_identical(net, ref) -> None:
    mine, theirs = _state(net), _state(ref)
    assert sorted(mine) == sorted(theirs)
    for key in mine:
        assert np.array_equal(mine[key], theirs[key]), (key, np.abs(mine[key] - theirs[key]).max())
    assert (net.iteration, net.epoch) == (ref.iteration, ref.epoch)


def _run_and_kill(mode: str, directory: Path, tmp_path: Path) -> list[str]:
    """Start the driver in its own process group; SIGKILL the group (driver, its JVM and Python
    workers) once checkpoint KILL_AFTER exists. Returns the checkpoints it left."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    log = open(tmp_path / f"driver-{mode}.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(script), mode, str(directory), str(KILL_AFTER), str(EPOCHS)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    target = directory / f"checkpoint-{KILL_AFTER:09d}.npz"
    try:
        deadline = time.monotonic() + 300
        while not target.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert target.exists(), (tmp_path / f"driver-{mode}.log").read_text()[-3000:]
        assert proc.poll() is None, "the driver ended by itself before it was killed"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode == -signal.SIGKILL
    assert "FINISHED" not in (tmp_path / f"driver-{mode}.log").read_text()
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["averaging", "shared"])
def test_a_driver_killed_mid_fit_resumes_bit_for_bit(sc, tmp_path, mode):
    directory = tmp_path / "checkpoints"
    left = _run_and_kill(mode, directory, tmp_path)
    assert left == [f"checkpoint-{KILL_AFTER - 2:09d}.npz", f"checkpoint-{KILL_AFTER:09d}.npz"], left
    # a write the kill cut short (a later round's temporary file) is not a checkpoint
    (directory / f"checkpoint-{KILL_AFTER + 2:09d}.npz.tmp-4242-1").write_bytes(b"half a file")

    ref = network()
    SparkNetwork(sc, ref, master(mode)).fit(to_rdd(sc, data()), epochs=EPOCHS)

    resumed = network(seed=0)
    seen = []

    class Numbers:
        def iteration_done(self, model, iteration, epoch, **info):
            seen.append((iteration, epoch))

    spark = SparkNetwork(sc, resumed, master(mode, str(directory), every=2))
    spark.fit(to_rdd(sc, data()), epochs=EPOCHS, resume=True, listeners=[Numbers()])
    _assert_identical(resumed, ref)
    # the new driver went on from round KILL_AFTER (epoch 1, its second round), not from the start
    assert sorted({i for i, _ in seen}) == [5, 6] and {e for _, e in seen} == {1}
    assert spark.iteration == 6 and spark.epoch == EPOCHS


@pytest.fixture(scope="module")
def checkpointed(sc, tmp_path_factory):
    """A finished one-epoch shared fit's checkpoints (every round: 3 files, the 2 newest kept)."""
    directory = tmp_path_factory.mktemp("checkpointed")
    SparkNetwork(sc, network(), master("shared", str(directory), every=1)).fit(to_rdd(sc, data()))
    return directory


def _copy(directory: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    target.mkdir()
    for p in directory.iterdir():
        (target / p.name).write_bytes(p.read_bytes())
    return target


def test_a_damaged_checkpoint_is_refused_naming_the_file_and_the_one_before(sc, checkpointed, tmp_path):
    directory = _copy(checkpointed, tmp_path)
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["checkpoint-000000002.npz", "checkpoint-000000003.npz"]
    latest = directory / names[-1]
    raw = bytearray(latest.read_bytes())
    raw[len(raw) // 3] ^= 0x01  # one bit in the middle of the arrays
    latest.write_bytes(bytes(raw))
    spark = SparkNetwork(sc, network(), master("shared", str(directory), every=1))
    with pytest.raises(CheckpointError, match=r"checkpoint .*checkpoint-000000003\.npz is damaged: .*") as info:
        spark.fit(to_rdd(sc, data()), resume=True)
    assert "checkpoint-000000002.npz" in str(info.value)  # what to do: resume from the one before
    latest.unlink()  # as the message says: the one before resumes (one epoch asked, so one round remains)
    spark.fit(to_rdd(sc, data()), resume=True)
    assert spark.iteration == 3


def test_resuming_with_another_network_master_or_data_says_what_differs(sc, checkpointed):
    rdd = to_rdd(sc, data())
    other = SparkNetwork(sc, network(hidden=8), master("shared", str(checkpointed), every=1))
    with pytest.raises(CheckpointError, match=r"another network \(layers\[0\]\.n_out: 16 in the checkpoint, 8 here"):
        other.fit(rdd, resume=True)
    other = SparkNetwork(sc, network(), master("averaging", str(checkpointed), every=1))
    with pytest.raises(CheckpointError, match=r"another training master \(.*'SharedTrainingMaster'.*"):
        other.fit(rdd, resume=True)
    other = SparkNetwork(sc, network(), master("shared", str(checkpointed), every=1))
    with pytest.raises(CheckpointError, match=r"another data set \(examples_per_worker\[0\]: 120 in the checkpoint"):
        other.fit(to_rdd(sc, data(200)), resume=True)
    reordered = DataSet(data().features.numpy()[::-1].copy(), data().labels.numpy()[::-1].copy())
    with pytest.raises(CheckpointError, match=r"another data set \(sha256: .*the same order"):
        other.fit(to_rdd(sc, reordered), resume=True)


def test_no_checkpoint_and_a_fresh_fit_over_a_later_one_are_refused(sc, checkpointed, tmp_path):
    empty = tmp_path / "empty"
    spark = SparkNetwork(sc, network(), master("shared", str(empty), every=1))
    with pytest.raises(CheckpointError, match=rf"no checkpoint in {re.escape(repr(str(empty)))}.*resume=False first"):
        spark.fit(to_rdd(sc, data()), resume=True)
    with pytest.raises(ValueError, match=r"has no checkpoint_directory to resume from"):
        SparkNetwork(sc, network(), master("shared")).fit(to_rdd(sc, data()), resume=True)
    fresh = SparkNetwork(sc, network(), master("shared", str(checkpointed), every=1))
    with pytest.raises(CheckpointError, match=r"written after 3 rounds, beyond this network's 0: .*resume=True"):
        fresh.fit(to_rdd(sc, data()))


def test_checkpoints_at_an_fsspec_url_resume_too(sc):
    """A URL other than file:// goes through fsspec: here its in-memory file system. One epoch,
    then the same fit asked for two, resumed: equals two epochs in one go."""
    pytest.importorskip("fsspec")
    url = f"memory://kit-checkpoints-{uuid.uuid4().hex[:8]}"
    SparkNetwork(sc, network(), master("averaging", url, every=2)).fit(to_rdd(sc, data()), epochs=1)
    import fsspec

    fs = fsspec.filesystem("memory")
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url.removeprefix("memory:/"), detail=False))
    assert names == ["checkpoint-000000002.npz", "checkpoint-000000003.npz"], names
    resumed = network()
    SparkNetwork(sc, resumed, master("averaging", url, every=2)).fit(to_rdd(sc, data()), epochs=2, resume=True)
    ref = network()
    SparkNetwork(sc, ref, master("averaging")).fit(to_rdd(sc, data()), epochs=2)
    _assert_identical(resumed, ref)


def test_a_checkpoint_records_dtypes_shapes_and_settings_under_its_hash(checkpointed):
    """The header (under the integrity hash) holds each array's dtype and shape, the config,
    the master's settings, the data's fingerprint and where the fit stands."""
    from kit.nn.persistence import read_model

    header, arrays, counters = read_model(checkpointed / "checkpoint-000000003.npz")
    assert header["format"] == "kit.spark.checkpoint/1"
    assert header["arrays"]["params"] == ["<f4", list(arrays["params"].shape)]
    assert header["position"] == {"epoch": 1, "round": 0, "fit_start_epoch": 0, "fit_epochs": 1}
    assert header["data"]["examples_per_worker"] == [120, 120] and header["master"]["batches_per_round"] == 2
    assert any(k.startswith("workers.") and k.endswith(".residual") for k in arrays)  # each worker's own state
    assert counters == {"iteration": 6, "epoch": 1}
    assert json.dumps(header)  # plain JSON: no pickle anywhere


@pytest.mark.parametrize("cls", [ParameterAveragingTrainingMaster, SharedTrainingMaster])
@pytest.mark.parametrize(
    ("name", "value", "remedy"),
    [
        ("checkpoint_every", -1, "an integer >= 1"),
        ("checkpoint_every", 1.5, "an integer >= 1"),
        ("checkpoint_every", "x", "an integer >= 1"),
        ("checkpoint_every", True, "an integer >= 1"),
        ("checkpoint_directory", 5, "a directory path, a file:// URL"),
        ("checkpoint_directory", ["/tmp"], "a directory path, a file:// URL"),
        ("checkpoint_directory", "", "a directory path, a file:// URL"),
    ],
)
def test_bad_checkpoint_arguments_are_refused_at_the_call(cls, name, value, remedy):
    options = {name: value}
    if name == "checkpoint_every":
        options["checkpoint_directory"] = "/tmp/kit-never-written"
    with pytest.raises(ValueError, match=rf"{cls.__name__}\({name}={re.escape(repr(value))}\): .*{remedy}"):
        cls(**options)


def test_checkpoint_every_needs_a_directory_and_a_file_is_not_one(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint_every=3\): checkpoints need a checkpoint_directory"):
        SharedTrainingMaster(checkpoint_every=3)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match=r"that path is a file; give a directory"):
        ParameterAveragingTrainingMaster(checkpoint_every=1, checkpoint_directory=str(afile))
    tm = ParameterAveragingTrainingMaster(checkpoint_every=0, checkpoint_directory=f"file://{tmp_path}")
    assert (tm.checkpoint_every, tm.checkpoint_directory) == (0, f"file://{tmp_path}")


def test_a_url_without_fsspec_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"checkpoint_directory=.s3://bucket/run.\): .*fsspec.*\[spark\]"):
        SharedTrainingMaster(checkpoint_every=1, checkpoint_directory="s3://bucket/run")
