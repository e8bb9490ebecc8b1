"""A filter cascade's band, chosen as LOTUS chooses its proxy thresholds (Patel et al., 2024,
"Semantic Operators"): run the small model on a labelled sample, and take the band [low, high]
that leaves the small model the most rows while its answers on those rows stay right at least
`target` of the time: yes above `high`, no below `low`. The labels may be the truth, or the large
model's answers (LOTUS's oracle). The rows inside the band go to the large model. No confidence
bound is applied: a bigger sample gives a band that holds better on the table."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    rows: int  # in the sample
    answered: int  # of them, the rows the small model answers
    correct: int  # of those, the rows it answers right

    @property
    def coverage(self) -> float:
        return self.answered / max(self.rows, 1)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.answered if self.answered else None


def decides(probs: list[float | None], low: float, high: float) -> bool:
    """Whether the small model is sure of a row: no P(yes) it computed lies inside [low, high]."""
    return all(p < low or p > high for p in probs if p is not None)


def band_for(probs: list[list[float]], labels: list[bool], target: float) -> Band:
    """probs: the small model's P(yes) of every sample row for every predicate (asked at threshold
    0, so that none is missing); labels: whether each row should pass.

    In the cascade the small model runs at threshold `low`: rewind stops at the first predicate
    below it (a sure no), and a row is sure when every P(yes) it computed lies outside [low, high].
    The band need not hold the filter's threshold, which is the large model's: a small model whose
    P(yes) is off scale can still rank well."""
    p, truth = np.asarray(probs, float), np.asarray(labels, bool)
    n, k = p.shape
    values = np.unique(p)
    # each candidate edge takes in one more row: low just above a value, high at one
    lows = np.unique(np.concatenate([[0.0], np.nextafter(values, 2.0)]))
    highs = np.unique(np.concatenate([[1.0], values]))
    best = Band(0.0, 1.0, n, 0, 0)
    for low in lows[lows <= 1.0]:
        below = p < low
        fails = below.any(axis=1)
        first_fail = np.where(fails, below.argmax(axis=1), k)
        # the lowest P(yes) asked before the first fail: above `high`, the row is sure (inf: it failed at once)
        before = np.where(np.arange(k)[None, :] < first_fail[:, None], p, np.inf).min(axis=1)
        right = ~fails == truth
        candidates = np.concatenate([[low], highs[highs > low]])
        sure = before[None, :] > candidates[:, None]  # highs x rows
        answered, correct = sure.sum(axis=1), (sure & right[None, :]).sum(axis=1)
        score = np.where(correct >= target * answered, answered * (n + 1) + correct, -1)
        i = int(np.argmax(score))  # the most rows answered, then the most right
        if score[i] >= 0 and (answered[i], correct[i]) > (best.answered, best.correct):
            best = Band(float(low), float(candidates[i]), n, int(answered[i]), int(correct[i]))
    return best
