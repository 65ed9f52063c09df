"""kit.data: DataSet, iterators (array, async prefetch, shield) and data sets (digits, Fashion-MNIST)."""

from kit.data.async_iter import AsyncPrefetchIterator, AsyncShieldIterator, IteratorShutDownError
from kit.data.dataset import ArrayIterator, DataSet, DataSetIterator
from kit.data.datasets import DataNotFoundError, load_digits, load_fashion_mnist, read_idx

__all__ = [
    "ArrayIterator",
    "AsyncPrefetchIterator",
    "AsyncShieldIterator",
    "DataNotFoundError",
    "DataSet",
    "DataSetIterator",
    "IteratorShutDownError",
    "load_digits",
    "load_fashion_mnist",
    "read_idx",
]
