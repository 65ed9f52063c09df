"""Every file kit writes (issue 43: "every file kit writes"), one table: a model file, a benchmark's
--json, a memory trace, Spark's stats as JSON and as HTML. Each is written atomically, through a
symbolic link (the link stays, the file it points to changes), with the umask's permissions; a
directory or a missing directory is refused in words before anything is written; a write that
fails leaves the previous file whole and no temporary file behind. And the model file's checksum
covers everything that decides a value: the same bytes re-typed or re-shaped do not load."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

import kit
from kit import files
from kit.bench import write_json
from kit.nn import Dense, Network, ReLU
from kit.nn.persistence import ModelFileError, _digest, read_model, write_model
from kit.spark.stats import SparkTrainingStats, export_stats_html


def _net():
    return Network([Dense(4), ReLU(), Dense(3)], input_shape=(5,), seed=0)


def _trace(path):
    with kit.memory_timeline() as tl:
        kit.zeros((3,))
    return tl.save_trace(path)


WRITERS = {
    "model file": lambda p: _net().save(p),
    "bench --json": lambda p: write_json({"benchmark": "x", "rows": []}, p),
    "memory trace": _trace,
    "Spark stats JSON": lambda p: SparkTrainingStats(master="averaging").save_json(p),
    "Spark stats HTML": lambda p: export_stats_html(SparkTrainingStats(master="averaging"), p),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_write_goes_through_a_link_and_replaces_what_it_points_to(writer, tmp_path):
    real = tmp_path / "real.out"
    real.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(real)
    WRITERS[writer](link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() != b"old" and real.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.out", "real.out"]  # no temporary file left


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_directory_or_a_missing_directory_is_refused_before_writing(writer, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    with pytest.raises((IsADirectoryError, ValueError), match="is a directory") as info:  # bench: OutputPathError
        WRITERS[writer](folder)
    assert str(folder) in str(info.value) and list(folder.iterdir()) == []
    missing = tmp_path / "no" / "such" / "f.out"
    with pytest.raises((FileNotFoundError, ValueError), match="does not exist") as info:
        WRITERS[writer](missing)
    assert str(missing.parent) in str(info.value) and ".tmp" not in str(info.value)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_the_permissions_come_from_the_umask(writer, tmp_path):
    old = os.umask(0o027)
    try:
        WRITERS[writer](tmp_path / "f.out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.out").stat().st_mode) == 0o640


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_failed_write_leaves_the_previous_file_whole(writer, tmp_path, monkeypatch):
    target = tmp_path / "f.out"
    target.write_text("previous")

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(OSError, match="No space left"):
        WRITERS[writer](target)
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.out"]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_failed_write_names_the_file_not_its_temporary(writer, tmp_path, monkeypatch):
    target = tmp_path / "f.out"

    def no_rename(src, dst):  # what the OS says: the temporary's name
        raise OSError(30, "Read-only file system", src)

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(OSError, match="Read-only file system") as info:
        WRITERS[writer](target)
    assert str(target) in str(info.value) and ".tmp" not in str(info.value)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_pipe_or_a_device_is_refused_and_kept(writer, tmp_path):
    fifo = tmp_path / "pipe.out"
    os.mkfifo(fifo)
    with pytest.raises((FileExistsError, ValueError), match="is not a regular file"):
        WRITERS[writer](fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still a pipe: it was not renamed over
    link = tmp_path / "to-pipe.out"
    link.symlink_to(fifo)
    with pytest.raises((FileExistsError, ValueError), match="is not a regular file"):
        WRITERS[writer](link)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.out", "to-pipe.out"]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_an_existing_file_keeps_its_mode_as_open_would(writer, tmp_path):
    target = tmp_path / "f.out"
    target.write_text("private")
    target.chmod(0o600)
    WRITERS[writer](target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_bytes() != b"private"


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_path_ending_in_a_separator_is_refused(writer, tmp_path):
    with pytest.raises((NotADirectoryError, ValueError), match="ending in '/' names a directory"):
        WRITERS[writer](f"{tmp_path / 'f.out'}/")
    assert list(tmp_path.iterdir()) == []


def test_spark_s_files_on_executors_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """An export task's round files and a shared worker's state: a retried attempt that fails
    leaves the earlier attempt's file readable, and no temporary file."""
    from kit.spark import worker_store
    from kit.spark.elements import export_task, read_npz
    from kit.spark.wire import SharedWorkerState

    batches = [(np.ones((2, 3), np.float32), np.eye(2, dtype=np.float32))]
    run = export_task(str(tmp_path), per_round=1)
    ((_, _, path, *_),) = list(run(0, iter(batches)))
    state = SharedWorkerState(np.ones(3, np.float32), tau=1e-3, rounds=4)
    worker_store.save(str(tmp_path), "fit-1", 0, state)

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(Exception, match="No space left"):
        list(export_task(str(tmp_path), per_round=1)(0, iter(batches)))
    with pytest.raises(OSError, match="No space left"):
        worker_store.save(str(tmp_path), "fit-1", 0, state)
    np.testing.assert_array_equal(read_npz(path)[0][0], batches[0][0])
    assert worker_store.load(str(tmp_path), "fit-1", 0, 4).tau == 1e-3
    assert not [p for p in tmp_path.rglob("*.tmp")]


def _rewrite(path, change):
    """The model file at `path` with one array changed by `change` and the header kept as it was."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["params"] = change(arrays["params"])
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize(
    "change",
    [
        lambda a: a.view(np.int32),  # the same bytes read as another type: values of about 1e9
        lambda a: a.view(np.uint8),
        lambda a: a.reshape(1, -1),  # the same bytes and type, another shape
    ],
    ids=["as-int32", "as-bytes", "reshaped"],
)
def test_the_checksum_covers_dtype_and_shape(change, tmp_path):
    path = tmp_path / "m.npz"
    _net().save(path)
    _rewrite(path, change)
    with pytest.raises(ModelFileError, match="does not match its SHA-256: its values, type or shape"):
        Network.load(path)


def test_a_format_1_file_still_loads_and_its_bytes_are_still_checked(tmp_path):
    """Files written before format 2 hold byte-only checksums and no "format": read as they were."""
    net = _net()
    arrays = {k: v.numpy() for k, v in net.state_arrays().items()}
    path = tmp_path / "old.npz"
    write_model(path, net.config(), arrays, {"iteration": 3, "epoch": 1})
    with np.load(path, allow_pickle=False) as z:
        stored = {k: z[k] for k in z.files}
    meta = json.loads(stored.pop("meta").tobytes().decode())
    del meta["format"]
    meta["sha256"] = {k: _digest(v, 1) for k, v in stored.items()}
    from kit.nn.persistence import _integrity

    meta["integrity"] = _integrity(meta["config"], {"iteration": 3, "epoch": 1}, meta["sha256"])
    with open(path, "wb") as f:
        np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **stored)
    assert read_model(path)[2] == {"iteration": 3, "epoch": 1}
    np.testing.assert_array_equal(Network.load(path).params().numpy(), net.params().numpy())
    stored["params"] = stored["params"] + 1
    with open(path, "wb") as f:
        np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **stored)
    with pytest.raises(ModelFileError, match="does not match its SHA-256"):
        Network.load(path)


def test_exporting_the_stats_of_a_fit_that_collected_none_says_how_to_collect_them(tmp_path):
    with pytest.raises(
        TypeError, match=r"got None \(the last fit collected no statistics\).*collect_training_stats=True"
    ):
        export_stats_html(None, tmp_path / "s.html")
    assert list(tmp_path.iterdir()) == []
