"""The one transfer path between devices: every copy from one device to another comes through
`transfer`, on the right CUDA streams, and is counted per device pair.

    >>> import kit
    >>> from kit.core.devices import reset_transfer_stats, set_host_device_count, transfer_stats
    >>> previous = set_host_device_count(2)
    >>> reset_transfer_stats()
    >>> y = kit.ones((4,), device="cpu:0").to("cpu:1")
    >>> transfer_stats()
    {('cpu:0', 'cpu:1'): (1, 16)}
    >>> _ = set_host_device_count(previous)

Host reads of GPU data (`to_host`, `scalar`) run on the array's own stream, so they wait for the
work queued there: a logical device's stream does not wait for the default one. Re-exported by
`kit.devices`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from kit.core import backend
from kit.core.device_objects import AnyDevice, Device
from kit.state import STATE

__all__ = ["host_source", "reset_transfer_stats", "scalar", "to_host", "transfer", "transfer_stats"]


def transfer(dst: Any, dst_device: AnyDevice, src: Any, src_device: AnyDevice, host_arrays: bool = False) -> None:
    """Copy the raw array `src` (on src_device) into `dst` (on dst_device), same shape. Every
    copy between two devices in kit comes through here and is counted per device pair.
    `host_arrays`: both are NumPy arrays standing for data of those devices (the small host
    messages of gradient sharing, whatever the backend): counted, copied on the host."""
    if src_device is not dst_device:
        with STATE.lock:
            entry = STATE.transfers.setdefault((src_device.name, dst_device.name), [0, 0])
            entry[0] += 1
            entry[1] += int(src.nbytes)
    if host_arrays:
        np.copyto(dst, src)
        return
    src_gpu, dst_gpu = src_device.kind == "gpu", dst_device.kind == "gpu"
    if not src_gpu and not dst_gpu:
        np.copyto(dst, src)
    elif not dst_gpu:  # device -> host, on the source's stream (it waits for the source's writes)
        with _on_own_stream(src_device):
            if dst.flags.c_contiguous and src.flags.c_contiguous:
                src.get(out=dst)
            else:
                np.copyto(dst, src.get())
    elif not src_gpu:  # host -> device, on the destination's stream (its later readers follow it)
        with _on_own_stream(dst_device):
            if dst.flags.c_contiguous:
                dst.set(np.ascontiguousarray(src))
            else:
                dst[...] = dst_device.xp.asarray(src)
    else:  # GPU -> GPU: logical siblings (one memory space) or a peer copy between two GPUs
        _gpu_copy(dst, dst_device, src, src_device)


def _stream_of(d: AnyDevice) -> Any:
    """The CUDA stream kit's work for `d` runs on: a logical slot's own stream, else the default
    (null) stream of the physical GPU, whichever thread asks."""
    own = d._stream_for_activate()
    return own if own is not None else backend.cupy().cuda.Stream.null


@contextlib.contextmanager
def _on_own_stream(d: AnyDevice) -> Iterator[Any]:
    cupy = backend.cupy()
    stream = _stream_of(d)
    with cupy.cuda.Device(d.index), stream:
        yield stream


def _gpu_copy(dst: Any, dst_device: AnyDevice, src: Any, src_device: AnyDevice) -> None:
    """A copy between two GPU streams, ordered both ways with events: the destination's stream
    waits until the source's stream has written `src`, and the source's stream waits until the
    copy has read it (so the source may overwrite or free `src` at once). Each logical device has
    its own non-blocking stream, which does not wait for the default stream, nor it for them:
    without the events a copy can read memory still being written (seen on an H100: a worker's
    label rows read as zeros, then a NaN loss)."""
    cupy = backend.cupy()
    with _on_own_stream(src_device) as src_stream:
        if dst_device.physical is not src_device.physical:
            src = cupy.ascontiguousarray(src)  # on the source's stream, before `written` is recorded
        written = src_stream.record()
    with _on_own_stream(dst_device) as dst_stream:
        if dst_stream != src_stream:
            dst_stream.wait_event(written)
        if dst_device.physical is src_device.physical:
            cupy.copyto(dst, src)
        elif dst.flags.c_contiguous:
            dst.data.copy_from_device_async(src.data, src.nbytes, dst_stream)
        else:
            dst[...] = cupy.asarray(src)
        read = dst_stream.record()
    if dst_stream != src_stream:
        src_stream.wait_event(read)


def to_host(raw: Any, device: AnyDevice) -> np.ndarray:
    """A NumPy copy of the raw array `raw` on `device`, through the counted transfer path (on a
    GPU: read on the device's own stream, so the copy waits for the writes queued there)."""
    if device.kind != "gpu":
        return raw
    out = np.empty(raw.shape, raw.dtype)
    transfer(out, host_source(device), raw, device)
    return out


def scalar(raw: Any, device: AnyDevice) -> Any:
    """The one element of `raw` as a Python scalar, read on the device's own stream."""
    if device.kind != "gpu":
        return raw.item()
    with _on_own_stream(device):
        return raw.item()


def host_source(device: AnyDevice) -> AnyDevice:
    """The device host (NumPy) memory counts as coming from when copied onto `device`: the
    device itself on a CPU (a host-to-host copy is no transfer), cpu:0 for a GPU."""
    return device if device.kind == "cpu" else Device("cpu:0")


def transfer_stats() -> dict[tuple[str, str], tuple[int, int]]:
    """Copies between devices since the last reset: (source, target) -> (count, bytes)."""
    with STATE.lock:
        return {pair: (n, b) for pair, (n, b) in STATE.transfers.items()}


def reset_transfer_stats() -> None:
    with STATE.lock:
        STATE.transfers.clear()
