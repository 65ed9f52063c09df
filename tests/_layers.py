"""Driving one layer by hand, outside a Network: build it, give it random float64 parameters,
run forward and backward on the heap (WorkspaceMode.NONE), and read everything back as NumPy."""

import numpy as np

import kit
from kit.nn.workspace_mgr import LayerWorkspaceMgr, WorkspaceMode


def bind_random(layer, input_shape, seed=0):
    """Build `layer` for per-example `input_shape`, bind random float64 parameters (and zeroed
    gradients) to it, and return the parameters as NumPy arrays by name (views of what it uses)."""
    rng = np.random.default_rng(seed)
    layer.build(input_shape)
    params = {s.name: kit.asarray(rng.standard_normal(s.shape)) for s in layer.param_specs()}
    grads = {s.name: kit.zeros(s.shape, dtype="float64") for s in layer.param_specs()}
    layer.bind(params, grads)
    return {name: p.numpy() for name, p in params.items()}


def forward_backward(layer, x, eps=None, training=True):
    """(y, dx, {name: gradient}) of one forward and, when `eps` is given, one backward."""
    mgr = LayerWorkspaceMgr(WorkspaceMode.NONE)
    y = layer.forward(kit.asarray(x), mgr, training).numpy().copy()
    if eps is None:
        return y, None, {}
    dx = layer.backward(kit.asarray(eps), mgr)
    grads = {name: g.numpy().copy() for name, g in layer.grads.items()}
    return y, None if dx is None else dx.numpy().copy(), grads
