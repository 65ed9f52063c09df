"""Training masters: how a SparkNetwork spreads a fit over Spark's executors (DL4J's names).

    >>> from kit.spark import ParameterAveragingTrainingMaster, SharedTrainingMaster
    >>> tm = ParameterAveragingTrainingMaster(batch_size_per_worker=32, averaging_frequency=5)
    >>> tm.repartition, tm.rdd_training_approach         # DL4J's defaults
    (<Repartition.ALWAYS: 'ALWAYS'>, <RDDTrainingApproach.EXPORT: 'EXPORT'>)
    >>> tm = SharedTrainingMaster(batch_size_per_worker=32, batches_per_round=5)
    >>> tm.threshold["initial_threshold"], tm.worker_prefetch_num_batches
    (0.001, 2)

Both prepare the data once per fit (repartition into one partition per worker, cache or export
to files), then run rounds. A round is one step of kit's TrainingLoop on the driver:

ParameterAveragingTrainingMaster (DL4J 0.x's default): broadcast the flat parameters (and the
updater state when `save_updater`) as one float array; each worker sets them into the network
it built from the JSON config, fits `averaging_frequency` mini-batches of
`batch_size_per_worker` examples, and sends its flat state back up a tree
(`aggregation_depth`, kit.spark.aggregation): executors sum neighbouring workers' states in
float64, in worker order, and the driver divides the sum by the workers that had data in the
round and starts the next round from the mean.

SharedTrainingMaster (DL4J 1.0's default, gradient sharing): each worker adds every step's
update to its residual, threshold-encodes it (kit.parallel.threshold, adaptive threshold) and
applies what it encoded; the messages come back through the same tree, still encoded (a dense
sum would be larger than the sparse messages), and the driver applies their sum in worker
order, then broadcasts the parameters for the next round (they changed by every worker's
messages; an executor cannot be relied on to hold the last round's). Each worker's residual,
updater state and threshold are its own for the whole training, as in DL4J: they stay in a
file on the executor that ran the worker's round (kit.spark.worker_store), kept under the
rounds done, and go to the driver at each epoch's end (every round with checkpoints, or with
`keep_state_on_driver`); a task on an executor without them goes on from the driver's copy
(said in the stats and a warning), a retried one on the same executor from exactly the state
the failed one started from. The network's updater state is broadcast only while some worker
has none of its own yet (it is where such a worker starts). The network's updater state after
a fit is worker 0's.

Assignment of data (both masters, `repartition` ALWAYS): example i of the RDD (in order, every
element's examples one by one, whatever the elements hold) goes to mini-batch
i // batch_size_per_worker, and mini-batch b to worker b % num_workers, in order; so
in the first epoch, round r of worker w trains on the same mini-batches as ParallelWrapper's
worker w between its averagings. Spark starts a new round at each epoch while ParallelWrapper
counts its averaging period across the boundary, so later epochs keep this only when each
worker's mini-batches per epoch are a multiple of the frequency. With NEVER each existing
partition is one worker and keeps its order.

Where each part lives (all re-exported here): kit.spark.master_options (each master's frozen
options, the enums and the argument checks), kit.spark.prepared (`Prepared`: a fit's data, stored once),
kit.spark.training_master (`TrainingMaster`: what both masters share), and one module a master:
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
