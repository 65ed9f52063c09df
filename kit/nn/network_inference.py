"""How a Network answers: `output` (planned or through the inference workspaces), `score`, evaluation.

    >>> import numpy as np
    >>> from kit.nn import Dense, Network
    >>> net = Network([Dense(3)], input_shape=(4,))
    >>> net.output(np.ones((2, 4), np.float32)).shape, net.output(np.ones((0, 4), np.float32)).shape
    ((2, 3), (0, 3))

Answers are always detached (heap) memory, also when asked inside a workspace. A batch size asked
for again is answered by a replay of its recorded kernel calls (kit.nn.replay). `Inference` is a
mixin of kit.nn.network.Network, which holds the state these methods use; it opens by declaring it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from kit.arrays.creation import empty
from kit.arrays.ndarray import NDArray
from kit.data.dataset import DataSet
from kit.nn.evaluation import Evaluation
from kit.nn.replay_inference import InferencePlan
from kit.workspaces.workspace import scope_out_of_workspaces

if TYPE_CHECKING:
    from kit.core.devices import AnyDevice
    from kit.nn.losses import Loss
    from kit.nn.replay_inference import OutputPlans
    from kit.nn.turn_lock import TurnLock
    from kit.nn.workspace_mgr import LayerWorkspaceMgr

__all__ = ["Inference"]


class Inference:
    """The inference half of Network: predictions, the mean loss, evaluations."""

    # needs from its host (kit.nn.network.Network):
    loss: Loss
    device: AnyDevice
    dtype: np.dtype
    output_shape: tuple[int, ...]  # one example's output, without the batch axis
    lock: TurnLock
    infer_mgr: LayerWorkspaceMgr
    output_plans: OutputPlans
    _features: Callable[[Any], NDArray]  # features checked and cast where they meet the network
    _labels: Callable[[NDArray, int], NDArray]  # labels checked against the output, cast
    _check_finite: Callable[[NDArray, str], None]
    _forward: Callable[[NDArray, LayerWorkspaceMgr, bool], NDArray]  # (x, mgr, training) -> output

    def output(self, x: Any, train: bool = False, planned: bool = True) -> NDArray:
        """Predictions for x (probabilities for softmax cross-entropy), always in detached heap
        memory, also when called inside a workspace (DL4J throws there, dl4j#8231).

        In inference a batch size asked for again is answered by replaying the kernel calls its
        recorded pass made (kit.nn.replay, `output_plans`): the same numbers with less bookkeeping.
        `planned=False` (or the switch, kit.nn.replay.switch) runs the layers, in the inference
        workspaces."""
        if planned and not train:
            lock = self.lock.rlock
            if lock.acquire(False):  # free: the RLock itself, without TurnLock's Python
                try:
                    answer = self.output_plans.answer(x)
                finally:
                    lock.release()
            else:  # wait the way every other caller does (counted, let in between training steps)
                with self.lock:
                    answer = self.output_plans.answer(x)
            if answer is not None:
                return answer
        with self.lock, scope_out_of_workspaces():
            x = self._features(x)
            if x.shape[0] == 0:  # no examples, no work: an empty answer of the right shape
                return empty((0, *self.output_shape), self.dtype, self.device)
            self._check_finite(x, "features")
            mgr = self.infer_mgr
            with mgr.iteration():
                out = self._forward(x, mgr, training=train)
                with scope_out_of_workspaces():
                    result = empty(out.shape, self.dtype, self.device)
                with mgr.layer_call():
                    self.loss.activate(out, result, mgr)
            return result

    def plan_inference(self, batch_size: int) -> InferencePlan:
        """Forward passes for `batch_size` examples, recorded once and replayed (kit.nn.replay): no
        allocation and no per-call bookkeeping; the CPU analogue of a captured CUDA graph."""
        return InferencePlan(self, batch_size)

    def score(self, data: DataSet | Iterable[DataSet]) -> float:
        """Mean loss over a DataSet or an iterator (no training, no L2)."""
        batches = [data] if isinstance(data, DataSet) else data
        total, count = 0.0, 0
        with self.lock, scope_out_of_workspaces():
            mgr = self.infer_mgr
            for ds in batches:
                if ds.num_examples == 0:  # an empty batch adds nothing to a mean (it divided by zero)
                    continue
                x = self._features(ds.features)
                y = self._labels(ds.labels, x.shape[0])
                self._check_finite(x, "score: features")  # one NaN made the score NaN (as evaluate refuses it)
                with mgr.iteration():
                    out = self._forward(x, mgr, training=False)
                    with mgr.layer_call():
                        value = self.loss.value(out, y, mgr)
                total += value * x.shape[0]
                count += x.shape[0]
        if count == 0:
            raise ValueError("score: no examples (every batch was empty); give a DataSet with at least one row")
        return total / count

    def evaluate(self, data: Iterable[DataSet]) -> Any:
        return self.do_evaluation(data, Evaluation(self.output_shape[0]))[0]

    def do_evaluation(self, data: DataSet | Iterable[DataSet], *evaluations: Any) -> tuple[Any, ...]:
        """One pass over the data updating every evaluation (Evaluation, ROC, ...)."""
        if not evaluations:
            raise ValueError("do_evaluation needs at least one evaluation object")
        batches = [data] if isinstance(data, DataSet) else data
        for ds in batches:
            probs = self.output(ds.features)
            for ev in evaluations:
                ev.eval(ds.labels, probs)
        return evaluations
