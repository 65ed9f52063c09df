"""Data sets: the embedded UCI digits (offline, the default), and Fashion-MNIST from real files.

    >>> from kit.data import load_digits
    >>> train, test = load_digits()                 # 1,797 8x8 digits shipped inside kit, 80/20 split
    >>> train, test
    (DataSet(1438 examples, features (64,), 10 classes), DataSet(359 examples, features (64,), 10 classes))

and Fashion-MNIST where its files are found (30 MB, not shipped with kit, so not run here):

    train, test = load_fashion_mnist()              # 60,000 + 10,000 28x28 images

The digits are package data (`kit/data/digits.csv.gz`, read through `importlib.resources`), so
they are in every install: editable, wheel, Colab's `pip install`. Source and licence:
`kit/data/README.md`.

Fashion-MNIST is read where its four IDX files already are: the repository's `data/`
(`~/.cache/kit` installed), `KIT_DATA`, or `/usr/share/datasets/fashion-mnist/` (Debian's
package); `load_fashion_mnist(download=True)` fetches them with pooch, each download checked
against its pinned SHA-256 before opening it. Every file is also checked against the SHA-256 of its
*decompressed* content (the same whoever compressed it).
"""

from __future__ import annotations

import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path

import numpy as np

from kit.core.arguments import whole
from kit.data.dataset import DataSet

__all__ = ["FASHION_MNIST_FILES", "DataNotFoundError", "load_digits", "load_fashion_mnist", "read_idx"]

_CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"
# a checkout keeps downloads in its data/ (with the README that says what is there); an installed
# copy (wheel, Colab) must not write into site-packages' parent: it uses the user's cache
DATA_DIR = (
    _CHECKOUT_DATA
    if (_CHECKOUT_DATA / "README.md").is_file()
    else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kit"
)
DIGITS_RESOURCE = "digits.csv.gz"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
# the files as the authors publish them in their repository, over https
FASHION_URL = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"
# file -> SHA-256 of the compressed file as published: a download is checked before it is opened
FASHION_MNIST_DOWNLOAD_SHA256 = {
    "train-images-idx3-ubyte.gz": "08dc20ab1689590a0bcd66e874647b6ee8464e2d501b5a3f1f78831db19a3fdc",
    "train-labels-idx1-ubyte.gz": "b0197879cbda89f3dc7b894f9fd52b858e68ea4182b6947c9d8c2b67e5f18dcc",
    "t10k-images-idx3-ubyte.gz": "78dcbbfb5a27efaf1b6c1d616caca68560be8766c5bffcb2791df9273a534229",
    "t10k-labels-idx1-ubyte.gz": "42bd18137a62d5998cdeae52bf3a0676ac6b706f5cf8439b47bb5b151ae3dccf",
}

# file -> (SHA-256 of the decompressed IDX bytes, decompressed size)
FASHION_MNIST_FILES = {
    "train-images-idx3-ubyte.gz": ("c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888", 47040016),
    "train-labels-idx1-ubyte.gz": ("bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9", 60008),
    "t10k-images-idx3-ubyte.gz": ("5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b", 7840016),
    "t10k-labels-idx1-ubyte.gz": ("0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34", 10008),
}


class DataNotFoundError(FileNotFoundError):
    """A data set's files are not on this machine (and were not downloaded)."""


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[DataSet, DataSet]:
    """UCI optical digits (E. Alpaydin, C. Kaynak; CC BY 4.0): 1,797 8x8 images, 10 classes,
    pixel counts 0..16 scaled to [0, 1]. A seeded split into (train, test)."""
    with resources.files("kit.data").joinpath(DIGITS_RESOURCE).open("rb") as f, gzip.open(f, "rt") as text:
        raw = np.loadtxt(text, delimiter=",", dtype=np.float64)
    features, labels = raw[:, :64] / 16.0, raw[:, 64].astype(np.int64)
    full = DataSet(features, labels, num_classes=10)
    test, train = full.split(test_fraction, seed=seed)
    return train, test


def read_idx(path: str | os.PathLike, expected_sha256: str | None = None) -> np.ndarray:
    """Parse an IDX file (optionally gzip-compressed): magic, dimensions, big-endian data."""
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if expected_sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected_sha256:
            raise ValueError(
                f"{path}: SHA-256 of the decompressed data is {digest}, expected {expected_sha256}; "
                f"the file is corrupted or not the one expected (delete it and fetch it again)"
            )
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number {data[:4].hex()})")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if data[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type 0x{data[2]:02x}")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(dtypes[data[2]])
    expected = header + int(np.prod(dims)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"{path}: {len(data)} bytes, but the header {dims} of {dtype} needs {expected}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


def _candidates() -> list[Path]:
    dirs = [DATA_DIR / "fashion-mnist", DATA_DIR]
    if os.environ.get("KIT_DATA"):
        dirs.insert(0, Path(os.environ["KIT_DATA"]))
        dirs.insert(0, Path(os.environ["KIT_DATA"]) / "fashion-mnist")
    dirs.append(DEBIAN_DIR)
    return dirs


def find_fashion_mnist() -> Path | None:
    for d in _candidates():
        if all((d / name).is_file() for name in FASHION_MNIST_FILES):
            return d
    return None


def load_fashion_mnist(download: bool = False, limit: int | None = None) -> tuple[DataSet, DataSet]:
    """Fashion-MNIST as (train, test) DataSets of (N, 1, 28, 28) floats in [0, 1].
    `limit` keeps the first N examples of each split (quick mode)."""
    if limit is not None:
        limit = whole("load_fashion_mnist", "limit", limit, 1, what=", or None for every example")
    where = find_fashion_mnist()
    if where is None:
        if not download:
            searched = ", ".join(str(d) for d in _candidates())
            raise DataNotFoundError(
                f"Fashion-MNIST not found (looked in {searched}). On Debian/Ubuntu: "
                f"apt-get install dataset-fashion-mnist; or set KIT_DATA; or load_fashion_mnist(download=True)"
            )
        where = _download(DATA_DIR / "fashion-mnist")
    arrays = {name: read_idx(where / name, sha) for name, (sha, _) in FASHION_MNIST_FILES.items()}

    def split(prefix: str) -> DataSet:
        images = arrays[f"{prefix}-images-idx3-ubyte.gz"][:limit]
        labels = arrays[f"{prefix}-labels-idx1-ubyte.gz"][:limit]
        return DataSet((images.astype(np.float32) / 255.0)[:, None, :, :], labels.astype(np.int64), num_classes=10)

    return split("train"), split("t10k")


def _download(target: Path) -> Path:
    # imported here, not at the top: kit.data is imported wherever a DataSet is (Spark executors
    # among them), and only downloading needs pooch
    try:
        import pooch
    except ImportError as exc:
        raise ImportError(
            f"load_fashion_mnist(download=True) needs pooch, which cannot be imported here ({exc}): "
            "pip install pooch, or copy the four Fashion-MNIST files into the data directory (KIT_DATA)"
        ) from exc
    target.mkdir(parents=True, exist_ok=True)
    for name in FASHION_MNIST_FILES:
        try:
            # the compressed file is checked against its pinned SHA-256 before anything opens it;
            # read_idx then checks the decompressed content too
            sha = FASHION_MNIST_DOWNLOAD_SHA256[name]
            pooch.retrieve(FASHION_URL + name, known_hash=f"sha256:{sha}", fname=name, path=target, progressbar=False)
        except ValueError as exc:  # pooch: the bytes are not the published ones (it deleted them)
            raise DataNotFoundError(
                f"could not download {name}: the file received does not match its pinned SHA-256 ({exc}); "
                "nothing was kept"
            ) from None
        except Exception as exc:
            raise DataNotFoundError(
                f"could not download {name} ({type(exc).__name__}: {exc}); this machine may be offline: "
                f"copy the four Fashion-MNIST files into {target} or set KIT_DATA"
            ) from None
    return target
