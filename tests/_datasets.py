"""A small random classification data set, for tests that need some data and not a particular one."""

import numpy as np

from kit.data import DataSet


def random_dataset(n=64, seed=0, features=6, classes=3):
    """n examples of `features` uniform features in [0, 1) and one of `classes` random classes (one-hot)."""
    rng = np.random.default_rng(seed)
    return DataSet(rng.random((n, features)), rng.integers(0, classes, n), num_classes=classes)
