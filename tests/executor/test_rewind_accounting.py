"""The seed's KV-rewind example, on synthetic token ids and a tiny random Llama."""

import numpy as np

from quail.executor.engine import Engine, PhysicalSettings
from quail.ops.filter import run_filter
from quail.ops.prompts import YesNoTokens
from quail.reuse import Reuse

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])
NONE = Reuse.none()


def _docs(n, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(10, 300, size=length).tolist() for _ in range(n)]


def test_seed_second_predicate_costs_50000_tokens_instead_of_350000(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=4096, max_batch_tokens=8192))
    docs = _docs(1000, 300)
    questions = [[11] * 20, [12] * 50]
    # threshold 0: every review passes the first predicate, as in the seed's example
    result, stats = run_filter(engine, docs, questions, ANSWERS, threshold=0.0)
    assert all(result.passed)
    second = stats.steps["predicate_2"]
    assert second.tokens_computed == 50_000
    assert second.tokens_naive == 350_000
    assert stats.tokens_reused["rewind"] == 300_000
    assert stats.tokens_computed + sum(stats.tokens_reused.values()) == stats.tokens_naive
    assert engine.free_pages == engine.settings.arena_pages


def test_no_reuse_computes_the_naive_count(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=256, max_batch_tokens=1024))
    docs = _docs(20, 40)
    questions = [[11] * 5, [12] * 7, [13] * 3]
    everyone, _ = run_filter(engine, docs, questions, ANSWERS, threshold=0.0)
    # a threshold at the median of the first predicate's scores: chain mode stops half of the rows
    threshold = float(np.median([p[0] for p in everyone.p_yes]))
    chained, s1 = run_filter(engine, docs, questions, ANSWERS, threshold)
    scratch, s2 = run_filter(engine, docs, questions, ANSWERS, threshold, reuse=NONE)
    assert 0 < sum(p[1] is None for p in chained.p_yes) < len(docs)
    assert chained.passed == scratch.passed
    for a, b in zip(chained.p_yes, scratch.p_yes):
        assert [x is None for x in a] == [x is None for x in b]
        assert np.allclose([x for x in a if x is not None], [x for x in b if x is not None], atol=1e-5)
    assert s1.tokens_naive == s2.tokens_naive == s2.tokens_computed
    assert s2.tokens_reused == {"rewind": 0, "sharing": 0, "retention": 0, "store": 0}
    assert s1.tokens_computed < s2.tokens_computed
    assert engine.free_pages == engine.settings.arena_pages
