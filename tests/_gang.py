"""What the gang tests share (tests/spark/test_spark_gang.py, test_gang_worker.py): the collectives that
run here, the network, a fit of two workers of 16, and the fixtures' data (128 digits, an RDD of two
slices, cached)."""

from kit.data import DataSet, load_digits
from kit.nn import Adam, mlp
from kit.spark import ParameterAveragingTrainingMaster, SparkNetwork, to_rdd
from kit.spark.collectives import torch_missing

# the collectives that run here: Spark's allGather always, gloo where torch imports
COLLECTIVES = ["allgather"] + ([] if torch_missing() else ["gloo"])
PER_WORKER = 16
TIMEOUT = 120.0  # the machine is shared: Spark's first jobs can take tens of seconds


def gang_data():
    train, _ = load_digits()
    return DataSet(train.features.numpy()[:128], train.labels.numpy()[:128], num_classes=10)


def gang_rdd(sc, data):
    out = to_rdd(sc, data, num_slices=2).cache()
    out.count()
    return out


def _net():
    return mlp(64, hidden=(16,), n_out=10, updater=Adam(1e-2), seed=5)


def _fit(sc, rdd, *, epochs=1, freq=2, **options):
    tm = ParameterAveragingTrainingMaster(
        PER_WORKER,
        freq,
        num_workers=options.pop("num_workers", 2),
        rdd_training_approach=options.pop("approach", "DIRECT"),
        collect_training_stats=True,
        round_timeout=TIMEOUT,
        **options,
    )
    spark = SparkNetwork(sc, _net(), tm)
    spark.fit(rdd, epochs=epochs)
    return spark
