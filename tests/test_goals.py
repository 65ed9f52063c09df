"""kit.goals (re-exported by kit.measure): a goal line's verdict, its figure's digits, the interval
that holds a median of repeats and its stated coverage."""

import math
import statistics

import numpy as np
import pytest

from kit import measure


def test_goal_says_met_or_not_with_the_figure():
    assert measure.goal("added per op", 1.3, "<=", 2, "us") == "added per op: 1.3 us -> met (goal <= 2 us)"
    assert "NOT met" in measure.goal("overhead", 3.5, "<=", 2, "%")
    # 3 significant figures, more where they would print a missed goal as its own bound
    assert measure.goal("added", 1.504, "<=", 1.5, "us") == "added: 1.504 us -> NOT met (goal <= 1.5 us)"
    assert measure.goal("added", 1.23456, "<=", 2, "us") == "added: 1.23 us -> met (goal <= 2 us)"
    assert "unreliable" in measure.goal("x", 1, "<", 2, reliable=False)
    with pytest.raises(ValueError, match="op"):
        measure.goal("x", 1, "==", 1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 9, 11, 21])
def test_the_median_interval_holds_the_median_with_the_coverage_it_states(n):
    """Order statistics k and n+1-k hold the median with probability 1 - 2 P(Binomial(n, 1/2) < k):
    the stated coverage is that figure, at least 90 % where n allows, and the narrowest such pair."""
    values = [float(v) for v in np.random.default_rng(n).permutation(n)]  # 0 .. n-1, shuffled
    lo, hi, coverage = measure.median_interval(values)
    k = int(lo) + 1  # lo is the k-th lowest value
    assert hi == n - k and lo <= statistics.median(values) <= hi
    assert coverage == pytest.approx(1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n)
    narrower = 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    assert coverage >= 0.9 or k == 1  # too few values for 90 %: the whole range
    assert k + 1 > n // 2 or narrower < 0.9  # the next pair inward would fall short of 90 %


def test_a_goal_from_repeats_gives_no_verdict_where_its_interval_straddles_the_limit():
    straddling = measure.goal("r", 1.02, "<=", 1.03, "x", repeats=[0.99, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05])
    assert "(its median within 0.99-1.05 x, 98%)" in straddling and "not shown either way" in straddling
    assert "-> met" in measure.goal("r", 1.0, "<=", 1.03, "x", repeats=[0.98, 0.99, 1.0, 1.01, 1.02])
    assert "-> NOT met" in measure.goal("r", 1.1, "<=", 1.03, "x", repeats=[1.05, 1.08, 1.1, 1.12, 1.2])
    straddle = "within the spread: not shown either way"
    cases = [(1.01, (1.0, 1.02), "met"), (1.06, (1.04, 1.1), "NOT met"), (1.02, (1.0, 1.1), straddle)]
    cases.append((1.01, None, "met"))
    for value, interval, want in cases:
        assert measure.goal_verdict(value, "<=", 1.03, interval) == want
    with pytest.raises(ValueError, match="one of"):
        measure.goal_verdict(1.0, "=<", 1.0)
    with pytest.raises(ValueError, match="one of"):  # the op is refused first, whatever else is wrong
        measure.goal("r", 1.0, "=<", 1.0, repeats=[])
    # a figure on one side and every repeat on the other (a median over ops of medians over repeats
    # against the medians over ops taken repeat by repeat): nothing shown either way
    assert measure.goal_verdict(3.0, "<=", 2, (1.0, 1.0)) == straddle
    assert measure.goal_verdict(1.0, ">=", 2, (3.0, 3.5)) == straddle
