"""How a gang's workers sum arrays among themselves: maintained collective libraries, never a socket of kit's.

A gang (kit.spark.gang) is one Spark barrier stage that lives for a whole fit; its tasks exchange
state with one of these, opened once per fit inside the task:

    coll = open_collective("auto", BarrierTaskContext.get(), timeout=300.0, hello="rank 0's news")
    coll.hellos                         # every worker's hello, in rank order (one allGather for both)
    coll.allreduce_sum(flat)            # in place: every worker ends with the same sum
    coll.close()

- "gloo": torch.distributed's Gloo backend (PyTorch's CPU collectives). Rank 0 opens a
  `TCPStore` on a port the OS picks, the port reaches the others through Spark's own
  `BarrierTaskContext.allGather` (the rendezvous), and `init_process_group(timeout=...)` bounds
  every collective after it.
- "nccl": NCCL through CuPy (`cupy.cuda.nccl`) for networks on GPUs: rank 0's unique id goes
  round by allGather; a watchdog aborts the communicator past the timeout. Written against
  CuPy's API and NOT exercised here (no GPU executors in the tests).
- "allgather": Spark's `BarrierTaskContext.allGather` itself, the array as base64 text through
  the driver: always available, slow for big arrays, summed in rank order (deterministic).

"auto" takes nccl for GPU arrays where CuPy has it, gloo where torch imports, else allgather.
Opening one is one allGather, which also carries each worker's `hello` (a gang's batch counts):
Spark looks for an allGather's answer once a second, so each allGather saved is up to a second.
Every wait is bounded by `timeout`; a peer that dies makes the others fail, not hang. Every worker
gets the same sum, in gloo's order across workers, not kit's.
"""

from __future__ import annotations

import base64
import concurrent.futures
import datetime
import json
import threading
from typing import Any, Protocol

import numpy as np

from kit.core import backend

__all__ = ["COLLECTIVES", "Collective", "CollectiveTimeoutError", "available", "open_collective"]

COLLECTIVES = ("auto", "gloo", "nccl", "allgather")


class CollectiveTimeoutError(RuntimeError):
    """A gang's wait on its peers passed its timeout (a peer died or stalls)."""


class Collective(Protocol):
    name: str
    hellos: list[Any]  # every worker's `hello` to open_collective (JSON-able), in rank order

    def allreduce_sum(self, arr: Any) -> Any: ...

    def close(self) -> None: ...


def bounded(fn: Any, timeout: float, what: str) -> Any:
    """fn() in a helper thread, waited for at most `timeout` seconds (Spark's allGather and
    barrier take no timeout of their own; spark.barrier.sync.timeout is a year by default)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kit-gang-wait")
    try:
        return pool.submit(fn).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise CollectiveTimeoutError(
            f"{what}: no answer from every worker of the gang within {timeout:g} s (a worker died or stalls); "
            "raise the master's round_timeout if a worker's steps take longer"
        ) from None
    finally:
        pool.shutdown(wait=False)


def torch_missing() -> str | None:
    """Why torch.distributed's Gloo cannot be used here, or None."""
    try:
        import torch.distributed as dist
    except ImportError as exc:
        return f"torch is not importable ({exc})"
    if not (dist.is_available() and dist.is_gloo_available()):
        return "this torch build has no distributed Gloo backend"
    return None


def available(device_is_gpu: bool = False) -> str:
    """The collective "auto" opens on this process."""
    if device_is_gpu and nccl_missing() is None:
        return "nccl"
    return "gloo" if torch_missing() is None else "allgather"


def _nccl() -> Any:
    """CuPy's NCCL module (through kit.backend, the one place CuPy is imported)."""
    return backend.cupy().cuda.nccl


def nccl_missing() -> str | None:
    try:
        return None if _nccl().get_version() else "CuPy has no NCCL"
    except (backend.BackendError, ImportError, AttributeError) as exc:
        return f"CuPy's NCCL is not usable ({exc})"


def open_collective(kind: str, ctx: Any, timeout: float, device_is_gpu: bool = False, hello: Any = None) -> Collective:
    """The gang's collective of `kind` ("auto" resolved here, on the executor) for this barrier task;
    its `hellos` are every worker's `hello`, in rank order, from the rendezvous' one allGather."""
    kind = available(device_is_gpu) if kind == "auto" else kind
    if kind == "gloo":
        return TorchGloo(ctx, timeout, hello)
    if kind == "nccl":
        return CupyNccl(ctx, timeout, hello)
    return SparkAllGather(ctx, timeout, hello)


def _rendezvous(ctx: Any, timeout: float, what: str, mine: Any, hello: Any) -> tuple[list[Any], list[Any]]:
    """One allGather of (this worker's `mine`, its `hello`): everyone's of each, in rank order."""
    said = bounded(lambda: ctx.allGather(json.dumps([mine, hello])), timeout, what)
    pairs = [json.loads(s) for s in said]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _host(ctx: Any, rank: int) -> str:
    address = ctx.getTaskInfos()[rank].address  # "host:port" of the executor running that task
    return address.rsplit(":", 1)[0] or "127.0.0.1"


class TorchGloo:
    """torch.distributed's Gloo process group over this gang (rank = the barrier task's partition)."""

    name = "gloo"

    def __init__(self, ctx: Any, timeout: float, hello: Any = None) -> None:
        import torch
        import torch.distributed as dist

        why = torch_missing()
        if why:
            raise RuntimeError(f"collective='gloo': {why}; pip install torch on the executors, or use 'allgather'")
        self._torch, self._dist = torch, dist
        rank, world = ctx.partitionId(), len(ctx.getTaskInfos())
        wait = datetime.timedelta(seconds=timeout)
        host = _host(ctx, 0)
        store = (  # wait_for_workers=False: the others learn the port only from the allGather below
            dist.TCPStore(host, 0, world, is_master=True, timeout=wait, wait_for_workers=False) if rank == 0 else None
        )
        ports, self.hellos = _rendezvous(ctx, timeout, "gloo rendezvous", store.port if store else -1, hello)
        if store is None:
            store = dist.TCPStore(host, int(ports[0]), world, is_master=False, timeout=wait)
        if dist.is_initialized():  # a Python worker Spark reused after a gang that could not close
            dist.destroy_process_group()
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=wait)
        self._store = store

    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray:
        self._dist.all_reduce(self._torch.from_numpy(arr), op=self._dist.ReduceOp.SUM)  # in place, shared memory
        return arr

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
        self._store = None


class CupyNccl:
    """NCCL through CuPy for a gang whose networks live on GPUs. UNTESTED here: no GPU executors."""

    name = "nccl"

    def __init__(self, ctx: Any, timeout: float, hello: Any = None) -> None:
        nccl = _nccl()
        rank, world = ctx.partitionId(), len(ctx.getTaskInfos())
        uid = nccl.get_unique_id() if rank == 0 else None
        ids, self.hellos = _rendezvous(ctx, timeout, "nccl rendezvous", list(uid) if uid else None, hello)
        self._nccl, self._timeout = nccl, timeout
        self._comm = nccl.NcclCommunicator(world, tuple(ids[0]), rank)

    def allreduce_sum(self, arr: Any) -> Any:
        cupy, nccl = backend.cupy(), self._nccl
        dtype = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64}[arr.dtype]
        stream = cupy.cuda.get_current_stream()
        self._comm.allReduce(arr.data.ptr, arr.data.ptr, arr.size, dtype, nccl.NCCL_SUM, stream.ptr)
        done = threading.Event()
        watchdog = threading.Timer(self._timeout, lambda: done.is_set() or self._comm.abort())
        watchdog.start()
        try:
            stream.synchronize()
        finally:
            done.set()
            watchdog.cancel()
        return arr

    def close(self) -> None:
        self._comm.destroy()


class SparkAllGather:
    """Spark's BarrierTaskContext.allGather as the collective: each worker's array as base64 text, summed
    in rank order on every worker (the same bits everywhere, the same order as kit's rounds)."""

    name = "allgather"

    def __init__(self, ctx: Any, timeout: float, hello: Any = None) -> None:
        self._ctx, self._timeout = ctx, timeout
        _, self.hellos = _rendezvous(ctx, timeout, "allGather rendezvous", None, hello)

    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray:
        text = base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")
        parts = bounded(lambda: self._ctx.allGather(text), self._timeout, "allGather")
        total = np.zeros(arr.shape, arr.dtype)
        for part in parts:  # in rank order
            total += np.frombuffer(base64.b64decode(part), arr.dtype).reshape(arr.shape)
        arr[...] = total
        return arr

    def close(self) -> None:
        self._ctx = None
