import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.nn.evaluation import ROC, Evaluation


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


# ---- reliability (issue 13): non-finite predictions, one sigmoid column, no data


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_evaluation_refuses_non_finite_predictions_as_roc_does(bad):
    ev = Evaluation(3)
    ev.eval(onehot([0, 1], 3), onehot([0, 1], 3))
    p = np.full((5, 3), 1 / 3)
    p[3, 1] = bad
    p[4, 0] = bad
    msg = r"Evaluation: predictions contain NaN or infinity \(2 values in 2 rows; first at row 3\)"
    with pytest.raises(ValueError, match=msg):
        ev.eval(onehot([0, 1, 2, 0, 1], 3), p)
    assert ev.n == 2  # nothing recorded from the refused batch
    with pytest.raises(
        ValueError, match=r"ROC: predictions contain NaN or infinity \(2 values in 2 rows; first at row 3\)"
    ):
        ROC().eval(onehot([0, 1, 2, 0, 1], 3), p)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_evaluation_of_a_diverged_network_raises_instead_of_reporting_argmax_of_nan():
    from kit.nn import mlp

    net = mlp(4, hidden=(8,), n_out=3, seed=0)
    net.set_params(np.full(net.flat_params.shape, 1e30, dtype=np.float32))  # outputs overflow to NaN
    x = np.ones((6, 4), np.float32)
    assert np.isnan(net.output(x).numpy()).any()
    with pytest.raises(ValueError, match="Evaluation: predictions contain NaN or infinity"):
        Evaluation(3).eval(np.array([0, 1, 2, 0, 1, 2]), net.output(x))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    classes=st.integers(2, 6),
    spots=st.lists(
        st.tuples(st.integers(0, 39), st.integers(0, 5), st.sampled_from([np.nan, np.inf, -np.inf])), max_size=6
    ),
    seed=st.integers(0, 1000),
)
def test_any_non_finite_prediction_is_refused_with_its_count_and_first_row(n, classes, spots, seed):
    rng = np.random.default_rng(seed)
    p = rng.random((n, classes))
    y = rng.integers(0, classes, n)
    for r, c, v in spots:
        p[r % n, c % classes] = v
    bad = ~np.isfinite(p)
    ev = Evaluation(classes)
    if not bad.any():
        ev.eval(y, p)
        assert ev.n == n
        return
    first = int(np.flatnonzero(bad.any(axis=1))[0])
    with pytest.raises(
        ValueError, match=rf"\({int(bad.sum())} values in {int(bad.any(axis=1).sum())} rows; first at row {first}\)"
    ):
        ev.eval(y, p)
    assert ev.n == 0 and not ev.confusion.any()


def test_roc_with_one_sigmoid_column_is_binary():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 200)
    s = np.clip(rng.random(200) * 0.6 + y * 0.3, 0, 1)
    want = mann_whitney_auc(y, s)
    for labels in (y, y[:, None], onehot(y, 2)):
        roc = ROC()
        roc.eval(labels, s[:, None])  # (N, 1): one sigmoid output
        assert roc.num_classes == 2
        assert roc.calculate_auc() == pytest.approx(want, abs=1e-12)
        assert roc.stats().startswith("AUC (Area under ROC Curve): ")
    with pytest.raises(ValueError, match=r"ROC: label 2 at index 1 is out of range for 2 classes \(valid: 0\.\.1\)"):
        ROC().eval(np.array([0, 2, 1]), np.array([[0.1], [0.5], [0.9]]))


def test_an_empty_evaluation_raises_for_every_metric_and_stats_says_so():
    for ev in (Evaluation(2), Evaluation(4)):
        for metric in (ev.accuracy, ev.precision, ev.recall, ev.f1):
            with pytest.raises(ValueError, match=f"{metric.__name__}: no data has been evaluated"):
                metric()
        with pytest.raises(ValueError, match="precision: no data"):
            ev.precision(1)
        assert ev.stats() == "Evaluation: No data available (no evaluation has been performed)"
        ev.eval(np.array([0, 1]), onehot([0, 1], ev.num_classes))
        assert ev.precision() == 1.0 and "Accuracy:        1.0000" in ev.stats()
        ev.reset()
        with pytest.raises(ValueError, match="recall: no data"):
            ev.recall()
    roc = ROC()
    assert roc.stats() == "ROC: No data available (no data has been performed)"
    with pytest.raises(ValueError, match="no data has been evaluated"):
        roc.calculate_auc()


@pytest.mark.parametrize(
    ("other", "said"),
    [
        (lambda: Evaluation(4), "this evaluation counts 3 classes, the other 4"),
        (lambda: Evaluation(3, labels=["cat", "dog", "bird"]), r"label names \['0', '1', '2'\] here"),
        (lambda: "3 classes", "got str; merge another Evaluation"),
    ],
    ids=["class-count", "label-names", "not-an-evaluation"],
)
def test_merging_evaluations_of_other_classes_is_refused_and_changes_nothing(other, said):
    """DL4J's merge checks both; kit merged different names silently and failed on different
    counts with NumPy's broadcast message."""
    ev = Evaluation(3)
    ev.eval(np.array([0, 1, 2]), np.eye(3))
    before = ev.confusion.copy()
    theirs = other()
    if isinstance(theirs, Evaluation):
        theirs.eval(np.array([0]), np.eye(theirs.num_classes)[:1])
    with pytest.raises((ValueError, TypeError), match=said):
        ev.merge(theirs)
    np.testing.assert_array_equal(ev.confusion, before)
    same = Evaluation(3)
    same.eval(np.array([1]), np.eye(3)[1:2])
    ev.merge(same)
    assert ev.n == 4


@pytest.mark.parametrize(
    ("parts", "said"),
    [
        (lambda: ([np.eye(4)[:2]], [np.full((2, 4), 0.25)]), "this ROC has 3 columns"),  # another width
        (lambda: ([np.eye(3)[:2]], [np.full((3, 3), 0.3)]), "labels as one-hot rows of the scores' shape"),
        (lambda: ([np.eye(3)[:1], np.eye(2)[:1]], [np.full((1, 3), 0.3), np.full((1, 2), 0.5)]), "rows of one width"),
    ],
    ids=["width", "labels-vs-scores", "mixed-parts"],
)
def test_a_roc_takes_in_rows_of_its_own_width_only_and_stays_readable(parts, said):
    roc = ROC()
    roc.eval(np.array([0, 1, 2]), np.eye(3) * 0.8 + 0.05)
    auc = roc.calculate_average_auc()
    with pytest.raises(ValueError, match=said):
        roc.merge_partial(*parts())
    assert roc.calculate_average_auc() == auc  # still readable, unchanged
    other = ROC()
    other.eval(np.array([2, 0]), np.eye(3)[[2, 0]] * 0.8 + 0.05)
    roc.merge(other)
    assert roc.num_classes == 3 and len(np.concatenate(roc.partial()[0])) == 5
