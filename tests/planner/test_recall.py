"""A blocked join's certified recall, without a model: a simulated oracle plants one match per left
row in the product, with scores that overlap the non-matches' as real similarities do, and the
certificate must hold as stated over many seeds, at a few percent of the product."""

import math

import numpy as np
import pytest

from quail.planner.recall import ScoredProduct, certify, combined, window_delta
from quail.sampling import predict_asked, tail, upper_bound


def world(rows: int, seed: int, hard: float = 0.05, mu: float = 6.0, gap: float = 1.5):
    """Scores of a rows x rows product, N(0, 1) for non-matches; each left row's one match scores
    N(mu, 1), or, for a `hard` share of rows, N(gap, 1): a match the scores barely tell apart."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((rows, rows), dtype=np.float32)
    partner = rng.permutation(rows)
    scores[np.arange(rows), partner] = rng.standard_normal(rows) + np.where(rng.random(rows) < hard, gap, mu)
    truth = np.zeros(rows * rows, bool)
    truth[np.arange(rows) * rows + partner] = True
    return ScoredProduct(scores), truth


def test_the_bound_is_the_exact_hypergeometric_one():
    for population, sample, found in [(50, 10, 0), (50, 10, 2), (200, 37, 1), (30, 30, 4), (1000, 1, 0)]:
        for delta in (0.05, 0.2):
            bound = upper_bound(population, sample, found, delta)
            cdf = [sum(math.comb(m, x) * math.comb(population - m, sample - x) for x in range(found + 1)) /
                   math.comb(population, sample) for m in range(population + 1)]
            assert cdf[bound] > delta and (bound == population or cdf[bound + 1] <= delta)
            assert abs(tail(population, bound, sample, found) - cdf[bound]) < 1e-9


@pytest.mark.simulation
@pytest.mark.parametrize("target, delta", [(0.9, 0.05), (0.95, 0.05), (0.9, 0.1), (0.95, 0.1)])
@pytest.mark.parametrize("hard, gap", [(0.1, 1.5), (0.3, 0.0)])  # some matches, or many, no likelier than noise
def test_the_certificate_holds_over_1000_seeds(target, delta, hard, gap):
    held = 0
    for seed in range(1000):
        product, truth = world(40, seed, hard, gap=gap)
        out, cert = certify(product, 40, lambda ids: truth[ids], target, delta, seed)
        recall = truth[out].sum() / truth.sum()
        assert cert.met and truth[out].all()  # it stops once certified; it outputs matches only
        assert cert.matched_above + cert.found_below == len(out)
        held += recall >= target
    assert held >= (1 - delta) * 1000


@pytest.mark.simulation
def test_the_certified_bound_is_below_the_true_recall_on_nearly_every_seed():
    """The bound itself, not only the target: the output's recall at least its certified bound."""
    below = sum(truth[out].sum() / truth.sum() < cert.recall_lower
                for seed in range(300) for product, truth in [world(60, seed, 0.1)]
                for out, cert in [certify(product, 60, lambda ids: truth[ids], 0.9, 0.05, seed)])
    assert below <= 0.05 * 300


@pytest.mark.simulation
def test_pairs_asked_fall_with_the_product():
    """One match a row, R 0.9, D 0.05: a median of at most 5% of a 1,000 x 1,000 product over five
    seeds (a first try whose sample finds a match below costs a second, about twice as much), and
    far less than the share asked of a product 10 times smaller."""
    shares = {}
    for rows in (100, 1000):
        runs = []
        for seed in range(5):
            product, truth = world(rows, seed, hard=0.0)  # every match above noise level, its tail overlapping
            out, cert = certify(product, rows, lambda ids: truth[ids], 0.9, 0.05, seed)
            assert cert.met
            runs.append(cert.asked / cert.pairs)
        shares[rows] = sorted(runs)
    assert shares[1000][2] <= 0.05 and shares[1000][-1] <= 0.08 and shares[1000][2] < shares[100][2] / 5
    assert predict_asked(1000 * 1000, 1000, 1000, 0.9, 0.05) <= 0.05 * 1000 * 1000


def test_every_pair_is_asked_at_recall_1_and_where_no_sample_can_certify():
    product, truth = world(30, 1)
    out, cert = certify(product, 30, lambda ids: truth[ids], 1.0, 0.05, 1)
    assert cert.asked == 900 and cert.recall_lower == 1.0 and set(out) == set(np.flatnonzero(truth))
    none = np.zeros(900, bool)  # no pair matches: only every pair asked can say so
    out, cert = certify(product, 30, lambda ids: none[ids], 0.9, 0.05, 1)
    assert len(out) == 0 and cert.asked == 900 and cert.met


def test_a_run_and_its_retry_ask_the_same_pairs():
    product, truth = world(80, 5, 0.2)
    asked = []
    for _ in range(2):
        seen = []
        certify(product, 80, lambda ids: (seen.append(ids.copy()), truth[ids])[1], 0.9, 0.05, 11)
        asked.append(np.concatenate(seen))
    assert np.array_equal(asked[0], asked[1])


def test_the_windows_levels_sum_to_delta_and_one_window_takes_it_whole():
    assert window_delta(0.05, 0, last=True) == 0.05
    levels = [window_delta(0.05, k, last=False) for k in range(10_000)]
    assert sum(levels) <= 0.05 and levels == sorted(levels, reverse=True)


def test_two_windows_certificates_combine_into_one_over_both():
    a = {"mode": "certified", "pairs": 100, "asked": 10, "asked_above": 8, "sampled_below": 2, "matched_above": 9,
         "found_below": 1, "bound_below": 2, "below": 92, "matched": 10, "delta": 0.03, "recall_lower": 10 / 11}
    b = a | {"matched_above": 4, "found_below": 0, "bound_below": 1, "matched": 4, "delta": 0.01, "recall_lower": 0.8}
    both = combined(a, b)
    assert both["pairs"] == 200 and both["asked"] == 20 and both["delta"] == pytest.approx(0.04)
    assert both["recall_lower"] == pytest.approx(14 / 16)  # (9 + 1 + 4) / (9 + 4 + 2 + 1)
    assert min(a["recall_lower"], b["recall_lower"]) <= both["recall_lower"] <= max(a["recall_lower"],
                                                                                    b["recall_lower"])
    assert combined(None, b) is b and combined(a, None) is a
