"""Quality metrics: pure functions of numpy arrays (bench/tests/test_metrics.py checks them on cases
computed by hand), nan where undefined; and the two helpers that print and store them."""

import numpy as np
from numpy.typing import ArrayLike


def auc(scores: ArrayLike, truth: ArrayLike) -> float:
    """The probability that a true item scores above a false one, ties counting half (Mann-Whitney)."""
    scores, truth = np.asarray(scores, float), np.asarray(truth, bool)
    pos, neg = scores[truth], scores[~truth]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def f1(predicted: ArrayLike, truth: ArrayLike) -> float:
    """F1 of the positive class: 2TP / (2TP + FP + FN)."""
    predicted, truth = np.asarray(predicted, bool), np.asarray(truth, bool)
    tp = np.sum(predicted & truth)
    wrong = np.sum(predicted != truth)
    return float(2 * tp / (2 * tp + wrong)) if 2 * tp + wrong else float("nan")


def macro_f1(predicted: ArrayLike, truth: ArrayLike) -> float:
    """The mean of each label's F1 over the labels that occur in the truth or the predictions."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    labels = np.union1d(predicted, truth)
    return float(np.mean([f1(predicted == k, truth == k) for k in labels]))


def ece(confidence: ArrayLike, correct: ArrayLike, bins: int = 10) -> float:
    """Expected calibration error: sum over equal-width bins of |mean confidence - share correct|,
    weighted by the bin's share of the items. For a yes/no question, confidence = P(yes) and
    correct = the truth is yes."""
    confidence, correct = np.asarray(confidence, float), np.asarray(correct, float)
    if not len(confidence):
        return float("nan")
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return float(sum(abs(confidence[which == b].mean() - correct[which == b].mean()) * np.mean(which == b)
                     for b in range(bins) if np.any(which == b)))


def top1(p_yes: ArrayLike) -> tuple[float, float, float]:
    """(precision, recall, F1) of matching each left row to its highest-P(yes) right row, when the
    true match of left row i is right row i: precision = correct / predicted, recall = correct / rows."""
    p = np.asarray(p_yes, float)
    if not p.size:
        return float("nan"), float("nan"), float("nan")
    correct = int(np.sum(np.argmax(p, axis=1) == np.arange(len(p))))
    precision = recall = correct / len(p)  # every left row predicts exactly one match
    return precision, recall, (2 * precision * recall / (precision + recall) if correct else 0.0)


def filter_metrics(p_yes: ArrayLike, truth: ArrayLike) -> dict:
    p, truth = np.asarray(p_yes, float), np.asarray(truth, bool)
    return {"rows": len(p), "positives": int(truth.sum()), "said_yes": int(np.sum(p >= 0.5)),
            "accuracy": float(np.mean((p >= 0.5) == truth)), "f1": f1(p >= 0.5, truth), "auc": auc(p, truth),
            "ece": ece(p, truth)}


def classify_metrics(probabilities: ArrayLike, truth: ArrayLike) -> dict:
    probs, truth = np.asarray(probabilities, float), np.asarray(truth)
    predicted = np.argmax(probs, axis=1)
    confusion = np.zeros((probs.shape[1],) * 2, int)
    np.add.at(confusion, (truth, predicted), 1)
    return {"rows": len(probs), "accuracy": float(np.mean(predicted == truth)), "macro_f1": macro_f1(predicted, truth),
            "ece": ece(probs.max(axis=1), predicted == truth), "confusion": confusion.tolist()}


def join_metrics(p_yes: ArrayLike) -> dict:
    """p_yes[i][j]: left row i against right row j, whose true match is j == i."""
    p = np.asarray(p_yes, float)
    truth = np.eye(len(p), p.shape[1] if p.ndim == 2 else 0, dtype=bool)
    precision, recall, top1_f1 = top1(p)
    return {"left": len(p), "right": truth.shape[1], "auc": auc(p.ravel(), truth.ravel()),
            "pair_f1": f1(p.ravel() >= 0.5, truth.ravel()), "pairs_said_yes": int(np.sum(p >= 0.5)),
            "top1_precision": precision, "top1_recall": recall, "top1_f1": top1_f1}


def fmt(x: object) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:.3f}" if isinstance(x, float) else f"{x:,}"


def clean(x: object) -> object:
    """nan -> None, for JSON."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    return None if isinstance(x, float) and np.isnan(x) else x
