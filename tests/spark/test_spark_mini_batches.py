"""kit.spark's mini-batches (issue 22): cut by example whatever the RDD's elements hold, and EXPORT
kept in Spark's own storage or in the directory given, each way equal to DIRECT. Moved out of
test_spark_state.py so that `--dist loadfile` can run the two Spark files in its two processes."""

import itertools

import numpy as np
import pytest

from kit.data import ArrayIterator, DataSet, load_digits
from kit.nn import mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd


@pytest.fixture(scope="module")
def digits():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:240], train.labels.numpy()[:240])


@pytest.mark.parametrize(
    ("approach", "sizes"),
    [  # the fast default runs the mixed elements DIRECT; `-m slow` (CI) the rest
        pytest.param(approach, sizes, marks=() if (approach, sizes) == ("DIRECT", "mixed") else pytest.mark.slow)
        for approach in ("DIRECT", "EXPORT")
        for sizes in ("32 each", "7 each", "mixed")
    ],
)
def test_mini_batches_hold_batch_size_per_worker_examples_whatever_the_elements_hold(sc, digits, sizes, approach):
    """Issue 22: with elements of 32 examples and batch_size_per_worker=32, kit trained
    1,024-example mini-batches (one per 32 elements), silently. DL4J re-batches by example:
    one worker at frequency 1 must equal Network.fit in mini-batches of 20."""
    from kit.nn import Sgd

    x, y = digits.features.numpy(), digits.labels.numpy().argmax(axis=1)
    cuts = {"32 each": [32] * 8, "7 each": [7] * 35, "mixed": [1, 50, 3, 20, 19, 1, 40, 66, 40]}[sizes]
    bounds = np.cumsum([0, *cuts])
    bounds = [*bounds[bounds < x.shape[0]].tolist(), x.shape[0]]
    elements = [(x[a:b], y[a:b]) for a, b in itertools.pairwise(bounds)]
    rdd = sc.parallelize(elements, 3)
    net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
    ref = net.clone()
    tm = ParameterAveragingTrainingMaster(20, 1, num_workers=1, rdd_training_approach=approach)
    SparkNetwork(sc, net, tm).fit(rdd)
    ref.fit(ArrayIterator(digits, 20))
    assert net.iteration == ref.iteration == 12  # 240 examples in 12 mini-batches of 20
    np.testing.assert_allclose(net.params().numpy(), ref.params().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["spark", "file-url", "path"])
def test_export_keeps_mini_batches_in_spark_or_in_the_directory_given(sc, digits, tmp_path, where):
    """Issue 22: EXPORT wrote to a temporary directory on the driver that executors on other
    hosts cannot see. With no export_directory it now keeps the mini-batches in Spark's own
    storage (no file anywhere on the driver); given one (a path or file:// URL every executor
    mounts), it writes there. Each way equals DIRECT."""
    import glob
    import tempfile

    from kit.nn import Sgd

    directory = {"spark": None, "file-url": f"file://{tmp_path}", "path": str(tmp_path)}[where]
    seen = []

    class Watch:
        def iteration_done(self, model, iteration, epoch, **info):
            seen.append(sorted(glob.glob(str(tmp_path / "kit-spark-export-*" / "*.npz"))))

    before = set(glob.glob(f"{tempfile.gettempdir()}/kit-spark-export-*"))
    results, masters = {}, {}
    for approach in ("EXPORT", "DIRECT"):
        net = mlp(64, hidden=(32,), n_out=10, updater=Sgd(0.1), seed=0)
        tm = masters[approach] = ParameterAveragingTrainingMaster(
            20, 2, num_workers=2, rdd_training_approach=approach, export_directory=directory
        )
        SparkNetwork(sc, net, tm).fit(to_rdd(sc, digits), listeners=[Watch()] if approach == "EXPORT" else [])
        results[approach] = net.params().numpy()
    np.testing.assert_allclose(results["EXPORT"], results["DIRECT"], rtol=1e-6, atol=1e-7)
    assert set(glob.glob(f"{tempfile.gettempdir()}/kit-spark-export-*")) == before  # nothing on the driver's temp
    if where == "spark":
        assert all(not files for files in seen)
    else:  # the files were there during the fit, kept for the master's next fit, and gone once it is closed
        assert seen and all(files for files in seen)
        assert sorted(glob.glob(str(tmp_path / "kit-spark-export-*" / "*.npz"))) == seen[-1]
        masters["EXPORT"].close()
        assert not glob.glob(str(tmp_path / "kit-spark-export-*"))
