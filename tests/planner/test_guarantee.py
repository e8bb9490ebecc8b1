"""A cascade's band with a guarantee (planner/guarantee.py): the exact bound, the tests in sequence,
and, over 20 random splits of a labelled set, the target met in at least (1 - delta) of them."""

import math
import random

import pytest

from quail.planner.guarantee import answer, choose, choose_labels, upper_bound


def test_the_clopper_pearson_bound_is_exact():
    assert upper_bound(0, 59, 0.05) == pytest.approx(1 - 0.05 ** (1 / 59), abs=1e-9)  # no error: 1 - delta^(1/n)
    b = upper_bound(5, 100, 0.05)  # where P(Binomial(100, b) <= 5) = 0.05, checked with math.comb
    assert sum(math.comb(100, k) * b**k * (1 - b) ** (100 - k) for k in range(6)) == pytest.approx(0.05, abs=1e-9)
    assert b == pytest.approx(0.10225, abs=1e-5)
    assert upper_bound(3, 3, 0.05) == 1.0 and upper_bound(0, 1, 0.05) == pytest.approx(0.95)


def test_a_row_is_answered_as_the_cascade_runs_it():
    assert answer([0.9, 0.95], 0.2, 0.8) is True
    assert answer([0.9, 0.1], 0.2, 0.8) is False
    assert answer([0.1, 0.5], 0.2, 0.8) is False  # chain mode stops at the sure no: 0.5 is never asked
    assert answer([0.5, 0.1], 0.2, 0.8) is None  # asked, and inside the band


def _calibrated(rng: random.Random, n: int) -> tuple[list[list[float]], list[bool]]:
    """A small model whose P(yes) is the chance that the larger model says yes."""
    p = [rng.random() for _ in range(n)]
    return [[x] for x in p], [rng.random() < x for x in p]


def _met(metric: str, target: float, band, scores, truth) -> bool:
    said = [answer(s, band.low, band.high) for s in scores]
    final = [t if s is None else s for s, t in zip(said, truth)]  # inside the band: the larger model's answer
    if metric == "accuracy":
        return sum(f == t for f, t in zip(final, truth)) >= target * len(truth)
    if metric == "precision":
        passed = [t for f, t in zip(final, truth) if f]
        return not passed or sum(passed) >= target * len(passed)
    return sum(f and t for f, t in zip(final, truth)) >= target * sum(truth)


@pytest.mark.parametrize("metric, target", [("accuracy", 0.9), ("precision", 0.9), ("recall", 0.9)])
def test_over_20_splits_the_target_is_met_in_at_least_1_minus_delta_of_them(metric, target):
    rng, delta, met, saved = random.Random(27), 0.05, 0, []
    for _ in range(20):
        scores, truth = _calibrated(rng, 4000)
        sample = rng.sample(range(4000), 400)
        rest = sorted(set(range(4000)) - set(sample))
        band = choose(metric, target, delta, [scores[i] for i in sample], [truth[i] for i in sample])
        met += _met(metric, target, band, [scores[i] for i in rest], [truth[i] for i in rest])
        saved.append(sum(answer(scores[i], band.low, band.high) is not None for i in rest) / len(rest))
    assert met >= (1 - delta) * 20
    # and the small model still answers a good share: the guarantee is not vacuous. A precision
    # target is certified only where enough sample rows lie above a high threshold: in 13 of these
    # 20 splits none is, and every row goes to the larger model, which saves nothing but is right.
    assert (min(saved) if metric != "precision" else sum(saved) / len(saved)) > 0.2


@pytest.mark.parametrize("metric", ["accuracy", "precision", "recall"])
def test_with_too_few_labels_every_row_goes_to_the_larger_model(metric):
    """A precision target rejected every row, and a recall target passed every row, while the log
    said that every row went to the larger model: now every row does, for each metric."""
    scores = [[0.99], [0.01]] * 25  # 50 rows cannot certify 1% error, even with none
    band = choose(metric, 0.99, 0.05, scores, [True, False] * 25)
    assert (band.low, band.high, band.tested, band.bound) == (0.0, 1.0, 0, None)
    assert all(answer(s, band.low, band.high) is None for s in scores)  # the larger model answers each
    assert "no threshold passed: every row goes to the larger model" in band.describe()
    assert "at least 299 labelled rows" in band.describe()  # what it would take, with no error



def test_over_20_splits_a_classify_meets_its_accuracy_target_in_at_least_1_minus_delta_of_them():
    """A small model whose top label's probability is the chance that the larger model agrees with it."""
    rng, delta, target, met, saved = random.Random(28), 0.05, 0.9, 0, []
    for _ in range(20):
        confidence = [0.2 + 0.8 * rng.random() for _ in range(4000)]
        right = [rng.random() < c for c in confidence]
        sample = rng.sample(range(4000), 400)
        rest = sorted(set(range(4000)) - set(sample))
        band = choose_labels(target, delta, [confidence[i] for i in sample], [right[i] for i in sample])
        answered = [i for i in rest if not band.low <= confidence[i] <= band.high]  # the rest: the larger model's
        met += len(rest) - sum(not right[i] for i in answered) >= target * len(rest)
        saved.append(len(answered) / len(rest))
    assert met >= (1 - delta) * 20
    assert min(saved) > 0.2
