"""Fixtures the gang tests share (test_spark_gang.py, test_gang_worker.py): 128 digits and their RDD
of two slices, cached. A file that defines its own `data` or `rdd` keeps its own."""

import pytest
from _gang import gang_data, gang_rdd


@pytest.fixture(scope="module")
def data():
    return gang_data()


@pytest.fixture(scope="module")
def rdd(sc, data):
    return gang_rdd(sc, data)
