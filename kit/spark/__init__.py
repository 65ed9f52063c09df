"""kit.spark: distributed training and evaluation on Apache Spark (PySpark), DL4J's way.

Usage (it starts a local Spark, a JVM that takes seconds to come up, so it is not run as a doctest):

    from kit.data import load_digits
    from kit.nn import mlp
    from kit.spark import SparkNetwork, ParameterAveragingTrainingMaster, local_spark_context, to_rdd
    from kit.spark import export_stats_html
    train, test = load_digits()
    net = mlp(64, hidden=(32,), n_out=10)
    sc = local_spark_context("local[2]")             # clear error if PySpark or Java is missing
    tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5,
                                          collect_training_stats=True)
    spark_net = SparkNetwork(sc, net, tm)
    spark_net.fit(to_rdd(sc, train), epochs=2)
    spark_net.evaluate(to_rdd(sc, test)).accuracy()
    export_stats_html(spark_net.get_training_stats(), "stats.html")

As MLlib estimators (pyspark.ml Params, Pipelines, CrossValidator, MLlib's save and load):
NetworkClassifier and NetworkClassificationModel (kit.spark.ml). Distributed inference:
SparkNetwork.feed_forward_with_key, output and predict (kit.spark.scoring).

DL4J names: SparkNetwork = SparkDl4jMultiLayer, get_training_stats = getSparkTrainingStats,
export_stats_html = StatsUtils.exportStatsAsHtml; the masters keep theirs. Needs the `spark` extra
(PySpark) and Java 17. ParameterAveragingTrainingMaster trains a whole fit in one barrier stage where
it can (kit.spark.gang), in rounds otherwise. Importing this package does not import PySpark;
starting a context does, and so does the first use of kit.spark.ml's classes (PEP 562).
"""

import importlib
from typing import Any

from kit.spark.checkpoint import CheckpointError
from kit.spark.gang import GangFallbackWarning
from kit.spark.masters import (
    ParameterAveragingTrainingMaster,
    RDDTrainingApproach,
    Repartition,
    SharedTrainingMaster,
    TrainingMaster,
)
from kit.spark.network import (
    SparkNetwork,
    SparkTrainingError,
    SparkUnavailableError,
    local_spark_context,
    merge_evaluations,
    spark_missing,
    to_rdd,
)
from kit.spark.scheduling import MoreWorkersThanSlotsWarning
from kit.spark.spark_context import SparkMasterWarning, require_spark
from kit.spark.stats import SparkTrainingStats, export_stats_html

LAZY = {"NetworkClassifier": "kit.spark.ml", "NetworkClassificationModel": "kit.spark.ml"}  # they import PySpark


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'kit.spark' has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "GangFallbackWarning",
    "MoreWorkersThanSlotsWarning",
    "NetworkClassificationModel",
    "NetworkClassifier",
    "ParameterAveragingTrainingMaster",
    "RDDTrainingApproach",
    "Repartition",
    "SharedTrainingMaster",
    "SparkMasterWarning",
    "SparkNetwork",
    "SparkTrainingError",
    "SparkTrainingStats",
    "SparkUnavailableError",
    "TrainingMaster",
    "export_stats_html",
    "local_spark_context",
    "merge_evaluations",
    "require_spark",
    "spark_missing",
    "to_rdd",
]
