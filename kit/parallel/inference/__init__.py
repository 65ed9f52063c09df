"""ParallelInference: thread-safe, batched model serving (DL4J's).

    >>> import numpy as np
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from kit.nn import mlp
    >>> from kit.parallel import InferenceMode, ParallelInference
    >>> net = mlp(8, hidden=(16,), n_out=3)
    >>> x = np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32)
    >>> requests = [x[0:2], x[2:4], x[4:6]]
    >>> with ParallelInference(net, workers=2, inference_mode=InferenceMode.BATCHED) as pi:
    ...     with ThreadPoolExecutor(3) as clients:  # from any number of client threads
    ...         probs = list(clients.map(pi.output, requests))
    >>> probs[0]
    NDArray(shape=(2, 3), dtype=float32, device=..., heap)
      [...]
    >>> bool(np.allclose(np.concatenate([p.numpy() for p in probs]), net.output(x).numpy()))
    True

One request, room by room:

1. `facade` -- `ParallelInference` and its modes (SEQUENTIAL, BATCHED, INPLACE). The caller's
   checks run in the caller's thread (`output`, `submit`, `output_async`): a wrong shape or dtype
   is refused there, and every `timeout=` is read by one rule. Also `update_model` and `shutdown`.
2. `engine` -- the request queue and back-pressure, batching, the replica workers, counting,
   and recovery after a failed batch (only the request that caused it fails).
3. `delivery` -- the answer's way back: to a blocking caller, a `concurrent.futures.Future`, or
   an asyncio event loop (a whole batch's answers with one call into each loop), with the copies
   between the caller's device and the replica's counted.

Every request is answered: with its result, or with an error that belongs to it alone -- a
wrong shape or dtype is refused in the caller's thread; NaN data is found by the worker's check
of the whole batch, and a batch that fails is split: the requests with NaN fail with indices
into their own rows, the others run again as one batch (any other failure: request by request),
so only the request that caused it fails (DL4J hung callers here before a fix, dl4j#4813, and
fails whole batches). A full request queue (`queue_limit`) makes callers wait (back-pressure);
`shutdown()` answers every waiting request with a clear error (INPLACE callers waiting for a
replica too) and joins every thread; dropping the last reference does the same (the worker
threads hold only the engine, never the ParallelInference). Every `timeout=` follows one rule,
in every mode: None or math.inf wait without limit, 0 does not wait, a negative value or NaN is
a ValueError at the call (see `ParallelInference.output`). `update_model(net)` swaps in
everything answers depend on (parameters, layers, loss and output activation, dtype, shapes):
from its return on, every answer is what `net.output()` gives.

The hot path has no per-request thread: one lock guards the queue, a worker drains a whole batch
per acquisition and wakes only its own callers, each through a plain lock. Every waiting caller
thread still costs a wake-up and a turn at the GIL per answer, and with dozens of them those
turns, not the model, bound the throughput (measured in `python -m kit bench parallel`). So
there are two ways to keep many requests in flight without a thread each: `submit` returns a
concurrent Future, and `await output_async(x)` serves asyncio code (a web server, say): a worker
settles all of a batch's asyncio answers with one call into the event loop.

    >>> import asyncio
    >>> async def serve(pi, rows):  # 64 concurrent requests, one thread
    ...     return await asyncio.gather(*(pi.output_async(r) for r in rows))
    >>> with ParallelInference(net, workers=2) as pi:
    ...     answers = asyncio.run(serve(pi, list(np.tile(x, (11, 1))[:64])))
    ...     futures = [pi.submit(r) for r in x]  # or Futures, from one thread
    ...     firsts = [f.result() for f in futures]
    >>> len(answers), bool(np.allclose(answers[0].numpy(), firsts[0].numpy()))
    (64, True)
"""

# importable from here as before the split; the engine reads its own (patch kit.parallel.inference.engine's)
from kit.parallel.inference.engine import BATCH_SIZES_KEPT as BATCH_SIZES_KEPT
from kit.parallel.inference.engine import SHUT_DOWN as SHUT_DOWN
from kit.parallel.inference.facade import InferenceMode, ParallelInference

__all__ = ["InferenceMode", "ParallelInference"]
