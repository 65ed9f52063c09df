"""kit.prose.accuracy_difference writes its counts as every table prints them: with thousands
separators (chapter 8's Fashion-MNIST sentence read "1442 of 2000" beside a line that said "2,000
test")."""

import re

from kit.measurement.prose import accuracy_difference


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
