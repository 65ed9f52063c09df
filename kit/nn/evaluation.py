"""Evaluation (accuracy, precision, recall, F1, confusion matrix) and ROC (exact AUC).

    >>> import numpy as np
    >>> from kit.nn.evaluation import ROC, Evaluation
    >>> labels = np.array([0, 1, 2, 2, 1, 0])                  # class indices, or one-hot rows
    >>> probabilities = np.array([[.8, .1, .1], [.2, .7, .1], [.1, .2, .7], [.3, .4, .3], [.1, .8, .1], [.6, .3, .1]])
    >>> ev = Evaluation(3); ev.eval(labels, probabilities); print(ev.stats())
    ========================Evaluation Metrics========================
     # of classes:    3
     Accuracy:        0.8333
     Precision:       0.8889
     Recall:          0.8333
     F1 Score:        0.8222
    Precision, recall & F1: macro-averaged (equally weighted avg. of 3 classes)
    =========================Confusion Matrix=========================
       0  1  2
    -----------
       2  0  0 | 0 = 0
       0  2  0 | 1 = 1
       0  1  1 | 2 = 2
    <BLANKLINE>
    Confusion matrix format: Actual (rowClass) predicted as (columnClass) N times
    ==================================================================
    >>> roc = ROC(); roc.eval(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])); roc.calculate_auc()
    0.75

DL4J's rules: with two classes precision/recall/F1 are the positive class's (1); otherwise macro
averages, excluding classes where the metric is 0/0 (stats() says how many). ROC is exact (DL4J's
thresholdSteps = 0); on more than two classes one-vs-all; one probability column is binary.

Labels follow kit.labels' one rule (class indices or exactly one-hot rows; anything else is refused,
naming the row); soft labels are scored only after labels.argmax(axis=1). Predictions with NaN or
infinity are refused before anything is recorded. With no data every metric raises; stats() says so.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kit.arrays.checks import check_finite
from kit.arrays.ndarray import NDArray
from kit.core.arguments import whole
from kit.data.labels import class_indices

__all__ = ["ROC", "Evaluation"]


def _host(x: ArrayLike | NDArray) -> np.ndarray:
    return x.numpy() if isinstance(x, NDArray) else np.asarray(x)


def _check_finite(what: str, values: np.ndarray, where: str) -> None:
    """Refuse NaN/infinity, naming how many and the first row (`where`: the class name)."""
    then = "; nothing was recorded. A diverged model gives NaN outputs: check its score, or drop those rows"
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in the probe's sum: the error says it
        check_finite(values, what, where=where, then=then, per_row=True)


def _class(where: str, cls: object, num_classes: int) -> int:
    """A class index in [0, num_classes): -1 is no "last class" here, True no class 1."""
    return whole(where, "cls", cls, 0, num_classes - 1, what=f" (a class of {num_classes})")


class Evaluation:
    def __init__(self, num_classes: int, labels: list[str] | None = None) -> None:
        self.num_classes = num_classes = whole("Evaluation", "num_classes", num_classes, 2, what=" (classes)")
        self.label_names = list(labels) if labels else [str(i) for i in range(num_classes)]
        self.confusion = np.zeros((num_classes, num_classes), dtype=np.int64)  # [actual, predicted]

    def eval(self, labels: ArrayLike | NDArray, predictions: ArrayLike | NDArray) -> None:
        y, p = class_indices(_host(labels), self.num_classes, where="Evaluation"), _host(predictions)
        if p.ndim != 2 or p.shape[1] != self.num_classes or p.shape[0] != y.shape[0]:
            raise ValueError(
                f"predictions of shape {p.shape} do not match {y.shape[0]} labels x {self.num_classes} classes"
            )
        _check_finite("predictions", p, "Evaluation")
        np.add.at(self.confusion, (y, p.argmax(axis=1)), 1)

    def merge(self, other: Evaluation) -> None:
        """Add `other`'s counts to this one's (DL4J's merge): both must count the same classes under
        the same names; otherwise nothing changes and the error names both."""
        if not isinstance(other, Evaluation):
            raise TypeError(f"Evaluation.merge: got {type(other).__name__}; merge another Evaluation")
        if other.num_classes != self.num_classes:
            raise ValueError(
                f"Evaluation.merge: this evaluation counts {self.num_classes} classes, the other "
                f"{other.num_classes}; merge evaluations of the same network (Evaluation({self.num_classes}))"
            )
        if other.label_names != self.label_names:
            raise ValueError(
                f"Evaluation.merge: label names {self.label_names} here, {other.label_names} in the other; "
                "merge evaluations made with the same labels"
            )
        self.confusion += other.confusion

    def reset(self) -> None:
        self.confusion[:] = 0

    @property
    def n(self) -> int:
        return int(self.confusion.sum())

    def _require_data(self, metric: str) -> None:
        if self.n == 0:
            raise ValueError(f"{metric}: no data has been evaluated; call eval(labels, predictions) first")

    def accuracy(self) -> float:
        self._require_data("accuracy")
        return float(np.trace(self.confusion)) / self.n

    def _per_class(self, which: str) -> np.ndarray:
        tp = np.diag(self.confusion).astype(np.float64)
        denom = self.confusion.sum(axis=0 if which == "precision" else 1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denom > 0, tp / np.where(denom > 0, denom, 1), np.nan)  # nan marks 0/0

    def precision(self, cls: int | None = None) -> float:
        return self._metric("precision", cls)

    def recall(self, cls: int | None = None) -> float:
        return self._metric("recall", cls)

    def f1(self, cls: int | None = None) -> float:
        self._require_data("f1")
        if cls is None and self.num_classes == 2:
            cls = 1
        if cls is not None:
            p, r = self.precision(cls), self.recall(cls)
            return 0.0 if p + r == 0 else 2 * p * r / (p + r)
        p, r = self._per_class("precision"), self._per_class("recall")
        with np.errstate(invalid="ignore"):
            f = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0)
        f = np.where(np.isnan(p) | np.isnan(r), np.nan, f)
        return float(np.nanmean(f)) if np.any(~np.isnan(f)) else 0.0

    def _metric(self, which: str, cls: int | None) -> float:
        self._require_data(which)
        values = self._per_class(which)
        if cls is None and self.num_classes == 2:
            cls = 1  # DL4J: binary metrics are for the positive class
        if cls is not None:
            v = values[_class(which, cls, self.num_classes)]
            return 0.0 if np.isnan(v) else float(v)
        return float(np.nanmean(values)) if np.any(~np.isnan(values)) else 0.0

    def excluded(self, which: str) -> int:
        return int(np.isnan(self._per_class(which)).sum())

    def stats(self) -> str:
        """DL4J's report: accuracy, precision, recall and F1, and the confusion matrix up to 20 classes."""
        if self.n == 0:  # DL4J's words: a report, not an exception
            return "Evaluation: No data available (no evaluation has been performed)"
        lines = [
            "========================Evaluation Metrics========================",
            f" # of classes:    {self.num_classes}",
            f" Accuracy:        {self.accuracy():.4f}",
            *self._average_lines(),
        ]
        if self.num_classes <= 20:
            lines += self._confusion_lines()
        lines.append("==================================================================")
        return "\n".join(lines)

    def _average_lines(self) -> list[str]:
        """Precision, recall and F1 (the positive class's, or macro-averaged), with the classes left out."""
        binary = self.num_classes == 2
        lines = []
        for name, value, which in (
            ("Precision", self.precision(), "precision"),
            ("Recall", self.recall(), "recall"),
            ("F1 Score", self.f1(), None),
        ):
            note = ""
            if which and not binary and self.excluded(which):
                note = (
                    f"\t({self.excluded(which)} class{'es' if self.excluded(which) > 1 else ''} excluded from average)"
                )
            lines.append(f" {name + ':':17s}{value:.4f}{note}")
        if binary:
            lines.append("Precision, recall & F1: reported for positive class (class 1) only")
        else:
            lines.append(
                f"Precision, recall & F1: macro-averaged (equally weighted avg. of {self.num_classes} classes)"
            )
        never = self.excluded("precision")
        if never and not binary:
            lines.append(
                f"Warning: {never} class{'es were' if never > 1 else ' was'} never predicted by the model and "
                f"{'were' if never > 1 else 'was'} excluded from average precision"
            )
        return lines

    def _confusion_lines(self) -> list[str]:
        """The confusion matrix, a row an actual class, a column a predicted one."""
        width = max(3, len(str(int(self.confusion.max()))) + 1)
        lines = ["=========================Confusion Matrix========================="]
        lines.append(" " + "".join(f"{i:>{width}d}" for i in range(self.num_classes)))
        lines.append("-" * (width * self.num_classes + 2))
        for i, row in enumerate(self.confusion):
            lines.append(" " + "".join(f"{v:>{width}d}" for v in row) + f" | {i} = {self.label_names[i]}")
        lines.append("\nConfusion matrix format: Actual (rowClass) predicted as (columnClass) N times")
        return lines


class ROC:
    """Exact ROC / AUC. Binary: labels (N,) or (N, 1) in {0,1} or one-hot (N, 2); scores for
    class 1 as (N,) or (N, 1) (one sigmoid output), or (N, 2) probabilities. Multi-class
    (one-vs-all): class indices or one-hot labels and (N, C) probabilities. Labels by
    kit.labels' rule: soft (probability) labels are refused, not rounded."""

    def __init__(self) -> None:
        self._labels: list[np.ndarray] = []
        self._scores: list[np.ndarray] = []

    def eval(self, labels: ArrayLike | NDArray, predictions: ArrayLike | NDArray) -> None:
        p = _host(predictions).astype(np.float64)
        _check_finite("predictions", p, "ROC")
        if p.ndim == 2 and p.shape[1] == 1:  # one sigmoid output: the probability of class 1
            p = p[:, 0]
        if p.ndim == 1:
            p = np.stack([1 - p, p], axis=1)
        if p.ndim != 2:
            raise ValueError(f"ROC: predictions of shape {p.shape}; give (N,), (N, 1) or (N, C) probabilities")
        y = np.eye(p.shape[1])[class_indices(_host(labels), p.shape[1], where="ROC")]
        if y.shape != p.shape:
            raise ValueError(f"ROC: labels of shape {y.shape} do not match predictions of shape {p.shape}")
        if self._scores and self._scores[0].shape[1] != p.shape[1]:
            raise ValueError(f"ROC: {p.shape[1]} columns now, {self._scores[0].shape[1]} before")
        self._labels.append(y.astype(np.float64))
        self._scores.append(p)

    def partial(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """What this ROC has evaluated, (one-hot labels, scores) per eval() call: the part a Spark
        partition sends back, for the driver's ROC to take in with `merge_partial`."""
        return list(self._labels), list(self._scores)

    def merge_partial(self, labels: list[np.ndarray], scores: list[np.ndarray]) -> None:
        """Take in another ROC's `partial()`: its rows come after this one's. Every part must have
        this ROC's number of columns (classes), its labels the shape of its scores; otherwise
        nothing is taken in and the error says which."""
        widths = {s.shape[1] for s in scores if s.ndim == 2}
        if self._scores:
            widths.add(self._scores[0].shape[1])
        bad = [i for i, (y, s) in enumerate(zip(labels, scores)) if s.ndim != 2 or y.shape != s.shape]
        if len(labels) != len(scores) or bad or len(widths) > 1:
            here = f"{self._scores[0].shape[1]} columns" if self._scores else "no data yet"
            raise ValueError(
                f"ROC.merge: this ROC has {here}; the parts merged have scores of shapes "
                f"{[s.shape for s in scores]} and labels of shapes {[y.shape for y in labels]}: a ROC takes rows of "
                "one width (its classes), labels as one-hot rows of the scores' shape; use a new ROC() per network"
            )
        self._labels.extend(labels)
        self._scores.extend(scores)

    def merge(self, other: ROC) -> None:
        """Take in another ROC's rows (DL4J's merge), after this one's; the same checks as merge_partial."""
        if not isinstance(other, ROC):
            raise TypeError(f"ROC.merge: got {type(other).__name__}; merge another ROC")
        self.merge_partial(*other.partial())

    @property
    def num_classes(self) -> int:
        if not self._scores:
            raise ValueError("ROC: no data has been evaluated")
        return self._scores[0].shape[1]

    def calculate_auc(self, cls: int | None = None) -> float:
        """AUC for `cls` vs the rest; binary default: class 1."""
        if cls is None:
            if self.num_classes != 2:
                raise ValueError("calculate_auc(): give a class, or use calculate_average_auc() for several classes")
            cls = 1
        cls = _class("calculate_auc", cls, self.num_classes)
        y = np.concatenate(self._labels)[:, cls]
        s = np.concatenate(self._scores)[:, cls]
        return _exact_auc(y, s)

    def calculate_average_auc(self) -> float:
        return float(np.mean([self.calculate_auc(c) for c in range(self.num_classes)]))

    def roc_curve(self, cls: int = 1) -> tuple[np.ndarray, np.ndarray]:
        cls = _class("roc_curve", cls, self.num_classes)
        y = np.concatenate(self._labels)[:, cls]
        s = np.concatenate(self._scores)[:, cls]
        return _curve(y, s)

    def stats(self) -> str:
        if not self._scores:  # DL4J's words: a report, not an exception
            return "ROC: No data available (no data has been performed)"
        if self.num_classes == 2:
            return f"AUC (Area under ROC Curve): {self.calculate_auc():.4f}"
        lines = [f"AUC class {c} vs rest: {self.calculate_auc(c):.4f}" for c in range(self.num_classes)]
        lines.append(f"Average AUC: {self.calculate_average_auc():.4f}")
        return "\n".join(lines)


def _curve(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates at every distinct threshold (highest first), ties grouped."""
    pos, neg = y.sum(), len(y) - y.sum()
    if pos == 0 or neg == 0:
        raise ValueError(f"ROC needs both classes present: {int(pos)} positives, {int(neg)} negatives")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # end of each group of equal scores
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    return np.r_[0.0, fp / neg], np.r_[0.0, tp / pos]


def _exact_auc(y: np.ndarray, s: np.ndarray) -> float:
    fpr, tpr = _curve(y, s)
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
