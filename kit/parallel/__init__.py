"""kit.parallel: ParallelWrapper (averaging, shared gradients), ParallelInference, threshold encoding.

>>> from kit.parallel import ParallelWrapper, ParallelInference, TrainingMode
"""

from kit.parallel.inference import InferenceMode, ParallelInference
from kit.parallel.threshold import (
    AdaptiveThresholdAlgorithm,
    FixedThresholdAlgorithm,
    NoOpResidualPostProcessor,
    ResidualClippingPostProcessor,
    TargetSparsityThresholdAlgorithm,
    ThresholdAlgorithm,
    threshold_decode,
    threshold_encode,
)
from kit.parallel.wrapper import ParallelWrapper, TrainingMode, WorkerError, default_devices

__all__ = [
    "AdaptiveThresholdAlgorithm",
    "FixedThresholdAlgorithm",
    "InferenceMode",
    "NoOpResidualPostProcessor",
    "ParallelInference",
    "ParallelWrapper",
    "ResidualClippingPostProcessor",
    "TargetSparsityThresholdAlgorithm",
    "ThresholdAlgorithm",
    "TrainingMode",
    "WorkerError",
    "default_devices",
    "threshold_decode",
    "threshold_encode",
]
