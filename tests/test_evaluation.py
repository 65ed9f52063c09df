import numpy as np
import pytest

from kit.evaluation import ROC, Evaluation


def onehot(idx, n):
    return np.eye(n)[np.asarray(idx)]


def test_confusion_accuracy_and_macro_rules():
    ev = Evaluation(3)
    actual = [0, 0, 1, 1, 2, 2]
    predicted = [0, 1, 1, 1, 0, 0]  # class 2 never predicted: precision 0/0, excluded
    ev.eval(onehot(actual, 3), onehot(predicted, 3))
    assert ev.confusion.tolist() == [[1, 1, 0], [0, 2, 0], [2, 0, 0]]
    assert ev.accuracy() == pytest.approx(3 / 6)
    assert ev.precision() == pytest.approx((1 / 3 + 2 / 3) / 2)  # mean over classes 0, 1 only
    assert ev.recall() == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert ev.excluded("precision") == 1
    text = ev.stats()
    assert "(1 class excluded from average)" in text and "never predicted" in text
    assert "Confusion matrix format: Actual (rowClass) predicted as (columnClass) N times" in text


def test_binary_reports_the_positive_class():
    ev = Evaluation(2)
    ev.eval(np.array([1, 1, 1, 0, 0]), onehot([1, 0, 1, 1, 0], 2))
    assert ev.precision() == pytest.approx(2 / 3) and ev.recall() == pytest.approx(2 / 3)
    assert ev.f1() == pytest.approx(2 / 3)
    assert "positive class (class 1) only" in ev.stats()


def test_evaluation_errors():
    ev = Evaluation(3)
    with pytest.raises(ValueError, match="no data"):
        ev.accuracy()
    with pytest.raises(ValueError, match=r"label 5 at index 1 is out of range for 3 classes"):
        ev.eval(np.array([0, 5]), onehot([0, 1], 3))
    with pytest.raises(ValueError, match="do not match"):
        ev.eval(np.array([0, 1]), np.zeros((2, 4)))


def mann_whitney_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_roc_auc_is_exact_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300) * 0.5 + y * 0.3, 2)  # many ties
    roc = ROC()
    roc.eval(y, s)
    assert roc.calculate_auc() == pytest.approx(mann_whitney_auc(y, s), abs=1e-12)
    fpr, tpr = roc.roc_curve()
    assert fpr[0] == 0 and tpr[-1] == 1 and np.all(np.diff(fpr) >= 0)


def test_roc_multiclass_one_vs_all():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 200)
    p = rng.random((200, 3)) + onehot(y, 3) * 0.5
    roc = ROC()
    roc.eval(onehot(y, 3), p)
    for c in range(3):
        assert roc.calculate_auc(c) == pytest.approx(mann_whitney_auc((y == c).astype(int), p[:, c]))
    assert "Average AUC" in roc.stats()
    with pytest.raises(ValueError, match="give a class"):
        roc.calculate_auc()


def test_roc_needs_both_classes():
    roc = ROC()
    roc.eval(np.ones(5, dtype=int), np.linspace(0, 1, 5))
    with pytest.raises(ValueError, match="5 positives, 0 negatives"):
        roc.calculate_auc()
