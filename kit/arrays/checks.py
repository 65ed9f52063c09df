"""Finiteness: the one check every kit path that refuses NaN or infinity makes, and its wording.

    >>> import numpy as np
    >>> from kit.arrays.checks import all_finite, check_finite
    >>> x = np.zeros((4, 6), np.float32)
    >>> all_finite(x)
    True
    >>> x[2, 5] = np.nan
    >>> check_finite(x, "features")
    Traceback (most recent call last):
    ValueError: features contain NaN or infinity (1 values; first at index [2, 5])
    >>> check_finite(x, "predictions", where="Evaluation", per_row=True)
    Traceback (most recent call last):
    ValueError: Evaluation: predictions contain NaN or infinity (1 values in 1 rows; first at row 2)

`all_finite` is the cheap probe (a reduction or two, run on every training step: its comments say
which and why); only a non-finite result pays for the element-wise test that settles it.
`check_finite` names how many values are bad and where the first one is (an index, or with
`per_row` the row: an example). Both take raw NumPy or CuPy arrays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from kit.core.shapes import accumulator

if TYPE_CHECKING:
    from kit.core.backend import RawArray

__all__ = ["all_finite", "check_cast", "check_finite", "narrow_remedy"]


def _host(raw: RawArray) -> np.ndarray:
    return raw if isinstance(raw, np.ndarray) else raw.get()  # CuPy: to the host, for the search only


_sum, _max, _min = np.add.reduce, np.maximum.reduce, np.minimum.reduce
_vdot = np.vdot
_DOT_MAX = 4096  # OpenBLAS runs a dot of up to 10,000 values on the calling thread


def all_finite(raw: RawArray) -> bool:
    """True when no value of `raw` (a NumPy or CuPy array) is NaN or infinite."""
    dtype = raw.dtype
    if dtype.kind != "f":
        return dtype.kind != "c" or bool(np.isfinite(_host(raw)).all())
    # NumPy: the ufunc's own reduce, without np.sum's Python wrapper (3 us on a small batch); this
    # runs on every training step and every planned answer.
    # (np.dot(flat, flat) on a whole training batch is faster still, but a BLAS call that large on
    # every step starves other threads of this process: save() from another thread took seconds)
    # (no np.errstate here: it costs more than the sum of a small batch; callers that expect
    # infinities, such as a loss-scaled step, silence the warnings around the call)
    # (the accumulator named only for float16: naming a dtype, even the array's own, costs 1 us more)
    if raw.__class__ is np.ndarray:
        if raw.size <= _DOT_MAX and dtype.itemsize > 2 and raw.flags.c_contiguous:
            # a small batch (one example at inference): the sum of squares, BLAS's one-thread dot,
            # is 1 us cheaper than a reduce; a square overflows sooner, and the exact test settles it
            total = _vdot(raw, raw)
        else:  # no overflow here: the extremes of finite values are finite
            return math.isfinite(_max(raw, None)) and math.isfinite(_min(raw, None))
    else:
        total = raw.sum(dtype=accumulator(dtype))
    if math.isfinite(total):
        return True
    return bool(np.isfinite(_host(raw)).all())  # an overflowing sum of finite values is finite


def check_finite(raw: RawArray, what: str, where: str = "", then: str = "", per_row: bool = False) -> None:
    """Raise ValueError when `raw` holds NaN or infinity: "`where`: `what` contain NaN or infinity
    (n values; first at index [i, j])`then`"; with `per_row`, the rows counted and the first named."""
    if all_finite(raw):
        return
    host = _host(raw)
    bad = ~np.isfinite(host)
    prefix = f"{where}: " if where else ""
    if per_row:
        rows = np.flatnonzero(bad.reshape(len(host), -1).any(axis=1)) if host.ndim else np.array([0])
        found = f"{int(bad.sum())} values in {rows.size} rows; first at row {int(rows[0])}"
    else:
        first = np.argwhere(bad)[0] if host.ndim else ()
        found = f"{int(bad.sum())} values; first at index [{', '.join(str(int(i)) for i in first)}]"
    raise ValueError(f"{prefix}{what} contain NaN or infinity ({found}){then}")


def narrow_remedy(dtype: np.dtype, what: str = "features") -> str:
    """What to do about `what` that `dtype` cannot hold: scale them, or (where there is one) a
    wider dtype: float32 for float16, float64 for float32."""
    wider = {"float16": "float32", "float32": "float64"}.get(np.dtype(dtype).name)
    instead = f" or train a network of a wider dtype ({wider})" if wider else ""
    return f"; scale the {what} (divide by their largest value){instead}"


def check_cast(source: RawArray, cast: RawArray, what: str, remedy: str = "") -> None:
    """After casting `source` to `cast`'s narrower float dtype: raise ValueError when finite values
    became infinite because the dtype cannot hold them ("`what`: n finite values exceed float16's
    range ..."), so the error names the cause, not "NaN or infinity" the data never held."""
    if all_finite(cast) or not all_finite(source):
        return
    host, out = _host(source), _host(cast)
    bad = np.isinf(out) & np.isfinite(host)
    first = np.argwhere(bad)[0] if host.ndim else ()
    value = host[tuple(first)] if host.ndim else host
    limit = np.finfo(out.dtype).max
    raise ValueError(
        f"{what}: {int(bad.sum())} finite values exceed {out.dtype}'s range (largest {float(limit):g}); first at index "
        f"[{', '.join(str(int(i)) for i in first)}], {float(value):g}{remedy}"
    )
