"""A join's product scored by vectors, in blocks: what the recall certificate asks of it is exact,
agrees with the same scores held whole, and never holds the product at once."""

import math

import numpy as np

from quail.ops.candidates import VectorProduct
from quail.planner.recall import ScoredProduct, certify


def _vectors(rows: int, seed: int, dim: int = 16):
    """Left rows near their partner's vector, right rows random: one match a left row."""
    rng = np.random.default_rng(seed)
    right = rng.standard_normal((rows, dim))
    partner = rng.permutation(rows)
    left = right[partner] + 0.6 * rng.standard_normal((rows, dim))
    return left, right, partner


def test_counts_cuts_and_ranges_are_those_of_the_whole_scores():
    left, right, _ = _vectors(300, 1)
    blocked = VectorProduct(left, right, block=64)
    whole = (left / np.linalg.norm(left, axis=1, keepdims=True)) @ (right / np.linalg.norm(right, axis=1,
                                                                                           keepdims=True)).T
    for pairs in (1, 300, 600, 5000, 90_000):
        cut = blocked.cut_for(pairs)
        above = blocked.between(math.inf, cut)
        assert len(above) == blocked.count_at_least(cut) >= pairs
        assert np.all(whole.ravel()[above] >= cut - 1e-4)  # a cut is an edge of bins 3e-5 wide
        assert blocked.count_at_least(cut) - pairs <= np.count_nonzero(np.abs(whole - cut) < 1e-4) + 1
    assert blocked.count_at_least(-math.inf) == 90_000 and len(blocked.between(math.inf, -math.inf)) == 90_000


def test_a_sample_below_a_cut_is_below_it_new_and_uniform():
    left, right, _ = _vectors(200, 2)
    p = VectorProduct(left, right, block=50)
    cut = p.cut_for(400)
    above = set(p.between(math.inf, cut).tolist())
    rng = np.random.default_rng(0)
    first = p.sample_below(cut, 1000, rng, np.empty(0, np.int64))
    more = p.sample_below(cut, 3000, rng, first)
    assert len(set(more.tolist())) == 3000 and not above & set(more.tolist()) and np.array_equal(more[:1000], first)
    # uniform: each left row's share of a large sample is its share of the pairs below
    big = p.sample_below(cut, 20_000, np.random.default_rng(1), np.empty(0, np.int64))
    share = np.bincount(big // 200, minlength=200) / 20_000
    assert np.abs(share - 1 / 200).max() < 0.004


def test_the_certificate_over_vectors_holds_and_asks_a_share_of_the_product():
    left, right, partner = _vectors(400, 3)
    truth = np.zeros(400 * 400, bool)
    truth[np.arange(400) * 400 + partner] = True
    out, cert = certify(VectorProduct(left, right, block=128), 400, lambda ids: truth[ids], 0.9, 0.05, 3)
    assert cert.met and truth[out].all() and truth[out].sum() / 400 >= 0.9
    assert cert.asked < 0.5 * cert.pairs
    _, whole = certify(ScoredProduct(np.zeros(4)), 2, lambda ids: np.zeros(len(ids), bool), 0.9, 0.05, 3)
    assert whole.asked == 4  # no match anywhere: only every pair asked can say so
