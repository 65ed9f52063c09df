"""Random generators: one per device, seeded from `kit.seed`, made at the device's first draw.

    >>> import kit
    >>> kit.seed(0); a = kit.randn((3,)).numpy()
    >>> kit.seed(0); b = kit.randn((3,)).numpy()
    >>> bool((a == b).all())
    True

Each device (a logical slot included) gets its own seed from the base seed and its name's parts,
so workers on different devices draw different numbers, reproducibly. `seed` and
`kit.state.reset()` forget every generator; `Device.rng()` makes it again. Re-exported by
`kit.devices`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.core import backend
from kit.core.arguments import whole
from kit.state import STATE

__all__ = ["seed"]

AnyDevice = Any  # kit.devices.AnyDevice, named in hints only (kit.device_objects imports this module)


def seed_for(dev: AnyDevice) -> int:
    slot = getattr(dev, "slot", -1) + 1
    return (STATE.base_seed * 1_000_003 + dev.index * 1009 + (0 if dev.kind == "cpu" else 7) + slot * 31) & 0x7FFFFFFF


def make_rng(dev: AnyDevice, s: int) -> Any:
    STATE.seeded.append(dev)  # devices are few and long-lived: no weakrefs needed
    if dev.kind == "gpu":
        cupy = backend.cupy()
        with cupy.cuda.Device(dev.index):
            return cupy.random.default_rng(s)
    return np.random.default_rng(s)


def seed(value: int) -> None:
    """Re-seed every device's generator (reproducible rand/randn)."""
    STATE.base_seed = whole("seed", "value", value, 0)
    _forget_generators()


@STATE.on_reset
def _forget_generators() -> None:
    """Every device makes its generator again from the seed at its next random draw."""
    for dev in STATE.seeded:
        dev._rng = None
    STATE.seeded.clear()
