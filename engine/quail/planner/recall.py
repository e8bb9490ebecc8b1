"""A join's recall, certified over the whole product without asking the model about every pair.

The full join is the set of pairs the model matches when asked about every pair. A blocked join
asks the model about every pair whose score (a similarity of the two rows' vectors: the model's
own, or an embedding model's) reaches a cut, and about a uniform sample of the pairs below it. Its
output is every pair the model matched among those it asked. The certificate: with probability at
least 1 - delta, the output holds at least `target` of the full join's pairs.

Why it holds. Above the cut every pair is asked, so its matches are known exactly (m). Below it, B
pairs hold an unknown number of matches; a uniform sample of n of them, drawn without replacement,
finds k. The number of matches among B pairs that a sample finding k or fewer rules out at level
delta is exact (the hypergeometric tail: Clopper-Pearson's argument over a finite population); the
largest number it does not rule out, U, bounds the matches below with probability 1 - delta. The
output holds m + k of the full join's m + (matches below) pairs, so its recall is at least
(m + k) / (m + U). Nothing is assumed about the scores: they only decide where asking pays.

The cut is lowered in tries: a try asks the pairs between the previous cut and its own, and tops up
its sample of the pairs below. Try i runs at level delta_i = delta * 6 / (pi^2 i^2), which sum to
delta, so that the chance that any try's bound is wrong is at most delta whichever try stops (a
union bound). A sample drawn for one try stays uniform in the smaller region below the next cut;
it is reused there, and only topped up.

What it costs. With none found below, certifying needs n ~ ln(1/delta) B / U pairs, where U is the
misses the target allows, (1 - target) / target of the matches above: about 3 P / ((1 - R) K) at
delta 0.05 for K matches in a product of P pairs. The pairs asked fall as a share of the product
as the tables grow (P grows as the square of the rows, K as the rows), and no bound from a uniform
sample can do much better: a region of B pairs holding U matches shows none to a sample of
B ln(1/delta) / U pairs with probability about delta."""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from quail.sampling import FIRST_CUT, sample_size, try_delta, upper_bound


class Product(Protocol):
    """The pairs of a join, each with a score; a pair is known by its id, i * right_rows + j."""

    size: int

    def cut_for(self, pairs: int) -> float:
        """The highest score at or above which at least `pairs` pairs lie."""

    def count_at_least(self, cut: float) -> int:
        ...

    def between(self, high: float, low: float) -> np.ndarray:
        """The ids of the pairs whose score lies in [low, high) (high inf: no upper limit)."""

    def sample_below(self, cut: float, n: int, rng: np.random.Generator, drawn: np.ndarray) -> np.ndarray:
        """`drawn` (ids below `cut`, a uniform sample of them) topped up to n ids, uniformly without
        replacement among the pairs scored below `cut`."""


@dataclass
class Certificate:
    """What a blocked join asked, and what it can say of its recall."""

    target: float
    delta: float
    pairs: int  # in the product
    cut: float = math.inf
    asked_above: int = 0  # every pair at or above the cut
    sampled_below: int = 0
    matched_above: int = 0
    found_below: int = 0  # the sample's matches: in the output too
    below: int = 0  # pairs below the cut
    bound_below: int = 0  # at most this many matches below, with probability 1 - delta_i
    recall_lower: float = 0.0  # certified, over the whole product
    tries: list[dict] = field(default_factory=list)

    @property
    def asked(self) -> int:
        return self.asked_above + self.sampled_below

    @property
    def met(self) -> bool:
        return self.recall_lower >= self.target

    def to_dict(self) -> dict:
        return asdict(self) | {"asked": self.asked, "met": self.met}


class ScoredProduct:
    """A product whose every pair's score is in memory (float32, 4 bytes a pair): a small join's, or
    a simulation's."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = np.ascontiguousarray(scores, np.float32).ravel()
        self.size = len(self.scores)

    def cut_for(self, pairs: int) -> float:
        if pairs <= 0:
            return math.inf
        return float(np.partition(self.scores, self.size - pairs)[self.size - pairs])

    def count_at_least(self, cut: float) -> int:
        return int(np.count_nonzero(self.scores >= cut))

    def between(self, high: float, low: float) -> np.ndarray:
        return np.flatnonzero((self.scores >= low) & (self.scores < high)).astype(np.int64)

    def sample_below(self, cut: float, n: int, rng: np.random.Generator, drawn: np.ndarray) -> np.ndarray:
        below = self.size - self.count_at_least(cut)
        if below < self.size // 2:  # a small region: drawn from its list
            pool = np.setdiff1d(np.flatnonzero(self.scores < cut), drawn)
            return np.concatenate([drawn, rng.choice(pool, min(len(pool), n - len(drawn)), replace=False)])
        return draw_below(self.size, lambda ids: self.scores[ids] < cut, min(n, below), rng, drawn)


def draw_below(size: int, below: Callable[[np.ndarray], np.ndarray], n: int, rng: np.random.Generator,
               drawn: np.ndarray) -> np.ndarray:
    """`drawn` topped up to n pair ids: pairs drawn from the whole product in order, each kept if
    `below` says so and new, which is a uniform sample without replacement of the pairs below, with
    no list of them made (the region below is most of the product)."""
    out, seen = [drawn], set(drawn.tolist())
    need = n - len(drawn)
    while need > 0:
        batch = rng.integers(0, size, 2 * need + 16)
        batch = batch[below(batch)]
        _, first = np.unique(batch, return_index=True)
        fresh = [i for i in batch[np.sort(first)].tolist() if i not in seen][:need]
        seen.update(fresh)
        out.append(np.array(fresh, np.int64))
        need -= len(fresh)
    return np.concatenate(out)


class Asked:
    """The pairs asked so far and the model's answers: each pair is asked once, whichever try asks it."""

    def __init__(self, ask: Callable[[np.ndarray], np.ndarray]) -> None:
        self._ask = ask
        self.ids = np.empty(0, np.int64)
        self.matched = np.empty(0, bool)

    def matches(self, ids: np.ndarray) -> int:
        """How many of `ids` the model matched, asking those not asked yet."""
        new = np.setdiff1d(ids, self.ids)
        if len(new):
            self.ids = np.concatenate([self.ids, new])
            self.matched = np.concatenate([self.matched, np.asarray(self._ask(new), bool)])
        return int(self.matched[np.isin(self.ids, ids)].sum())

    def output(self) -> np.ndarray:
        return np.sort(self.ids[self.matched])


def certify(product: Product, rows: int, ask: Callable[[np.ndarray], np.ndarray], target: float, delta: float,
            seed: int, most_tries: int = 24) -> tuple[np.ndarray, Certificate]:
    """The blocked join: the ids of the pairs the model matched among those asked, and the
    certificate. `ask` answers pairs (ids -> bools, the model's match); `rows` is the larger
    side's, which sets the first cut; the seed makes a run and its retry draw the same sample.
    A try's sample size depends on the matches above its cut only, never on what a sample found:
    a sample grown until it looks good would bound nothing."""
    cert = Certificate(target, delta, product.size)
    asked = Asked(ask)
    if target >= 1.0:  # no sample certifies every pair short of asking every pair
        cert.asked_above = product.size
        cert.matched_above = asked.matches(product.between(math.inf, -math.inf))
        cert.cut, cert.recall_lower = -math.inf, 1.0
        return asked.output(), cert
    rng = np.random.default_rng(seed)
    drawn = np.empty(0, np.int64)  # uniform among the pairs below the current cut
    above_pairs = math.ceil(FIRST_CUT * rows)
    for i in range(1, most_tries + 1):
        cut = product.cut_for(min(above_pairs, product.size))
        above = product.between(math.inf, cut)
        m = asked.matches(above)
        below = product.size - len(above)
        drawn = drawn[~np.isin(drawn, above)]  # still uniform below the lower cut
        d = try_delta(delta, i)
        # each try's sample tolerates one more match found below than the last one's
        n = sample_size(below, (m + i - 1) / target - m, i - 1, d) if below else 0
        if n > len(drawn):
            drawn = product.sample_below(cut, n, rng, drawn)
        k = asked.matches(drawn) if len(drawn) else 0
        bound = upper_bound(below, len(drawn), k, d)
        lower = (m + k) / (m + bound) if m + bound else 1.0
        cert.tries.append({"cut": cut, "above": len(above), "sampled": len(drawn), "found": k, "bound_below": bound,
                           "recall_lower": lower, "delta": d})
        cert.cut, cert.below, cert.bound_below, cert.recall_lower = cut, below, bound, lower
        cert.asked_above, cert.matched_above, cert.sampled_below, cert.found_below = len(above), m, len(drawn), k
        if lower >= target or below == 0:
            break
        above_pairs *= 2
    return asked.output(), cert


def describe(report: dict) -> str:
    """A blocked join's pairs and recall in one line (Stats.blocking, runtime/blocking.py)."""
    pairs, asked = report["pairs"], report["asked"]
    said = f"pairs asked {asked:,} of {pairs:,} ({asked / pairs:.2%})" if pairs else "no pairs"
    mode = report["mode"]
    if mode == "certified":
        said += (f": {report['asked_above']:,} at or above the cut {report['cut']:.4f}, {report['sampled_below']:,} "
                 f"sampled below it; recall >= {report['recall_lower']:.3f} certified (target "
                 f"{report['target']:g}, delta {report['delta']:g})")
    elif mode == "candidates":
        low, _ = report["recall_interval"]
        said += (f": each left row's {report['candidates']} best, and {report['sampled_below']:,} others sampled; "
                 f"recall estimated {report['recall_estimate']:.3f}, at least {low:.3f} with probability "
                 f"{1 - report['delta']:g} (an estimate, not a target)")
    if "escalated" in report:
        said += f"; {report['escalated']:,} of the pairs asked escalated to the cascade model"
    return said + (f"; {report['why']}" if report.get("why") else "")


def window_delta(delta: float, k: int, last: bool) -> float:
    """The level of window k's certificate (from 0): a table of one window takes delta whole, and
    the windows of a longer one take shares that sum to delta, so that every window's certificate
    holds at once with probability 1 - delta, and with them the whole join's."""
    return delta if k == 0 and last else try_delta(delta, k + 1)


SUMMED = ("pairs", "asked", "asked_above", "sampled_below", "matched_above", "found_below", "bound_below", "below",
          "matched", "escalated", "delta")


def combined(a: dict | None, b: dict | None) -> dict | None:
    """Two windows' reports as one: pairs and matches add up; the recall bound over both holds when
    both windows' do (so at the sum of their levels), and a window's mode where they differ."""
    if a is None or b is None:
        return a or b
    out = a | {k: a.get(k, 0) + b.get(k, 0) for k in SUMMED if k in a or k in b}
    if a.get("mode") == b.get("mode") == "certified":
        found = out["matched_above"] + out["found_below"]
        out["recall_lower"] = found / (out["matched_above"] + out["bound_below"]) if found else 1.0
        out.pop("tries", None)
    else:
        out["recall_lower"] = min(a.get("recall_lower", 1.0), b.get("recall_lower", 1.0))
    return out
