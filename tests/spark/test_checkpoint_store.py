"""kit.spark.checkpoint_store: where Spark checkpoints live. The newest two are kept, in a local
path, a file:// URL or any URL fsspec opens; a read gives back the arrays written, bit for bit,
with their dtypes and shapes; a damaged file is refused naming it and the one before it, and
deleting it (the printed remedy) resumes from that one; values go to JSON plus arrays, no pickle."""

import json
import os
import re
import uuid

import numpy as np
import pytest

from kit.nn.persistence import write_model
from kit.spark.checkpoint_store import (
    FORMAT,
    KEEP,
    CheckpointError,
    CheckpointStore,
    from_tree,
    is_remote,
    local_path,
    to_tree,
)


def _arrays(i):
    rng = np.random.default_rng(i)
    return {"params": rng.normal(size=7).astype(np.float32), "updater_m": rng.normal(size=(2, 3))}


def _directory(where, tmp_path):
    return {
        "path": str(tmp_path / "ck"),
        "file-url": f"file://{tmp_path / 'ck'}",
        "memory-url": f"memory://kit-tests/{uuid.uuid4().hex}",  # fsspec's in-process file system
    }[where]


@pytest.mark.parametrize("where", ["path", "file-url", "memory-url"])
def test_the_newest_checkpoints_are_kept_and_read_back_bit_for_bit(tmp_path, where):
    store = CheckpointStore(_directory(where, tmp_path))
    assert store.checkpoints() == []  # a directory that does not exist yet holds none
    written = [
        store.write(i, {"format": FORMAT, "round": i}, _arrays(i), {"iteration": i, "epoch": 0}) for i in (3, 6, 9)
    ]
    assert [r for r, _ in store.checkpoints()] == [6, 9] and KEEP == 2
    assert written[-1] == f"{store.directory}/checkpoint-000000009.npz"
    where_read, header, arrays = store.latest()
    assert where_read == written[-1] and header["round"] == 9
    assert header["arrays"] == {"params": ["<f4", [7]], "updater_m": ["<f8", [2, 3]]}
    for key, arr in _arrays(9).items():
        assert arrays[key].dtype == arr.dtype
        np.testing.assert_array_equal(arrays[key], arr)


def _damage(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:  # one byte of the parameters flipped
        start = data.index(np.float32(_arrays(9)["params"][0]).tobytes())
        data[start] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_damaged_checkpoint_names_itself_and_the_one_before_and_deleting_it_resumes_from_that(tmp_path, how):
    store = CheckpointStore(str(tmp_path))
    for i in (6, 9):
        store.write(i, {"format": FORMAT}, _arrays(i), {"iteration": i, "epoch": 0})
    newest = tmp_path / "checkpoint-000000009.npz"
    _damage(newest, how)
    with pytest.raises(CheckpointError, match=r"is damaged: .*Delete it to resume from the one before") as refused:
        store.latest()
    said = str(refused.value)
    assert said.startswith(f"checkpoint {tmp_path}/checkpoint-000000009.npz is damaged")
    older = re.search(r"the one before \((.+)\)$", said).group(1)
    assert older == f"{tmp_path}/checkpoint-000000006.npz"
    os.remove(newest)  # the remedy, as printed
    where, _, arrays = store.latest()
    assert where == older
    np.testing.assert_array_equal(arrays["params"], _arrays(6)["params"])


def test_a_damaged_only_checkpoint_says_to_train_afresh_and_an_empty_directory_says_where_it_looked(tmp_path):
    store = CheckpointStore(str(tmp_path))
    with pytest.raises(CheckpointError, match=rf"fit\(resume=True\): no checkpoint in '{re.escape(str(tmp_path))}'"):
        store.latest()
    store.write(4, {"format": FORMAT}, _arrays(4), {"iteration": 4, "epoch": 0})
    _damage(tmp_path / "checkpoint-000000004.npz", "truncated")
    with pytest.raises(CheckpointError, match="There is no older checkpoint: delete it and train with resume=False"):
        store.latest()


def test_a_model_file_that_is_not_a_spark_checkpoint_is_refused(tmp_path):
    write_model(tmp_path / "checkpoint-000000001.npz", {"format": "kit.nn/1"}, _arrays(1), {"iteration": 1, "epoch": 0})
    with pytest.raises(CheckpointError, match=r"checkpoint-000000001.npz: not a kit.spark checkpoint"):
        CheckpointStore(str(tmp_path)).latest()


def test_other_files_in_the_directory_are_not_checkpoints(tmp_path):
    for name in ("checkpoint-000000005.npz.tmp-123", "checkpoint-x.npz", "notes.txt", "checkpoint-7.npz"):
        (tmp_path / name).write_bytes(b"")
    assert CheckpointStore(str(tmp_path)).checkpoints() == [(7, "checkpoint-7.npz")]


VALUES = {
    "nested": {"a": [1, 2.5, None, True, "s"], 3: {"b": np.arange(4)}},
    "numpy-scalars": {"scale": np.float32(1.5), "steps": np.int64(7)},
    "tuple": (np.zeros((2, 2), np.float16), "x"),
}


@pytest.mark.parametrize("name", list(VALUES))
def test_a_value_goes_to_json_and_arrays_and_comes_back_with_its_dtypes(name):
    arrays = {}
    tree = json.loads(json.dumps(to_tree(VALUES[name], arrays, "state")))  # JSON, no pickle
    back = from_tree(tree, arrays)

    def same(a, b):
        if isinstance(a, (np.ndarray, np.generic)):
            return type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):  # a tuple comes back as a list
            return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return type(a) is type(b) and a == b

    assert same(VALUES[name], back), (VALUES[name], back)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"f": object()}, "checkpoint: state.f is a object, which kit does not write (no pickle)"),
        ({1.5: 1}, "checkpoint: a key 1.5 of state is neither a string nor an integer"),
        ({True: 1}, "checkpoint: a key True of state is neither a string nor an integer"),
    ],
    ids=["object", "float-key", "bool-key"],
)
def test_a_value_kit_does_not_write_is_refused_naming_where_it_is(value, said):
    with pytest.raises(TypeError, match=re.escape(said)):
        to_tree(value, {}, "state")


@pytest.mark.parametrize(
    ("directory", "remote", "local"),
    [
        ("/tmp/ck", False, "/tmp/ck"),
        ("file:///tmp/ck", False, "/tmp/ck"),
        ("relative/ck", False, "relative/ck"),
        ("s3://bucket/ck", True, "s3://bucket/ck"),
        ("memory://ck", True, "memory://ck"),
    ],
)
def test_a_directory_is_local_or_remote_by_its_url(directory, remote, local):
    assert is_remote(directory) is remote
    assert local_path(directory) == local
