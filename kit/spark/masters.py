"""Training masters: how a SparkNetwork spreads a fit over Spark's executors (DL4J's names).

    >>> from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5)
    >>> tm.repartition, tm.rdd_training_approach         # DL4J's defaults
    (<Repartition.ALWAYS: 'ALWAYS'>, <RDDTrainingApproach.EXPORT: 'EXPORT'>)
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    (0.001, 2)

Both prepare the data once per fit (kit.spark.prepared), then run rounds; a round is one step of
kit's TrainingLoop on the driver.

ParameterAveragingTrainingMaster (DL4J 0.x's default): the driver broadcasts the flat state; each
worker fits `averaging_frequency` mini-batches and sends its state back up a tree
(kit.spark.aggregation); the next round starts from the mean over the workers that had data.

SharedTrainingMaster (DL4J 1.0's default, gradient sharing): each worker threshold-encodes every
step's update plus its residual (kit.parallel.threshold) and applies what it encoded; the driver
applies the messages' sum in worker order. A worker's residual, updater state and threshold stay
on its executor (kit.spark.worker_store) and reach the driver at each epoch's end.

Data (`repartition` ALWAYS): example i goes to mini-batch i // batch_size_per_worker, and mini-batch
b to worker b % num_workers, as with ParallelWrapper. With NEVER each existing partition is one
worker and keeps its order.

The parts, all re-exported here: kit.spark.master_options (the frozen options, enums and checks),
kit.spark.prepared, kit.spark.training_master (what both masters share), and one module a master,
kit.spark.averaging_master and kit.spark.shared_master.
"""

from __future__ import annotations

from kit.spark.averaging_master import ParameterAveragingTrainingMaster
from kit.spark.master_options import AveragingOptions, RDDTrainingApproach, Repartition, SharedOptions
from kit.spark.prepared import Prepared
from kit.spark.shared_master import SharedTrainingMaster
from kit.spark.training_master import TrainingMaster, timing_sizes

__all__ = [
    "AveragingOptions",
    "ParameterAveragingTrainingMaster",
    "Prepared",
    "RDDTrainingApproach",
    "Repartition",
    "SharedOptions",
    "SharedTrainingMaster",
    "TrainingMaster",
    "timing_sizes",
]
