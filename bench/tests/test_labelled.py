"""The rule that chooses the default model (bench/quality/labelled.py), and the engine's registry
held to it on the committed held-out results."""

import json

from bench.common.labelled import MODELS
from bench.common.results import RESULTS
from bench.quality.labelled import choose_default
from quail.model.registry import DEFAULT_MODEL, EMBEDDED


def _result(filter_acc: float, classify_acc: float, join_f1: float) -> dict:
    return {"filter": {"accuracy": filter_acc}, "classify": {"accuracy": classify_acc}, "join": {"top1_f1": join_f1}}


def test_the_default_is_the_smallest_model_that_meets_every_bar_else_the_most() -> None:
    small, mid, large = MODELS
    runs = {small: {"none": _result(0.99, 0.90, 0.85)}, mid: {"none": _result(0.96, 0.86, 0.81)},
            large: {"contextual": _result(1.0, 1.0, 1.0)}}
    assert choose_default(runs) == (small, "none", ["filter", "classify", "join"])
    runs[small]["none"]["join"]["top1_f1"] = 0.79  # below a bar: the next model that meets all three
    assert choose_default(runs) == (mid, "none", ["filter", "classify", "join"])
    runs = {mid: {"none": _result(0.48, 0.62, 0.47), "contextual": _result(0.96, 0.60, 0.50)},
            large: {"none": _result(0.89, 0.75, 0.88), "contextual": _result(0.95, 0.75, 0.94)}}
    assert choose_default(runs) == (large, "contextual", ["filter", "join"])  # none meets all: the most
    runs[large]["contextual"]["filter"]["accuracy"] = 0.94  # one bar each: the smaller model, then no calibration
    runs[mid]["none"]["filter"]["accuracy"] = 0.95
    assert choose_default(runs) == (mid, "none", ["filter"])
    del runs[mid]["none"]["join"]  # a partial result does not count
    assert choose_default(runs) == (mid, "contextual", ["filter"])


def test_the_registry_follows_the_rule_on_the_held_out_half() -> None:
    """The default model and each model's own calibration are what choose_default makes of the
    committed held-out results (bench/results/quality-heldout.json)."""
    runs = json.loads((RESULTS / "quality-heldout.json").read_text())["runs"]
    model, calibration, _ = choose_default(runs)
    assert (DEFAULT_MODEL, EMBEDDED[DEFAULT_MODEL].calibration) == (model, calibration)
    for name in runs:
        assert EMBEDDED[name].calibration == choose_default({name: runs[name]})[1], name
