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

ParameterAveragingTrainingMaster (DL4J 0.x's default): the driver broadcasts the flat parameters
(and the updater state when `save_updater`) as one float array; each worker fits
`averaging_frequency` mini-batches of `batch_size_per_worker` examples and sends its flat state
back up a tree (`aggregation_depth`, kit.spark.aggregation) that sums in float64, in worker order;
the next round starts from the mean over the workers that had data.

SharedTrainingMaster (DL4J 1.0's default, gradient sharing): each worker adds every step's update
to its residual, threshold-encodes it (kit.parallel.threshold) and applies what it encoded; the
messages come back up the same tree still encoded, the driver applies their sum in worker order
and broadcasts the parameters. As in DL4J a worker's residual, updater state and threshold are its
own for the whole training: they stay on the executor that ran its round (kit.spark.worker_store)
and reach the driver at each epoch's end; a task elsewhere goes on from the driver's copy (said).

Data (`repartition` ALWAYS): example i of the RDD, in order, goes to mini-batch
i // batch_size_per_worker, and mini-batch b to worker b % num_workers; so in the first epoch round
r of worker w trains on ParallelWrapper's worker w's mini-batches between its averagings (in later
epochs only when a worker's mini-batches per epoch are a multiple of the frequency: Spark starts a
round at each epoch). With NEVER each existing partition is one worker and keeps its order.

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
