"""What a uniform sample drawn without replacement says of a finite population, and what it costs:
the exact hypergeometric tail, the largest count a sample does not rule out, the smallest sample
that rules out enough, the levels of a sequence of tests that sum to delta, and the pairs a
blocked join is predicted to ask (planner/recall.py certifies; kinds/join.py predicts). Nothing
here knows a join's rows or a model."""

import math

FIRST_CUT = 2.0  # the first try asks about this many pairs per row of the larger side: a match and a rival
TOP_K_SLACK = 1  # a top-k join's sample of left rows still certifies with this many rows missed


def try_delta(delta: float, i: int) -> float:
    """The level of the i-th try (from 1): the levels sum to delta."""
    return delta * 6 / (math.pi ** 2 * i * i)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def tail(population: int, matches: int, sample: int, found: int) -> float:
    """P(a uniform sample of `sample` of `population` pairs, `matches` of them matches, finds at most
    `found`): the hypergeometric lower tail, exact."""
    if found >= min(sample, matches):
        return 1.0
    low = max(0, sample - (population - matches))
    whole = _log_choose(population, sample)
    return min(1.0, sum(math.exp(_log_choose(matches, x) + _log_choose(population - matches, sample - x) - whole)
                        for x in range(low, found + 1)))


def upper_bound(population: int, sample: int, found: int, delta: float) -> int:
    """The most matches `population` pairs may hold when a uniform sample of `sample` of them found
    `found`, at level delta: the largest M that the sample does not rule out (tail(M) > delta)."""
    if sample >= population:
        return found
    lo, hi = found, population - (sample - found)  # tail(lo) = 1 > delta; the sample's misses are no matches
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tail(population, mid, sample, found) > delta:
            lo = mid
        else:
            hi = mid - 1
    return lo


def sample_size(below: int, allowed: float, found: int, delta: float) -> int:
    """The smallest sample of `below` pairs whose bound on their matches, when it finds `found`, is
    at most `allowed` (every pair, where no smaller one is)."""
    if allowed < found + 1 or below == 0:
        return below
    lo, hi = found + 1, below
    while lo < hi:
        mid = (lo + hi) // 2
        if upper_bound(below, mid, found, delta) <= allowed:
            hi = mid
        else:
            lo = mid + 1
    return lo


def predict_asked(pairs: int, rows: int, matches: float, target: float, delta: float) -> int:
    """The pairs a target is expected to ask, before any: its first try's, a cut of FIRST_CUT pairs
    a row that holds nearly every match, and a sample below it that finds none; `matches` is an
    estimate of the full join's size. A try that finds matches below costs more: the certificate
    says what it asked."""
    if target >= 1.0 or matches <= 0:
        return pairs
    above = min(pairs, math.ceil(FIRST_CUT * rows))
    return min(pairs, above + sample_size(pairs - above, matches / target - matches, 0, try_delta(delta, 1)))


def predict_blocked(pairs: int, rows: int, target: float, delta: float) -> int:
    """The pairs a recall target is predicted to ask (one match a row assumed): predict_asked's, or
    every pair where that would be half of them or more, which certifying cannot beat by enough to
    be worth its uncertainty."""
    predicted = predict_asked(pairs, rows, rows, target, delta)
    return pairs if predicted >= pairs / 2 else predicted
