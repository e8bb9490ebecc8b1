"""The quality metrics (bench/common/metrics.py) on small cases computed by hand."""

import math

import pytest

from bench.common import metrics


def test_auc_counts_ordered_pairs_and_half_ties() -> None:
    # positives 0.9, 0.4; negatives 0.4, 0.1: pairs (0.9>0.4) 1, (0.9>0.1) 1, (0.4=0.4) 0.5, (0.4>0.1) 1 -> 3.5/4
    assert metrics.auc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == 0.875
    assert metrics.auc([0.1, 0.9], [True, False]) == 0.0
    assert metrics.auc([0.2, 0.8, 0.5], [False, True, False]) == 1.0
    assert math.isnan(metrics.auc([0.3, 0.7], [True, True]))


def test_f1_of_the_positive_class() -> None:
    # TP 2, FP 1, FN 1: 4 / (4 + 2)
    assert metrics.f1([1, 1, 1, 0, 0], [1, 1, 0, 1, 0]) == pytest.approx(2 / 3)
    assert metrics.f1([0, 0], [1, 1]) == 0.0
    assert math.isnan(metrics.f1([0, 0], [0, 0]))


def test_macro_f1_averages_the_labels_that_occur() -> None:
    # label 0: TP 1, FP 0, FN 1 -> 2/3; label 1: TP 1, FP 1, FN 1 -> 1/2; label 2: only predicted -> 0
    assert metrics.macro_f1([0, 1, 1, 2], [0, 0, 1, 1]) == pytest.approx(7 / 18)


def test_ece_over_equal_width_bins() -> None:
    # bin [0.2, 0.3): 0.2, 0.25 with outcomes 0, 1 -> |0.225 - 0.5| * 2/4; bin [0.9, 1.0]: 0.95, 1.0 with 1, 1 ->
    # |0.975 - 1| * 2/4. ECE = 0.1375 + 0.0125
    assert metrics.ece([0.2, 0.25, 0.95, 1.0], [0, 1, 1, 1]) == pytest.approx(0.15)
    assert metrics.ece([0.7, 0.7], [1, 0]) == pytest.approx(0.2)  # one bin: |0.7 - 0.5|
    assert metrics.ece([1.0, 0.0], [0, 0]) == 0.5  # p = 1 falls in the last bin, not an eleventh


def test_top1_match_and_join_metrics() -> None:
    p = [[0.9, 0.2, 0.1],   # row 0 picks 0: right
         [0.6, 0.5, 0.3],   # row 1 picks 0: wrong
         [0.1, 0.2, 0.7]]   # row 2 picks 2: right
    precision, recall, f = metrics.top1(p)
    assert (precision, recall) == (2 / 3, 2 / 3) and f == pytest.approx(2 / 3)
    m = metrics.join_metrics(p)
    # pairs at >= 0.5: (0,0) right, (1,0) wrong, (1,1) right, (2,2) right -> TP 3, FP 1, FN 0: 6/7
    assert m["pair_f1"] == pytest.approx(6 / 7)
    # true 0.9, 0.5, 0.7 against false 0.2, 0.1, 0.6, 0.3, 0.1, 0.2: only 0.5 < 0.6 loses -> 17/18
    assert m["auc"] == pytest.approx(17 / 18)


def test_filter_and_classify_metrics() -> None:
    m = metrics.filter_metrics([0.8, 0.6, 0.4, 0.1], [True, False, True, False])
    assert (m["accuracy"], m["said_yes"], m["positives"]) == (0.5, 2, 2) and m["f1"] == 0.5
    c = metrics.classify_metrics([[0.7, 0.2, 0.1], [0.3, 0.6, 0.1], [0.5, 0.1, 0.4]], [0, 2, 0])
    assert c["accuracy"] == pytest.approx(2 / 3)
    # confidences 0.7 (right), 0.6 (wrong), 0.5 (right), one bin each: (0.3 + 0.6 + 0.5) / 3
    assert c["ece"] == pytest.approx(1.4 / 3)
    assert c["confusion"] == [[2, 0, 0], [0, 0, 0], [0, 1, 0]]  # [true][answered]: the 2 was answered 1
