"""What the tests of kit.parallel.inference share: a layer that holds a worker busy until told to
go on (one class: kit.nn.Layer registers layers by name, so a replica cloned from a network is
built from the class registered under "Gate"), and the inference threads still alive."""

import threading

from kit.nn import Layer


def inference_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("InferenceThread")]


class Gate(Layer):
    """An identity layer that waits for an event: holds a worker busy on purpose."""

    event = threading.Event()
    entered = threading.Event()  # set by a worker arriving at the gate

    def forward(self, x, mgr, training):
        Gate.entered.set()
        Gate.event.wait(timeout=30)
        y = mgr.create(mgr_type(), x.shape, x.dtype, x.device)
        y.data[...] = x.data
        return y


def mgr_type():
    from kit.nn.workspace_mgr import ArrayType

    return ArrayType.ACTIVATIONS
