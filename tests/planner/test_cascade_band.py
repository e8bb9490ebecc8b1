"""Choosing a cascade's band from a labelled sample (planner/band.py)."""

import itertools
import random

import pytest

from quail.planner.band import band_for, decides


def _rewound(row, low):
    """What the small model computes in the cascade, at threshold `low`: up to the first P(yes) below it."""
    asked = []
    for p in row:
        asked.append(p)
        if p < low:
            break
    return asked + [None] * (len(row) - len(asked))


def _brute(probs, labels, low, high):
    """(rows the small model answers, of them right) for one band."""
    chains = [_rewound(row, low) for row in probs]
    sure = [i for i, c in enumerate(chains) if decides(c, low, high)]
    return len(sure), sum(all(p is not None and p >= low for p in chains[i]) == labels[i] for i in sure)


def test_separable_scores_leave_every_row_to_the_small_model():
    band = band_for([[0.1], [0.2], [0.8], [0.9]], [False, False, True, True], 1.0)
    assert (band.answered, band.correct) == (4, 4) and 0.2 < band.low <= band.high < 0.8


def test_an_off_scale_small_model_still_gets_a_band_above_the_threshold():
    """Say it says yes to everything, but ranks well: the band lies where its scale divides."""
    band = band_for([[0.6], [0.7], [0.95], [0.97]], [False, False, True, True], 1.0)
    assert band.answered == 4 and 0.7 < band.low <= band.high < 0.95


def test_no_row_right_enough_sends_every_row_on():
    band = band_for([[0.9], [0.1]], [False, True], 0.9)
    assert (band.low, band.high, band.answered) == (0.0, 1.0, 0)
    assert not any(decides(row, band.low, band.high) for row in [[0.9], [0.1]])


@pytest.mark.parametrize("target", [0.7, 0.9, 0.97, 1.0])
def test_the_band_meets_the_target_on_the_sample_and_no_band_answers_more(target):
    """Against a brute force over every band the sample's values tell apart, with chains of two
    predicates."""
    rng = random.Random(7)
    probs = [[rng.random(), rng.random()] for _ in range(40)]
    labels = [rng.random() < sum(p) / 2 for p in probs]
    band = band_for(probs, labels, target)
    assert _brute(probs, labels, band.low, band.high) == (band.answered, band.correct)
    assert band.correct >= target * band.answered and band.low <= band.high
    values = sorted({p for row in probs for p in row} | {0.0, 1.0})
    cuts = sorted(set(values) | {(a + b) / 2 for a, b in zip(values, values[1:])})
    for low, high in itertools.product(cuts, cuts):
        if low <= high:
            answered, correct = _brute(probs, labels, low, high)
            if correct >= target * answered:
                assert answered <= band.answered, (low, high)


def test_a_row_is_sure_only_when_every_asked_predicate_is_outside_the_band():
    assert decides([0.95, 0.05], 0.1, 0.9)
    assert not decides([0.95, 0.5], 0.1, 0.9)
    assert not decides([0.5, None], 0.1, 0.9)
    assert decides([0.02, None], 0.1, 0.9)
