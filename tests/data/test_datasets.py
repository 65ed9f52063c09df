"""kit.data.datasets: the embedded digits, the IDX reader on generated files, and Fashion-MNIST
found where its files are (KIT_DATA, the checkout, Debian's package) or refused with a message
whose remedy runs; a download is checked against its pinned SHA-256 (a localhost server)."""

import gzip
import hashlib
import threading

import numpy as np
import pytest

from kit.data import datasets as ds_module
from kit.data import load_digits, read_idx


def write_idx(path, array, magic_type=0x08):
    header = bytes([0, 0, magic_type, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    raw = header + array.astype(">u1").tobytes()
    path.write_bytes(gzip.compress(raw))
    return hashlib.sha256(raw).hexdigest()


def test_idx_parser_on_generated_files(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    sha = write_idx(tmp_path / "img.gz", images)
    np.testing.assert_array_equal(read_idx(tmp_path / "img.gz", sha), images)
    with pytest.raises(ValueError, match="SHA-256 of the decompressed data"):
        read_idx(tmp_path / "img.gz", "0" * 64)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x02ab")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]))
    with pytest.raises(ValueError, match="needs 13"):
        read_idx(tmp_path / "short")


def _fake_fashion_mnist(directory, monkeypatch, train: int, test: int, seed: int = 0) -> None:
    """Small IDX files of Fashion-MNIST's names and layout in `directory`; the loader is told
    their SHA-256s (the real ones would not match)."""
    rng = np.random.default_rng(seed)
    files = {}
    for split, n in (("train", train), ("t10k", test)):
        images, labels = directory / f"{split}-images-idx3-ubyte.gz", directory / f"{split}-labels-idx1-ubyte.gz"
        files[images.name] = write_idx(images, rng.integers(0, 256, (n, 28, 28)))
        files[labels.name] = write_idx(labels, rng.integers(0, 10, n))
    monkeypatch.setattr(ds_module, "FASHION_MNIST_FILES", {k: (v, 0) for k, v in files.items()})


def test_fashion_mnist_loader_finds_files_in_kit_data(tmp_path, monkeypatch):
    _fake_fashion_mnist(tmp_path, monkeypatch, 6, 4)
    monkeypatch.setenv("KIT_DATA", str(tmp_path))
    train, test = ds_module.load_fashion_mnist()
    assert train.features.shape == (6, 1, 28, 28) and test.num_examples == 4
    assert 0.0 <= float(train.features.min()) and float(train.features.max()) <= 1.0


def test_fashion_mnist_missing_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_DATA", str(tmp_path))
    monkeypatch.setattr(ds_module, "DEBIAN_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(ds_module, "DATA_DIR", tmp_path / "nodata")
    with pytest.raises(ds_module.DataNotFoundError, match="apt-get install dataset-fashion-mnist"):
        ds_module.load_fashion_mnist()


@pytest.mark.skipif(ds_module.find_fashion_mnist() is None, reason="Fashion-MNIST files are not on this machine")
def test_real_fashion_mnist_files_verify():
    train, test = ds_module.load_fashion_mnist(limit=100)
    assert train.features.shape == (100, 1, 28, 28) and test.num_classes == 10


def test_embedded_digits():
    train, test = load_digits()
    assert train.num_examples + test.num_examples == 1797
    assert train.features.shape[1:] == (64,) and float(train.features.max()) == 1.0
    assert set(np.argmax(test.labels.numpy(), axis=1)) == set(range(10))


def test_a_download_is_checked_against_its_pinned_sha256_before_it_is_opened(tmp_path, monkeypatch):
    """A real HTTP server on localhost serves a file whose bytes are not the published ones."""
    import functools
    import http.server

    served = tmp_path / "served"
    served.mkdir()
    (served / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"not the real images"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(ds_module, "FASHION_URL", f"http://127.0.0.1:{server.server_address[1]}/")
        target = tmp_path / "target"
        with pytest.raises(
            ds_module.DataNotFoundError,
            match=r"could not download train-images-idx3-ubyte\.gz: .* does not match its pinned SHA-256",
        ):
            ds_module._download(target)
    finally:
        server.shutdown()
    assert not (target / "train-images-idx3-ubyte.gz").exists()  # the bad file is not kept
    assert ds_module.FASHION_MNIST_DOWNLOAD_SHA256.keys() == ds_module.FASHION_MNIST_FILES.keys()


def test_fashion_mnist_missing_then_its_remedy_set_kit_data_finds_the_files(tmp_path, monkeypatch):
    """The message's remedy "set KIT_DATA", taken: the same call then loads the files from there."""
    monkeypatch.delenv("KIT_DATA", raising=False)
    monkeypatch.setattr(ds_module, "DEBIAN_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(ds_module, "DATA_DIR", tmp_path / "nodata")
    mine = tmp_path / "my-data"
    mine.mkdir()
    _fake_fashion_mnist(mine, monkeypatch, 5, 3, seed=1)
    with pytest.raises(ds_module.DataNotFoundError, match="or set KIT_DATA;") as refused:
        ds_module.load_fashion_mnist()
    assert str(mine) not in str(refused.value)
    monkeypatch.setenv("KIT_DATA", str(mine))  # the remedy
    train, test = ds_module.load_fashion_mnist()
    assert (train.num_examples, test.num_examples) == (5, 3)


def test_the_digits_split_is_seeded_and_keeps_every_example_once():
    train, test = load_digits(test_fraction=0.25, seed=3)
    again_train, _ = load_digits(test_fraction=0.25, seed=3)
    other_train, _ = load_digits(test_fraction=0.25, seed=4)
    assert test.num_examples == 449  # a quarter of 1,797, rounded down
    assert train.num_examples + test.num_examples == 1797
    np.testing.assert_array_equal(train.features.numpy(), again_train.features.numpy())
    assert not np.array_equal(train.features.numpy(), other_train.features.numpy())
    everything = np.concatenate([train.features.numpy(), test.features.numpy()])
    whole, _ = load_digits(test_fraction=0.5, seed=0)
    rows = {r.tobytes() for r in everything}
    assert {r.tobytes() for r in whole.features.numpy()} <= rows  # the same examples, split otherwise
    pixels = everything * 16  # pixel counts 0..16, scaled by 1/16
    np.testing.assert_array_equal(pixels, np.round(pixels))
    assert pixels.min() == 0 and pixels.max() == 16


@pytest.mark.parametrize(
    ("magic", "dtype"),
    [(0x08, ">u1"), (0x09, ">i1"), (0x0B, ">i2"), (0x0C, ">i4"), (0x0D, ">f4"), (0x0E, ">f8")],
)
def test_the_idx_reader_reads_every_element_type_big_endian_with_or_without_gzip(tmp_path, magic, dtype):
    array = (np.arange(12).reshape(3, 4) - 5).astype(dtype) if dtype != ">u1" else np.arange(12).reshape(3, 4)
    raw = bytes([0, 0, magic, 2]) + (3).to_bytes(4, "big") + (4).to_bytes(4, "big") + array.astype(dtype).tobytes()
    (tmp_path / "plain").write_bytes(raw)
    (tmp_path / "packed.gz").write_bytes(gzip.compress(raw))
    for name in ("plain", "packed.gz"):
        got = read_idx(tmp_path / name, hashlib.sha256(raw).hexdigest())
        assert got.dtype == np.dtype(dtype) and got.shape == (3, 4)
        np.testing.assert_array_equal(got, array)


def test_an_unknown_idx_element_type_is_named(tmp_path):
    (tmp_path / "odd").write_bytes(bytes([0, 0, 0x0A, 1]) + (1).to_bytes(4, "big") + b"x")
    with pytest.raises(ValueError, match=r"odd: unknown IDX element type 0x0a"):
        read_idx(tmp_path / "odd")
