"""The core: where an array's bytes live and how they get there.

    backend           NumPy or CuPy, chosen once per process; the default dtype
    devices           Device, LogicalDevice, placement per thread, `kit.devices()` (from
                      device_objects, device_rng, device_transfers and cpu_threads)
    context           which workspace new arrays go to on this thread
    memory            the one allocation door, its counters, the caching allocator (gc_window: periodic GC)
    shapes            shape and dtype rules every op follows
    arguments         the one rule for every count and real number a public call takes

Nothing here knows a workspace's arena or an NDArray: kit.workspaces and kit.arrays sit above.
Every name a reader uses is re-exported by `kit` (`kit.memory.count`, `kit.devices()`).
"""
