"""The scaling model: the epoch time N devices should take, from one-device measurements.

    T(N) = batches * t_step(N) / N  +  (batches / (N * F)) * bytes_moved(N) / bandwidth
where t_step(N) is one training step measured with the compute each worker would have (the
CPU's cores shared out, or a whole GPU), F the averaging frequency, bytes_moved(N) = 2 (N - 1) P b k
(each of the N - 1 other replicas' P parameters of b bytes gathered to the first device and the
average broadcast back, k buffers with the updater state: what kit.devices.transfer_stats counts),
and the bandwidth a measured device copy.
"""

from __future__ import annotations

import numpy as np

from kit.core.arguments import real, whole
from kit.core.devices import AnyDevice, as_device, default_device
from kit.measurement import measure

__all__ = ["measure_bandwidth", "predict_epoch_seconds"]


def measure_bandwidth(nbytes: int, device: str | AnyDevice | None = None, repeats: int = 7) -> float:
    """Bytes per second of a device-to-device copy (read + write counted once, as moved)."""
    n = whole("measure_bandwidth", "nbytes", nbytes, 4, what=" (bytes to copy: one float32 or more)") // 4
    repeats = whole("measure_bandwidth", "repeats", repeats)
    dev = as_device(device) if device is not None else default_device()
    xp = dev.xp
    with dev.activate():
        a = xp.ones(n, dtype=np.float32)
        b = xp.empty_like(a)
        sync = xp.cuda.get_current_stream().synchronize if dev.kind == "gpu" else None
        t = measure.measure(lambda: xp.copyto(b, a), repeats=repeats, min_time=0.02, sync=sync)
    return n * 4 / t.median


def predict_epoch_seconds(
    batches: int,
    n: int,
    step_seconds: float,
    frequency: int,
    params: int,
    bytes_per_value: int,
    buffers: float,
    bandwidth: float,
    parallel: bool,
) -> float:
    """The scaling model (the formula above). `parallel`: whether the N workers really
    run side by side (physical devices, or CPU cores shared out) or share one device."""
    where = "predict_epoch_seconds"
    batches, n, frequency = (whole(where, k, v) for k, v in (("batches", batches), ("n", n), ("frequency", frequency)))
    params = whole(where, "params", params, 0)
    bytes_per_value = real(where, "bytes_per_value", bytes_per_value, 0, low_open=True)
    step_seconds, buffers = real(where, "step_seconds", step_seconds, 0), real(where, "buffers", buffers, 0)
    bandwidth = real(where, "bandwidth", bandwidth, 0, low_open=True, what=" (bytes per second)")
    compute = batches * step_seconds / (n if parallel else 1)
    if n == 1:
        return compute
    moved = 2 * (n - 1) * params * bytes_per_value * buffers  # the first replica's stay where they are
    return compute + (batches / (n * frequency)) * moved / bandwidth
