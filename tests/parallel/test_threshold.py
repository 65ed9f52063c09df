import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kit.parallel.threshold import (
    BITMAP_ENCODING,
    FLEXIBLE_ENCODING,
    AdaptiveThresholdAlgorithm,
    FixedThresholdAlgorithm,
    ResidualClippingPostProcessor,
    TargetSparsityThresholdAlgorithm,
    encoded_count,
    floor_to_update,
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
    with pytest.raises(ValueError, match=r"threshold_encode\(tau=0.0\): must be a finite number in \(0, "):
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


def test_floor_to_update_raises_tau_to_a_multiple_of_the_largest_update_entry():
    update = np.array([0.5, -3.0, 0.25], np.float32)
    assert floor_to_update(1.0, update, 1.0) == 3.0  # raised to the largest |entry|
    assert floor_to_update(1.0, update, 0.5) == 1.5
    assert floor_to_update(4.0, update, 1.0) == 4.0  # already above: kept
    assert floor_to_update(1.0, update, None) == 1.0  # no floor: DL4J's threshold alone
    assert floor_to_update(1.0, np.zeros(3, np.float32), 1.0) == 1.0  # a skipped step moves nothing


# ---- DL4J's boundary: a cap on the elements one message carries (issue 13)


def test_boundary_caps_a_sparse_message_and_the_rest_stays_in_the_residual():
    x = np.zeros(16000, dtype=np.float32)  # 50 passing elements: sparse (below 16000/16)
    hot = np.arange(50) * 300 + 7
    x[hot] = np.where(np.arange(50) % 2 == 0, 0.75, -0.75)
    original = x.copy()
    m = threshold_encode(x, 0.5, boundary=20)
    assert m[3] == FLEXIBLE_ENCODING and m[0] == 20 and encoded_count(m) == 20
    np.testing.assert_array_equal(np.abs(m[4:]) - 1, hot[:20])  # the first 20 by index
    np.testing.assert_array_equal(x[hot[20:]], original[hot[20:]])  # untouched, sent later
    np.testing.assert_array_equal(np.abs(x[hot[:20]]), 0.25)
    counts = [encoded_count(threshold_encode(x, 0.5, boundary=20)) for _ in range(3)]
    assert counts == [20, 10, 0]
    np.testing.assert_array_equal(np.abs(x[hot]), 0.25)


def test_a_boundary_caps_every_message_bitmap_included():
    """threshold_encode(ones(1000), 1.0, boundary=100) sent a bitmap of all 1000 elements; ND4J's
    thresholdEncode caps its result at `boundary`. The density of what is sent picks the encoding."""
    x = np.ones(1000, dtype=np.float32)
    m = threshold_encode(x, 1.0, boundary=100)
    assert encoded_count(m) == 100
    assert m[3] == BITMAP_ENCODING  # 100 >= 1000/16: the bitmap is the smaller message
    decoded = np.zeros_like(x)
    threshold_decode(m, decoded)
    np.testing.assert_array_equal(np.flatnonzero(decoded), np.arange(100))  # the first 100 by index
    np.testing.assert_array_equal(x[:100], 0.0)
    np.testing.assert_array_equal(x[100:], 1.0)  # left in the residual for later messages
    dense = np.full(1600, 0.6, dtype=np.float32)
    m = threshold_encode(dense, 0.5, boundary=5)
    assert m[3] == FLEXIBLE_ENCODING and encoded_count(m) == 5 and m[0] == 5  # 5 < 1600/16: sparse
    m = threshold_encode(np.full(1600, 0.6, dtype=np.float32), 0.5)  # no boundary: every element
    assert m[3] == BITMAP_ENCODING and encoded_count(m) == 1600
    sparse = np.zeros(1600, dtype=np.float32)
    sparse[:99] = 0.6  # 99 < 1600/16: sparse, even with a boundary far above the density switch
    m = threshold_encode(sparse, 0.5, boundary=10_000)
    assert m[3] == FLEXIBLE_ENCODING and encoded_count(m) == 99 and m[0] == 10_000
    for bad in (0, -3, 2.5, True):
        with pytest.raises(
            ValueError, match=r"threshold_encode\(boundary=.*\): must be a whole number >= 1; leave it None"
        ):
            threshold_encode(np.ones(4, np.float32), 0.5, boundary=bad)


@settings(max_examples=80, deadline=None)
@given(
    quarters=st.lists(st.integers(-12, 12), min_size=1, max_size=400),
    tau_quarters=st.integers(1, 6),
    boundary=st.integers(1, 30),
)
@example(quarters=[12] * 5, tau_quarters=1, boundary=1)  # the most messages an element can need
def test_with_a_boundary_nothing_is_lost_and_no_message_exceeds_it(quarters, tau_quarters, boundary):
    """Encode until nothing passes: every message, sparse or bitmap, carries <= boundary
    elements, and what was decoded plus what is left equals the original, exactly."""
    x = np.array(quarters, dtype=np.float32) / 4
    tau = tau_quarters / 4
    original = x.copy()
    decoded = np.zeros_like(x)
    # each message moves at least one element by tau, and an element needs at most |q| / tau_quarters
    # <= 12 of them: 12 messages an element, then the call that finds nothing (the bound was
    # 10 per element + 10: [12] * 5 with tau 0.25 and boundary 1 needs 60 messages and a 61st call)
    for _ in range(12 * len(quarters) + 1):
        m = threshold_encode(x, tau, boundary=boundary)
        if m is None:
            break
        assert encoded_count(m) <= boundary
        threshold_decode(m, decoded)
    assert m is None and np.all(np.abs(x) < tau)
    np.testing.assert_array_equal(decoded + x, original)


def test_threshold_capacity_is_the_bitmap_message_length():
    """Chapter 4 explains "capacity 5" as the bitmap message's room in int32s: the 4-int header and
    n // 16 + 1 for the 2-bit codes (the message itself fills all of it or one less)."""
    from kit.parallel import threshold_encode

    for n in (6, 16, 40, 100):
        message = threshold_encode(np.full(n, 0.01, np.float32), tau=1e-3)
        assert message[3] == 1 and message[0] == 4 + n // 16 + 1 >= len(message) >= message[0] - 1
