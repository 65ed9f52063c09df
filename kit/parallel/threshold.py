"""Threshold encoding of updates (DL4J's SHARED_GRADIENTS), threshold algorithms, residual clipping.

    msg = threshold_encode(residual, tau)     # int32 message; residual keeps what was not sent
    threshold_decode(msg, update)             # update[i] += +-tau for each encoded index

Message format (libnd4j's): a 4-int header [capacity, length, tau as float32 bits, encoding]
followed by the payload. FLEXIBLE (sparse) encoding stores `+(i+1)` for `x[i] >= tau` and
`-(i+1)` for `x[i] <= -tau`; from length/16 passing elements on, BITMAP encoding, 2 bits per
element (0: nothing, 1: +tau, 2: -tau). Encoding subtracts what it sends from the residual in
place, so nothing is lost: it is sent once it has grown past tau. `boundary` (DL4J's) caps how many
elements one message carries; the others stay in the residual for a later message.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from kit.core import backend
from kit.core.arguments import real, whole
from kit.core.backend import RawArray, Xp

# tau travels as float32 bits in a message's header: a larger one is infinity there
TAU_MAX = float(np.finfo(np.float32).max)

__all__ = [
    "BITMAP_ENCODING",
    "FLEXIBLE_ENCODING",
    "AdaptiveThresholdAlgorithm",
    "FixedThresholdAlgorithm",
    "NoOpResidualPostProcessor",
    "ResidualClippingPostProcessor",
    "ResidualPostProcessor",
    "TargetSparsityThresholdAlgorithm",
    "ThresholdAlgorithm",
    "encoded_count",
    "floor_to_update",
    "threshold_decode",
    "threshold_encode",
]

FLEXIBLE_ENCODING = 0
BITMAP_ENCODING = 1
_SHIFTS = np.arange(16, dtype=np.uint32) * 2


def _float_bits(tau: float) -> int:
    return int(np.array([tau], dtype=np.float32).view(np.int32)[0])


def _bits_float(bits: int) -> float:
    return float(np.array([bits], dtype=np.int32).view(np.float32)[0])


def threshold_encode(residual: RawArray, tau: float, boundary: int | None = None) -> np.ndarray | None:
    """Encode the elements of `residual` (1-D, NumPy or CuPy) with |x| >= tau; subtract the
    encoded part from `residual` in place. Returns an int32 message (host), or None when no
    element reaches tau. A message carries at most `boundary` elements, in either encoding (the
    first ones by index; the rest stay in `residual`, as ND4J's thresholdEncode caps its result);
    when length/16 or more are sent, a bitmap carries them, else a sparse message."""
    _check_encode_args(tau, boundary)
    xp = _xp(residual)
    n = residual.size
    tau32 = float(np.float32(tau))
    pos = residual >= tau32
    neg = residual <= -tau32
    count = int(pos.sum()) + int(neg.sum())
    if count == 0:
        return None
    dense_from = max(1, n // 16)  # density decides the encoding (libnd4j's rule)
    step = residual.dtype.type(tau32)
    if boundary is not None and count > boundary:  # a message carries at most `boundary` elements
        keep = xp.flatnonzero(pos | neg)[boundary:]  # beyond the cap: left in the residual
        pos[keep] = False
        neg[keep] = False
        count = boundary
    if count >= dense_from:  # dense: a 2-bit code per element, every element sent
        body = _bitmap_body(residual, pos, neg, step, xp)
        header = [n // 16 + 5, n, _float_bits(tau32), BITMAP_ENCODING]
    else:
        body = _sparse_body(residual, pos, neg, step, xp)
        header = [dense_from if boundary is None else boundary, n, _float_bits(tau32), FLEXIBLE_ENCODING]
    return np.concatenate([np.asarray(header, dtype=np.int32), body])


def _check_encode_args(tau: float, boundary: int | None) -> None:
    """Refuse a tau that is not a finite number > 0 and a boundary that is not an integer >= 1."""
    real("threshold_encode", "tau", tau, 0, TAU_MAX, low_open=True, what=" (a float32 threshold)")
    if boundary is not None:
        whole("threshold_encode", "boundary", boundary, what="; leave it None for DL4J's default, length/16")


def _bitmap_body(residual: RawArray, pos: RawArray, neg: RawArray, step: np.floating, xp: Xp) -> np.ndarray:
    """The dense body: every element's 2-bit code (1: +tau, 2: -tau), 16 to an int32; the sent part subtracted."""
    n = residual.size
    residual -= pos * step
    residual += neg * step
    codes = pos.astype(xp.uint32) + neg.astype(xp.uint32) * 2
    padded = xp.zeros(-(-n // 16) * 16, dtype=xp.uint32)
    padded[:n] = codes
    packed = (padded.reshape(-1, 16) << xp.asarray(_SHIFTS)).sum(axis=1, dtype=xp.uint32)
    return _to_host(packed).view(np.int32)


def _sparse_body(residual: RawArray, pos: RawArray, neg: RawArray, step: np.floating, xp: Xp) -> np.ndarray:
    """The sparse body: each sent element's index + 1, negative for -tau; the sent part subtracted."""
    idx = xp.flatnonzero(pos | neg)
    up = pos[idx]
    residual[idx] -= xp.where(up, step, -step).astype(residual.dtype)
    return _to_host((idx + 1) * xp.where(up, 1, -1)).astype(np.int32)


def threshold_decode(message: np.ndarray, target: RawArray) -> None:
    """target[i] += +-tau for every index in the message (adds: messages sum)."""
    if message.dtype != np.int32 or message.size < 4:
        raise ValueError("threshold_decode: not an encoded message (int32 with a 4-int header)")
    _, n, bits, kind = (int(v) for v in message[:4])
    if target.size != n:
        raise ValueError(f"threshold_decode: the message encodes {n} elements but the target has {target.size}")
    tau = target.dtype.type(_bits_float(bits))
    xp = _xp(target)
    body = xp.asarray(message[4:])
    if kind == FLEXIBLE_ENCODING:
        idx = xp.abs(body) - 1
        target[idx] += xp.where(body > 0, tau, -tau).astype(target.dtype)  # indices are unique
    elif kind == BITMAP_ENCODING:
        codes = ((body.view(xp.uint32)[:, None] >> xp.asarray(_SHIFTS)) & 3).reshape(-1)[:n]
        target += (codes == 1) * tau
        target -= (codes == 2) * tau
    else:
        raise ValueError(f"threshold_decode: unknown encoding {kind}")


def encoded_count(message: np.ndarray | None) -> int:
    """How many elements a message moves (for sparsity ratios)."""
    if message is None:
        return 0
    if int(message[3]) == FLEXIBLE_ENCODING:
        return int(message.size - 4)
    codes = (message[4:].view(np.uint32)[:, None] >> _SHIFTS) & 3
    return int(np.count_nonzero(codes.reshape(-1)[: int(message[1])]))


def _xp(a: RawArray) -> Xp:
    if isinstance(a, np.ndarray):
        return np
    return backend.cupy()


def _to_host(a: RawArray) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.get()


def floor_to_update(tau: float, update: RawArray, multiple: float | None) -> float:
    """`tau`, raised where needed to `multiple` times the step's largest update entry (None: `tau`).
    A message moves an entry by one tau at most, so an entry whose steps are bigger than tau falls
    behind for good (its residual grows each step, the rate capped at tau a step); at least its
    largest step, no entry falls behind. kit's SharedTrainingMaster (DL4J has no such floor)."""
    if multiple is None or update.size == 0:
        return tau
    return max(tau, multiple * float(_xp(update).abs(update).max()))


# ---------------------------------------------------------------------------------------
# threshold algorithms (DL4J's, with their defaults)


class ThresholdAlgorithm:
    def calculate_threshold(
        self,
        iteration: int,
        epoch: int,
        last_threshold: float | None,
        last_was_dense: bool | None,
        last_sparsity: float | None,
    ) -> float:
        raise NotImplementedError

    def clone(self) -> ThresholdAlgorithm:
        return type(self)(**self.__dict__)

    def _steered(self, last: float | None, dense: bool | None, sparsity: float | None, lo: float, hi: float) -> float:
        """tau kept while the last sparsity is within [lo, hi] (a dense step counts as 1/16); too
        sparse: tau *= decay, too dense: tau /= decay; the first step: the initial threshold."""
        if last is None:
            return self.initial_threshold
        sparsity = 1 / 16 if dense else (sparsity or 0.0)
        if sparsity < lo:
            return last * self.decay_rate
        return last / self.decay_rate if sparsity > hi else last


class FixedThresholdAlgorithm(ThresholdAlgorithm):
    def __init__(self, threshold: float = 1e-3) -> None:
        self.threshold = real("FixedThresholdAlgorithm", "threshold", threshold, 0, TAU_MAX, low_open=True)

    def calculate_threshold(self, iteration, epoch, last_threshold, last_was_dense, last_sparsity):
        return self.threshold


class AdaptiveThresholdAlgorithm(ThresholdAlgorithm):
    """Keep tau while the last sparsity is within [min_target, max_target] (`_steered`)."""

    def __init__(
        self,
        initial_threshold: float = 1e-4,
        min_target_sparsity: float = 1e-4,
        max_target_sparsity: float = 1e-2,
        decay_rate: float = 0.5 ** (1 / 20),
    ) -> None:
        initial_threshold = real("AdaptiveThresholdAlgorithm", "initial_threshold", initial_threshold, 0, TAU_MAX, True)
        if not 0 < min_target_sparsity < max_target_sparsity <= 1:
            raise ValueError(
                f"AdaptiveThresholdAlgorithm: need 0 < min_target_sparsity ({min_target_sparsity}) < "
                f"max_target_sparsity ({max_target_sparsity}) <= 1"
            )
        if not 0.5 <= decay_rate < 1:
            raise ValueError(f"AdaptiveThresholdAlgorithm: decay_rate must be in [0.5, 1), got {decay_rate}")
        self.initial_threshold, self.min_target_sparsity = float(initial_threshold), float(min_target_sparsity)
        self.max_target_sparsity, self.decay_rate = float(max_target_sparsity), float(decay_rate)

    def calculate_threshold(self, iteration, epoch, last_threshold, last_was_dense, last_sparsity):
        lo, hi = self.min_target_sparsity, self.max_target_sparsity
        return self._steered(last_threshold, last_was_dense, last_sparsity, lo, hi)


class TargetSparsityThresholdAlgorithm(ThresholdAlgorithm):
    def __init__(
        self, initial_threshold: float = 1e-4, sparsity_target: float = 1e-3, decay_rate: float = 0.5 ** (1 / 20)
    ) -> None:
        where = "TargetSparsityThresholdAlgorithm"
        self.initial_threshold = real(where, "initial_threshold", initial_threshold, 0, TAU_MAX, low_open=True)
        self.sparsity_target = real(where, "sparsity_target", sparsity_target, 0, 1 / 16, True, True)
        self.decay_rate = real(where, "decay_rate", decay_rate, 0.5, 1, high_open=True)

    def calculate_threshold(self, iteration, epoch, last_threshold, last_was_dense, last_sparsity):
        target = self.sparsity_target
        return self._steered(last_threshold, last_was_dense, last_sparsity, target, target)


class ResidualPostProcessor(Protocol):
    """What SHARED_GRADIENTS calls after each encoding: it may change the residual in place."""

    def process_residual(self, iteration: int, epoch: int, last_threshold: float, residual: RawArray) -> None: ...


class NoOpResidualPostProcessor:
    def process_residual(self, iteration: int, epoch: int, last_threshold: float, residual: RawArray) -> None:
        pass


class ResidualClippingPostProcessor:
    """Every `frequency` iterations (iteration > 0), clip the residual to [-C tau, C tau]."""

    def __init__(self, threshold_multiple_clip_value: float = 5.0, frequency: int = 5) -> None:
        where = "ResidualClippingPostProcessor"
        self.clip = real(where, "threshold_multiple_clip_value", threshold_multiple_clip_value, 1)
        self.frequency = whole(where, "frequency", frequency)

    def process_residual(self, iteration: int, epoch: int, last_threshold: float, residual: RawArray) -> None:
        if iteration > 0 and iteration % self.frequency == 0:
            bound = self.clip * last_threshold
            _xp(residual).clip(residual, -bound, bound, out=residual)
