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
    >>> bool(np.allclose(np.concatenate([p.numpy() for p in probs]), net.output(x).numpy()))
    True

One request, room by room: `facade` (`ParallelInference`, its modes, the caller-thread checks, one
`timeout=` rule, `update_model`, `shutdown`); `engine` (the queue and back-pressure, batching, the
replica workers, recovery after a failed batch); `delivery` (the answer's way back to a blocking
caller, a `concurrent.futures.Future` or an asyncio loop, the copies between devices counted).

Every request is answered with its result or an error of its own: a wrong shape or dtype is refused
in the caller's thread; a failed batch is split so that only the guilty request fails (DL4J hangs,
dl4j#4813). `shutdown()`, or dropping the last reference, answers every waiting request and joins
every thread. A blocked caller thread costs a GIL turn per answer (`python -m kit bench parallel`),
so `submit` (a Future) and `await output_async(x)` keep many requests in flight without a thread each.

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
