import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.parallel.threshold import (
    BITMAP_ENCODING,
    FLEXIBLE_ENCODING,
    AdaptiveThresholdAlgorithm,
    FixedThresholdAlgorithm,
    ResidualClippingPostProcessor,
    TargetSparsityThresholdAlgorithm,
    encoded_count,
    threshold_decode,
    threshold_encode,
)


@settings(max_examples=60, deadline=None)
@given(
    quarters=st.lists(st.integers(-12, 12), min_size=1, max_size=300),
    tau_quarters=st.integers(1, 6),
)
def test_encode_decode_round_trip_is_exact(quarters, tau_quarters):
    """With values on a grid of 1/4 nothing rounds: decoded + residual == original, exactly."""
    x = np.array(quarters, dtype=np.float32) / 4
    tau = tau_quarters / 4
    original = x.copy()
    message = threshold_encode(x, tau)
    decoded = np.zeros_like(x)
    if message is not None:
        threshold_decode(message, decoded)
    np.testing.assert_array_equal(decoded + x, original)
    passed = np.abs(original) >= tau
    assert encoded_count(message) == int(passed.sum())
    np.testing.assert_array_equal(decoded[passed], np.sign(original[passed]) * tau)  # one tau per step
    assert np.all(decoded[~passed] == 0)


def test_sparse_and_bitmap_formats():
    x = np.zeros(1600, dtype=np.float32)
    x[[3, 700]] = [1.0, -0.7]
    m = threshold_encode(x, 0.5)
    assert m[3] == FLEXIBLE_ENCODING and m[4:].tolist() == [4, -701] and m[1] == 1600
    dense = np.full(1600, 0.6, dtype=np.float32)  # everything passes: 1600 >= 1600/16 -> bitmap
    m = threshold_encode(dense, 0.5)
    assert m[3] == BITMAP_ENCODING and m.size == 4 + 100 and encoded_count(m) == 1600
    assert threshold_encode(np.zeros(10, np.float32), 0.5) is None


def test_residual_accumulates_until_it_passes_the_threshold():
    residual = np.zeros(4, dtype=np.float32)
    sent = np.zeros(4, dtype=np.float32)
    for _ in range(10):  # 0.125 per step, tau 0.5: one message every 4 steps
        residual += 0.125
        m = threshold_encode(residual, 0.5)
        if m is not None:
            threshold_decode(m, sent)
    np.testing.assert_array_equal(sent, [1.0] * 4)
    np.testing.assert_array_equal(residual, [0.25] * 4)


def test_decode_checks_its_input():
    with pytest.raises(ValueError, match="encodes 4 elements but the target has 3"):
        threshold_decode(threshold_encode(np.ones(4, np.float32), 0.5), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="tau must be"):
        threshold_encode(np.ones(3, np.float32), 0.0)


def test_adaptive_threshold_follows_dl4js_rule():
    algo = AdaptiveThresholdAlgorithm()
    d = 0.5 ** (1 / 20)
    assert algo.calculate_threshold(0, 0, None, None, None) == 1e-4
    assert algo.calculate_threshold(1, 0, 1e-3, False, 1e-3) == 1e-3  # within [1e-4, 1e-2]: keep
    assert algo.calculate_threshold(1, 0, 1e-3, False, 1e-5) == pytest.approx(1e-3 * d)  # too sparse
    assert algo.calculate_threshold(1, 0, 1e-3, False, 0.5) == pytest.approx(1e-3 / d)  # too dense
    assert algo.calculate_threshold(1, 0, 1e-3, True, None) == pytest.approx(1e-3 / d)  # dense = 1/16
    with pytest.raises(ValueError, match="decay_rate must be in"):
        AdaptiveThresholdAlgorithm(decay_rate=0.3)
    target = TargetSparsityThresholdAlgorithm()
    assert target.calculate_threshold(1, 0, 1e-3, False, 1e-2) == pytest.approx(1e-3 / d)
    assert FixedThresholdAlgorithm(0.01).calculate_threshold(5, 1, 0.2, True, 0.5) == 0.01


def test_residual_clipping_every_n_iterations():
    clip = ResidualClippingPostProcessor(2.0, 5)
    r = np.array([10.0, -10.0, 0.5], dtype=np.float32)
    clip.process_residual(3, 0, 1.0, r)
    assert r.tolist() == [10.0, -10.0, 0.5]
    clip.process_residual(5, 0, 1.0, r)
    assert r.tolist() == [2.0, -2.0, 0.5]
