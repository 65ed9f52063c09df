"""kit.prose: sentences from measurements never claim what the measurement cannot carry."""

import math
import re

import numpy as np
import pytest

from kit.measurement.measure import SPREAD_LIMIT, Timing
from kit.measurement.prose import Sentence, accuracy_difference, compare_timings, flags, fraction, mcnemar_p, sentence

FAST = Timing("fast", [0.010, 0.0101, 0.0099], 10)
SLOW = Timing("slow", [0.020, 0.0201, 0.0199], 10)


def test_a_direction_only_from_clean_separate_timings_in_either_order():
    for a, b in ((FAST, SLOW), (SLOW, FAST)):
        text = compare_timings(a, b)
        assert "**fast** took 10 ms per call and **slow** 20 ms: fast was 2x faster" in text
    assert isinstance(text, Sentence) and text._repr_markdown_() == str(text)


@pytest.mark.parametrize(
    "flagged",
    [
        Timing("slow", [0.020, 0.020, 0.020], 10, load=0.5),  # a busy machine
        Timing("slow", [0.010, 0.020, 0.030], 10),  # a wide spread
        Timing("slow", [0.020, 0.020, 0.020], 10, extra_warnings=["speedup 3x exceeds the 2 device(s)"]),
    ],
    ids=["load", "spread", "speedup"],
)
def test_a_flagged_timing_gives_no_direction(flagged):
    assert flagged.warnings  # the premise: kit.measure flags it
    text = compare_timings(FAST, flagged)
    assert text.startswith("No conclusion can be drawn from this run: slow: ")
    assert "faster" not in text and "slower" not in text
    assert flagged.warnings[0] in text


def test_overlapping_repeats_are_the_same_time():
    a = Timing("a", [0.0100, 0.0104, 0.0102], 10)
    b = Timing("b", [0.0103, 0.0106, 0.0105], 10)
    assert max(a.spread, b.spread) < SPREAD_LIMIT
    text = compare_timings(a, b)
    assert "the same within the spread of the repeats" in text and "faster" not in text


def test_no_repeats_is_an_error_naming_the_timing():
    with pytest.raises(ValueError, match="'empty' has no repeats"):
        compare_timings(FAST, Timing("empty", [], 1))


def test_fraction_keeps_small_shares_honest():
    assert fraction(0.055, 11.0) == "0.5%"  # not "a few percent"
    assert fraction(1, 3) == "33%"
    assert fraction(0, 5) == "0%"
    with pytest.raises(ValueError, match="whole is 0"):
        fraction(1, 0)


def test_mcnemar_exact_values():
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(3, 0) == pytest.approx(0.25)
    assert mcnemar_p(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_p(5, 5) == 1.0
    # symmetric, and a binomial tail: 2 * P(X <= 2), X ~ Bin(12, 1/2)
    assert mcnemar_p(2, 10) == mcnemar_p(10, 2) == pytest.approx(2 * sum(math.comb(12, i) for i in range(3)) / 4096)


def test_accuracy_noise_and_significance():
    n = 359
    a = np.ones(n, bool)
    b = a.copy()
    b[:3] = False
    noise = accuracy_difference(a, b, "A", "B")
    assert "3 of 359 examples apart, which is noise" in noise and "better" not in noise
    b[:40] = False
    real = accuracy_difference(a, b, "A", "B")
    assert "A is better by 40 of 359 examples" in real
    same = accuracy_difference(a, a, "A", "B")
    assert same.endswith("no difference.")
    with pytest.raises(ValueError, match=r"shapes \(359,\) and \(3,\)"):
        accuracy_difference(a, a[:3], "A", "B")


def test_sentence_is_markdown():
    s = sentence(f"measured {1 + 1} things")
    assert s == "measured 2 things" and s._repr_markdown_() == "measured 2 things"


def test_flags_name_each_warning_once_with_every_timing_it_applies_to():
    busy = [Timing(n, [0.01, 0.01, 0.01], 1, load=0.5) for n in ("a", "b", "c")]
    (only,) = flags(busy)
    assert only.startswith("a, b and c: machine busy: other processes used 50%")
    assert flags([FAST, SLOW]) == []
    text = compare_timings(*busy[:2])
    assert text.count("machine busy") == 1 and "a and b: machine busy" in text


def test_flags_name_timings_whose_names_are_numbers():
    """measure.compare names each Timing by its key, a number in chapter 4's frequency sweep."""
    from kit.measurement.measure import Timing

    noisy = [Timing(f, [1.0, 3.0, 2.0], 1) for f in (1, 2, 5)]
    assert flags(noisy) == ["1, 2 and 5: spread ±50% is wider than ±25%"]


def _bare_counts(text: str) -> list[str]:
    """Whole numbers of four digits or more written without a separator."""
    return re.findall(r"(?<![\d.,])\d{4,}(?![\d.,%])", text)


def test_every_count_in_every_branch_has_thousands_separators():
    n = 2000
    a = [True] * 1442 + [False] * (n - 1442)
    same = accuracy_difference(a, a, "A", "B")
    noise = accuracy_difference(a, [True] * 1441 + [False] * (n - 1441), "A", "B")
    real = accuracy_difference(a, [True] * 1200 + [False] * (n - 1200), "A", "B")
    assert "1,442 of 2,000 test examples" in same and same.endswith("no difference.")
    assert "1 of 2,000 examples apart" in noise and "noise" in noise
    assert "better by 242 of 2,000 examples" in real
    wide = accuracy_difference([True] * 12000 + [False] * 1000, [True] * 10000 + [False] * 3000, "A", "B")
    assert "better by 2,000 of 13,000 examples" in wide and "10,000 (76.9%)" in wide
    for text in (same, noise, real, wide):
        assert _bare_counts(text) == [], text
