"""Arrays: NDArray and the functions that make and combine them.

    ndarray             NDArray, the thin wrapper over one NumPy/CuPy array (`wrap` builds every one);
                        its rooms: ndarray_operators, ndarray_host, ndarray_views, ndarray_copies
    creation            zeros, ones, randn, array, asarray ... (`kit.zeros`)
    ops                 concatenate, stack, where, maximum, minimum
    checks              finiteness and argument checks every path that refuses NaN makes

Built on kit.core and kit.workspaces; every public name is re-exported by `kit`.
"""
