"""Weight initialisation (DL4J's WeightInit names), drawn on the host from one seed.

    >>> from kit.nn import ParamSpec
    >>> from kit.nn.init import initial_values
    >>> specs = [ParamSpec("W", (3, 4), "xavier", fan_in=3, fan_out=4), ParamSpec("b", (4,), "zeros")]
    >>> values = initial_values(specs, seed=0)      # one float64 vector for the flat buffer
    >>> values.shape, values.dtype
    ((16,), dtype('float64'))
    >>> values[12:]                                 # b, after W's 3 x 4 values
    array([0., 0., 0., 0.])
    >>> bool((initial_values(specs, seed=0) == values).all())  # the same seed, the same values
    True

Drawing on the host from the network's seed gives every device, and every replica, the same
initial network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_init", "initial_values"]

NAMED = ("xavier", "he", "relu", "zeros", "ones")


def check_init(where: str, init: object) -> str:
    """A weight initialisation, checked at the layer's call: a name in NAMED or 'normal:<std>' with a
    finite std > 0 (a NaN one made every weight NaN, said only when the network was built)."""
    if isinstance(init, str) and init in NAMED:
        return init
    if isinstance(init, str) and init.startswith("normal:"):
        try:
            std = float(init.split(":", 1)[1])
        except ValueError:
            std = math.nan
        if math.isfinite(std) and std > 0:
            return init
    raise ValueError(
        f"{where}(weight_init={init!r}): use 'xavier', 'he', 'normal:<std>', 'zeros' or 'ones' (<std>: a finite "
        "number > 0, e.g. normal:0.01)"
    )


def initial_values(specs: Sequence[Any], seed: int) -> np.ndarray:
    """The initial flat parameter vector for ParamSpecs in buffer order."""
    rng = np.random.default_rng(seed)
    sizes = [math.prod(spec.shape) for spec in specs]
    host = np.empty(sum(sizes), dtype=np.float64)
    offset = 0
    for spec, size in zip(specs, sizes):
        host[offset : offset + size] = _values(spec, rng, size)
        offset += size
    return host


def _values(spec: Any, rng: np.random.Generator, size: int) -> np.ndarray:
    init = spec.init
    if init == "zeros":
        return np.zeros(size)
    if init == "ones":
        return np.ones(size)
    if init == "xavier":  # DL4J XAVIER: N(0, 2 / (fan_in + fan_out))
        return rng.standard_normal(size) * math.sqrt(2.0 / (spec.fan_in + spec.fan_out))
    if init in ("he", "relu"):  # DL4J RELU (He): N(0, 2 / fan_in)
        return rng.standard_normal(size) * math.sqrt(2.0 / spec.fan_in)
    if init.startswith("normal:"):
        return rng.standard_normal(size) * float(init.split(":", 1)[1])
    raise ValueError(f"unknown weight initialisation {init!r}: use 'xavier', 'he', 'normal:<std>', 'zeros' or 'ones'")
