"""kit.spark.collectives: how a gang's workers sum arrays among themselves. In a real Spark barrier
stage (local[2], the session's `sc`) every collective that runs here gives each worker NumPy's sum of
the workers' arrays, in place, in their dtype, and every worker's hello from the rendezvous; every
wait is bounded, and a wait past its timeout says which wait and what to raise (which then runs);
"auto" picks what this process has."""

import threading

import numpy as np
import pytest

from kit.spark.collectives import (
    COLLECTIVES,
    CollectiveTimeoutError,
    available,
    bounded,
    nccl_missing,
    torch_missing,
)

HERE = ["allgather", "auto"] + ([] if torch_missing() else ["gloo"])  # nccl needs GPU executors


def _array(rank, dtype):
    return (np.arange(6, dtype=np.float64).reshape(2, 3) * (rank + 1) + 0.125 * rank).astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", HERE)
def test_every_worker_ends_with_numpys_sum_in_place(sc, kind, dtype):
    def task(it):
        from pyspark import BarrierTaskContext

        from kit.spark.collectives import open_collective

        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        arr = (np.arange(6, dtype=np.float64).reshape(2, 3) * (rank + 1) + 0.125 * rank).astype(dtype)
        coll = open_collective(kind, ctx, timeout=60.0, hello=f"rank {rank} says {dtype}")
        try:
            out = coll.allreduce_sum(arr)
            yield rank, coll.name, out is arr, str(arr.dtype), arr.tolist(), coll.hellos
        finally:
            coll.close()

    got = sorted(sc.parallelize(range(2), 2).barrier().mapPartitions(task).collect())
    expected = _array(0, dtype) + _array(1, dtype)
    assert [g[0] for g in got] == [0, 1]
    for _, name, in_place, got_dtype, values, hellos in got:
        assert name == (available() if kind == "auto" else kind) and in_place and got_dtype == dtype
        assert hellos == [f"rank 0 says {dtype}", f"rank 1 says {dtype}"]  # the rendezvous' one allGather
        np.testing.assert_array_equal(np.array(values, dtype=dtype), expected)


def test_auto_takes_what_this_process_has():
    assert available() == ("gloo" if torch_missing() is None else "allgather")
    assert available(device_is_gpu=True) == ("nccl" if nccl_missing() is None else available())
    assert set(COLLECTIVES) == {"auto", "gloo", "nccl", "allgather"}


def test_a_bounded_wait_gives_the_answer_or_the_error_of_the_call():
    assert bounded(lambda: [1, 2], 60.0, "allGather") == [1, 2]
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 / 0, 60.0, "allGather")


def test_a_wait_past_its_timeout_names_the_wait_and_raising_the_timeout_lets_a_late_peer_answer():
    peer = threading.Event()  # a peer that has not answered yet
    with pytest.raises(CollectiveTimeoutError) as refused:
        bounded(lambda: peer.wait() and "answer", 0.2, "gloo rendezvous")
    said = str(refused.value)
    assert said.startswith("gloo rendezvous: no answer from every worker of the gang within 0.2 s")
    assert "raise the master's round_timeout" in said
    late = threading.Timer(0.5, peer.set)  # the peer answers, later than the first timeout allowed
    late.start()
    try:
        assert bounded(lambda: peer.wait() and "answer", 120.0, "gloo rendezvous") == "answer"  # the remedy
    finally:
        late.cancel()
