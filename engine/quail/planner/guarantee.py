"""A cascade's band with a guarantee: with probability at least 1 - delta, the cascade's answers meet
a target (accuracy, precision or recall, at least T) measured against the larger model's answers.

As in BARGAIN (Zeighami et al., 2025, "Cut Costs, Not Accuracy", arXiv 2509.02896): the larger
model labels a uniform random sample of the rows; candidate thresholds on the small model's score
are tested one after another, from the surest down, and the band stops at the last one whose test
passes (fixed-sequence testing: each test at level delta, and the first failure ends the search, so
the chance that any accepted threshold misses the target stays at most delta). Each test is an
exact one-sided Clopper-Pearson bound on the sample's error rate (Clopper and Pearson, 1934), where
BARGAIN uses betting confidence sequences (Waudby-Smith and Ramdas, 2024): ours needs more labels
for the same band, and no assumption but the sampling. Candidates are a fixed grid, and one that
too few sample rows reach to pass even with no error is passed over untested.

Why each target bounds what it bounds. The rows inside the band take the larger model's answers,
which are right by definition, so:
- accuracy: the share of all rows that the small model answers wrongly (where it is sure enough
  to answer: its confidence at least tau; a classify's, its top label's probability above it);
- precision: the rate of wrong yeses among the rows it passes (every P(yes) above `high`); the
  larger model's yeses inside the band only add right ones;
- recall: the share of the larger model's yeses that the small model rejects (a P(yes) below `low`).
The guarantee is for the rows the sample was drawn from (the run's first window), and for the
table as far as that window is like the rest of it."""

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields

from quail.specs import METRICS

GRID = tuple(round(1 - i / 200, 3) for i in range(101))  # 1.0, 0.995, ... 0.5: confidence thresholds


@dataclass(frozen=True)
class Guarantee:
    """The band a target chose, and what backs it."""

    metric: str
    target: float
    delta: float
    low: float
    high: float
    sample: int  # rows (pairs) the larger model labelled
    tested: int  # thresholds tested
    bound: float | None  # the upper confidence bound on the error rate at the chosen threshold; None: none passed
    method: str = "Clopper-Pearson bound, fixed-sequence testing (BARGAIN's procedure)"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Guarantee":
        return cls(**{f.name: d[f.name] for f in fields(cls)})

    def describe(self) -> str:
        held = f"error at most {self.bound:.3f}" if self.bound is not None else (
            "no threshold passed: every row goes to the larger model"
            + ("" if self.tested else f"; a threshold needs at least {_fewest(1 - self.target, self.delta)} labelled "
                                      f"rows reaching it to be certified even with no error"))
        return (f"{self.metric} >= {self.target} with probability >= {1 - self.delta:g}: band [{self.low:.3f}, "
                f"{self.high:.3f}], from {self.sample} rows the larger model labelled ({self.tested} thresholds "
                f"tested; {held}; {self.method})")


def upper_bound(errors: int, n: int, delta: float) -> float:
    """The exact one-sided (1 - delta) upper confidence bound on a rate seen as errors/n: the p at
    which P(Binomial(n, p) <= errors) = delta."""
    if errors >= n:
        return 1.0

    def cdf(p: float) -> float:
        if p <= 0.0:
            return 1.0
        if p >= 1.0:
            return 0.0
        return sum(math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
                            + (n - k) * math.log1p(-p)) for k in range(errors + 1))

    lo, hi = errors / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > delta else (lo, mid)
    return hi


def _fewest(allowed_error: float, delta: float) -> int:
    """The fewest sample rows at which a test with no error can pass."""
    return 1 if allowed_error >= 1 else math.ceil(math.log(delta) / math.log1p(-allowed_error))


def _sequence(candidates: Iterable[float], counts: Callable[[float], tuple[int, int]], allowed_error: float,
              delta: float) -> tuple[float | None, float | None, int]:
    """Fixed-sequence testing over `candidates` in order: counts(c) gives (errors, n) at candidate c.
    Returns the last candidate that passed (None if none), its bound, and how many were tested."""
    chosen, bound, tested, fewest = None, None, 0, _fewest(allowed_error, delta)
    for c in candidates:
        errors, n = counts(c)
        if n < fewest:
            continue  # untestable: too few rows reach it
        tested += 1
        b = upper_bound(errors, n, delta)
        if b > allowed_error:
            break
        chosen, bound = c, b
    return chosen, bound, tested


def answer(p_yes: list[float], low: float, high: float) -> bool | None:
    """The small model's answer on a row as the cascade runs it at [low, high]: its predicates are
    asked in order until one is below `low` (rewind); None where an asked P(yes) lies inside
    the band (the larger model answers), else whether all are above `high`."""
    asked = []
    for p in p_yes:
        asked.append(p)
        if p < low:
            break
    if any(low <= p <= high for p in asked):
        return None
    return all(p > high for p in asked)


def choose(metric: str, target: float, delta: float, scores: list[list[float]], truth: list[bool]) -> Guarantee:
    """The band for a yes/no answer (a filter's row, its predicates' P(yes) each; a join's pair, one
    P(yes)), from the small model's scores on the sample, asked at threshold 0 so that every
    predicate has one, and the larger model's answers (`truth`)."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
    rows = range(len(truth))

    def counts_at(low: float, high: float) -> tuple[int, int]:
        said = [answer(scores[i], low, high) for i in rows]
        if metric == "accuracy":  # the rows it answers wrong, among all: the larger model's are right
            return sum(s is not None and s != truth[i] for i, s in enumerate(said)), len(said)
        if metric == "precision":  # among the rows it passes, the wrong ones
            return sum(s is True and not truth[i] for i, s in enumerate(said)), sum(s is True for s in said)
        return sum(s is False and truth[i] for i, s in enumerate(said)), sum(truth)  # the yeses it rejects

    if metric == "accuracy":  # a symmetric band, narrowing from everything to the larger model
        tau, bound, tested = _sequence(GRID, lambda t: counts_at(1 - t, t), 1 - target, delta)
        low, high = (1 - tau, tau) if tau is not None else (0.0, 1.0)
    elif metric == "precision":  # `high` coming down; nothing below it is sent on: recall is not asked
        found, bound, tested = _sequence(GRID[1:], lambda h: counts_at(h, h), 1 - target, delta)
        low, high = (0.0, 1.0) if found is None else (found, found)  # none certified: the larger model answers all
    else:  # `low` going up; nothing above it is sent on: precision is not asked
        found, bound, tested = _sequence([round(1 - g, 3) for g in GRID[1:]], lambda lo: counts_at(lo, lo),
                                         1 - target, delta)
        low, high = (0.0, 1.0) if found is None else (found, found)
    return Guarantee(metric, target, delta, float(low), float(high), len(truth), tested, bound)



def choose_labels(target: float, delta: float, confidence: list[float], right: list[bool]) -> Guarantee:
    """A classify's band on its top label's probability, for an accuracy target: the small model
    answers a row when that probability is above `high`; the larger model the rows inside [0,
    high]. `right`: the small model's label is the larger model's on that sample row."""
    grid = [round(1 - i / 100, 2) for i in range(1, 100)]  # 0.99 ... 0.01: a top probability may be low

    def counts(tau: float) -> tuple[int, int]:  # the rows it answers wrong, among all: the larger model's are right
        return sum(not r for c, r in zip(confidence, right) if c > tau), len(right)

    tau, bound, tested = _sequence(grid, counts, 1 - target, delta)
    return Guarantee("accuracy", target, delta, 0.0, 1.0 if tau is None else tau, len(right), tested, bound)
