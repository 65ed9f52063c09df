"""One test in Spark's local-cluster mode: two executor JVMs with their own Python workers, as on
a real cluster (local[2] runs tasks in one executor). It needs its own SparkContext, so it runs
in a subprocess; if local-cluster mode cannot start on this machine, the test says why and skips."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kit.spark import spark_missing

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from kit.data import ArrayIterator, DataSet, load_digits
    from kit.nn import Sgd, mlp
    from kit.parallel import ParallelWrapper
    from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, SparkUnavailableError
    from kit.spark import local_spark_context, to_rdd

    try:
        sc = local_spark_context("local-cluster[2,1,1024]", app_name="kit-local-cluster", driver_memory="512m",
                                 conf={"spark.executorEnv.PYTHONPATH": sys.argv[1],
                                       "spark.ui.showConsoleProgress": "false"})
    except SparkUnavailableError as exc:
        print("RESULT " + json.dumps({"skip": str(exc)[:300]}))
        sys.exit(0)
    try:
        train, _ = load_digits()
        data = DataSet(train.features.numpy()[:160], train.labels.numpy()[:160])
        net = mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)
        ref = net.clone()
        tm = ParameterAveragingTrainingMaster(20, 1, num_workers=2, rdd_training_approach="DIRECT")
        SparkNetwork(sc, net, tm).fit(to_rdd(sc, data, num_slices=2))
        executors = sc.parallelize(range(4), 4).map(lambda _: __import__("os").getpid()).distinct().count()
        with ParallelWrapper(ref, workers=2, prefetch_buffer=0) as pw:
            pw.fit(ArrayIterator(data, 20))
        diff = float(np.max(np.abs(net.params().numpy() - ref.params().numpy())))
        print("RESULT " + json.dumps({"diff": diff, "executor_processes": executors}))
    finally:
        sc.stop()
    """
)


@pytest.mark.slow
def test_local_cluster_training_equals_parallel_wrapper(tmp_path):
    why = spark_missing()
    if why:
        pytest.skip(why)
    script = tmp_path / "local_cluster.py"
    script.write_text(PROGRAM)
    proc = subprocess.run(
        [sys.executable, str(script), str(ROOT)], capture_output=True, text=True, timeout=400, cwd=ROOT
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    if "skip" in result:
        pytest.skip(f"local-cluster mode does not start here: {result['skip']}")
    assert result["executor_processes"] >= 2  # really two executor processes
    assert result["diff"] < 1e-4  # two executors average exactly as two local workers do
