"""Predicted accounting equals the actual one where nothing is uncertain (no filter upstream)."""

import numpy as np

from quail.executor.engine import Engine, PhysicalSettings
from quail.kinds.base import OperatorTokens
from quail.kinds.join import PairQuestion
from quail.ops.classify import run_classify
from quail.ops.join import run_join
from quail.ops.prompts import YesNoTokens
from quail.planner.plan import plan
from quail.planner.predict import predict
from quail.prefix_tree import stem
from quail.specs import OperatorSpec

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])


def test_classify_and_join_predictions_match_the_run(tiny_llama):
    rng = np.random.default_rng(3)
    trace = rng.integers(40, 300, size=120).tolist()
    docs = [trace[: 40 + 20 * i] for i in range(4)] + [rng.integers(40, 300, size=50).tolist() for _ in range(3)]
    labels = [[20], [21, 22], [23, 24, 25]]
    question = [9, 10, 11]
    partners = [[60, 61] + rng.integers(40, 300, size=8).tolist() for _ in range(3)]
    condition = [12, 13]
    specs = [OperatorSpec("c", "classify", ("t",), ("text",), ("Q?",), ("a", "b", "d")),
             OperatorSpec("j", "join", ("t", "u"), ("text", "x"), ("C?",))]
    p = plan(specs, retention_on=False)
    tokens = {"c": OperatorTokens(docs, [len(question)], [len(x) for x in labels]),
              "j": OperatorTokens(docs, [len(condition)], partners=[len(x) for x in partners],
                                  stem=stem([x + condition for x in partners]))}
    predicted = predict(p, tokens)
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=256, max_batch_tokens=256))
    _, c = run_classify(engine, docs, question, labels)
    _, j = run_join(engine, docs, partners, PairQuestion([], condition), ANSWERS)
    for name, actual in (("c", c), ("j", j)):
        guess = predicted[name].rounded()
        assert guess["tokens_naive"] == actual.tokens_naive
        assert guess["tokens_computed"] == actual.tokens_computed
        assert guess["tokens_reused"] == actual.tokens_reused


def test_a_filter_prediction_uses_the_selectivity():
    specs = [OperatorSpec("f", "filter", ("t",), ("text",), ("A?", "B?"))]
    p = plan(specs, {specs[0].fingerprint(): 0.25})
    docs = [[1] * 100, [2] * 100]
    guess = predict(p, {"f": OperatorTokens(docs, [10, 10])})["f"]
    # the second predicate is asked with 0.25 ** (1 / 2) = 0.5
    assert guess.tokens_naive == 2 * (110 + 0.5 * 110)
    assert guess.tokens_computed == 2 * (100 + 10 + 0.5 * 10)
