"""The metrics of bench/quality.py on small cases computed by hand, and the rule that chooses the
default model."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from quail.model.registry import DEFAULT_MODEL, EMBEDDED

_spec = importlib.util.spec_from_file_location("quality", Path(__file__).resolve().parents[2] / "bench" / "quality.py")
quality = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quality)


def test_auc_counts_ordered_pairs_and_half_ties():
    # positives 0.9, 0.4; negatives 0.4, 0.1: pairs (0.9>0.4) 1, (0.9>0.1) 1, (0.4=0.4) 0.5, (0.4>0.1) 1 -> 3.5/4
    assert quality.auc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == 0.875
    assert quality.auc([0.1, 0.9], [True, False]) == 0.0
    assert quality.auc([0.2, 0.8, 0.5], [False, True, False]) == 1.0
    assert math.isnan(quality.auc([0.3, 0.7], [True, True]))


def test_f1_of_the_positive_class():
    # TP 2, FP 1, FN 1: 4 / (4 + 2)
    assert quality.f1([1, 1, 1, 0, 0], [1, 1, 0, 1, 0]) == pytest.approx(2 / 3)
    assert quality.f1([0, 0], [1, 1]) == 0.0
    assert math.isnan(quality.f1([0, 0], [0, 0]))


def test_macro_f1_averages_the_labels_that_occur():
    # label 0: TP 1, FP 0, FN 1 -> 2/3; label 1: TP 1, FP 1, FN 1 -> 1/2; label 2: only predicted -> 0
    assert quality.macro_f1([0, 1, 1, 2], [0, 0, 1, 1]) == pytest.approx(7 / 18)


def test_ece_over_equal_width_bins():
    # bin [0.2, 0.3): 0.2, 0.25 with outcomes 0, 1 -> |0.225 - 0.5| * 2/4; bin [0.9, 1.0]: 0.95, 1.0 with 1, 1 ->
    # |0.975 - 1| * 2/4. ECE = 0.1375 + 0.0125
    assert quality.ece([0.2, 0.25, 0.95, 1.0], [0, 1, 1, 1]) == pytest.approx(0.15)
    assert quality.ece([0.7, 0.7], [1, 0]) == pytest.approx(0.2)  # one bin: |0.7 - 0.5|
    assert quality.ece([1.0, 0.0], [0, 0]) == 0.5  # p = 1 falls in the last bin, not an eleventh


def test_top1_match_and_join_metrics():
    p = [[0.9, 0.2, 0.1],   # row 0 picks 0: right
         [0.6, 0.5, 0.3],   # row 1 picks 0: wrong
         [0.1, 0.2, 0.7]]   # row 2 picks 2: right
    precision, recall, f = quality.top1(p)
    assert (precision, recall) == (2 / 3, 2 / 3) and f == pytest.approx(2 / 3)
    m = quality.join_metrics(p)
    # pairs at >= 0.5: (0,0) right, (1,0) wrong, (1,1) right, (2,2) right -> TP 3, FP 1, FN 0: 6/7
    assert m["pair_f1"] == pytest.approx(6 / 7)
    # true 0.9, 0.5, 0.7 against false 0.2, 0.1, 0.6, 0.3, 0.1, 0.2: only 0.5 < 0.6 loses -> 17/18
    assert m["auc"] == pytest.approx(17 / 18)


def test_filter_and_classify_metrics():
    m = quality.filter_metrics([0.8, 0.6, 0.4, 0.1], [True, False, True, False])
    assert (m["accuracy"], m["said_yes"], m["positives"]) == (0.5, 2, 2) and m["f1"] == 0.5
    c = quality.classify_metrics([[0.7, 0.2, 0.1], [0.3, 0.6, 0.1], [0.5, 0.1, 0.4]], [0, 2, 0])
    assert c["accuracy"] == pytest.approx(2 / 3)
    # confidences 0.7 (right), 0.6 (wrong), 0.5 (right), one bin each: (0.3 + 0.6 + 0.5) / 3
    assert c["ece"] == pytest.approx(1.4 / 3)
    assert c["confusion"] == [[2, 0, 0], [0, 0, 0], [0, 1, 0]]  # [true][answered]: the 2 was answered 1


def _result(filter_acc, classify_acc, join_f1):
    return {"filter": {"accuracy": filter_acc}, "classify": {"accuracy": classify_acc}, "join": {"top1_f1": join_f1}}


def test_the_default_is_the_smallest_model_that_meets_every_bar_else_the_most():
    small, mid, large = quality.MODELS
    runs = {small: {"none": _result(0.99, 0.90, 0.85)}, mid: {"none": _result(0.96, 0.86, 0.81)},
            large: {"contextual": _result(1.0, 1.0, 1.0)}}
    assert quality.choose_default(runs) == (small, "none", ["filter", "classify", "join"])
    runs[small]["none"]["join"]["top1_f1"] = 0.79  # below a bar: the next model that meets all three
    assert quality.choose_default(runs) == (mid, "none", ["filter", "classify", "join"])
    runs = {mid: {"none": _result(0.48, 0.62, 0.47), "contextual": _result(0.96, 0.60, 0.50)},
            large: {"none": _result(0.89, 0.75, 0.88), "contextual": _result(0.95, 0.75, 0.94)}}
    assert quality.choose_default(runs) == (large, "contextual", ["filter", "join"])  # none meets all: the most
    runs[large]["contextual"]["filter"]["accuracy"] = 0.94  # one bar each: the smaller model, then no calibration
    runs[mid]["none"]["filter"]["accuracy"] = 0.95
    assert quality.choose_default(runs) == (mid, "none", ["filter"])
    del runs[mid]["none"]["join"]  # a partial result does not count
    assert quality.choose_default(runs) == (mid, "contextual", ["filter"])


def test_the_registry_follows_the_rule_on_the_held_out_half():
    """The default model and each model's own calibration are what choose_default makes of the
    committed held-out results (bench/results/quality-heldout.json)."""
    runs = json.loads((quality.RESULTS / "quality-heldout.json").read_text())["runs"]
    model, calibration, _ = quality.choose_default(runs)
    assert (DEFAULT_MODEL, EMBEDDED[DEFAULT_MODEL].calibration) == (model, calibration)
    for name in runs:
        assert EMBEDDED[name].calibration == quality.choose_default({name: runs[name]})[1], name
