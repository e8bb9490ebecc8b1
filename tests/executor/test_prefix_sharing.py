"""Prefix sharing in the executor: the seed's example, parents that finish early, duplicates."""

import numpy as np

from quail.executor.engine import Engine, PhysicalSettings
from quail.ops.filter import run_filter
from quail.ops.prompts import YesNoTokens
from quail.reuse import Reuse

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])
NO_SHARING = Reuse(sharing=False)


def _trace(n, seed=0):
    return np.random.default_rng(seed).integers(10, 300, size=n).tolist()


def _same(a, b):
    assert a.passed == b.passed
    np.testing.assert_allclose([p[0] for p in a.p_yes], [p[0] for p in b.p_yes], atol=1e-4)


def test_seed_example_computes_1916_document_tokens_instead_of_4300(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=1024, max_batch_tokens=4096))
    trace = _trace(1900)
    docs = [trace[:1000], trace[:1400], trace[:1900]]
    shared, s1 = run_filter(engine, docs, [[11, 12]], ANSWERS)
    alone, s2 = run_filter(engine, docs, [[11, 12]], ANSWERS, reuse=NO_SHARING)
    _same(shared, alone)
    assert s1.document_tokens_computed == 1916
    assert s2.document_tokens_computed == 4300
    assert s1.tokens_reused["sharing"] == 992 + 1392
    assert s1.tokens_computed + sum(s1.tokens_reused.values()) == s1.tokens_naive == s2.tokens_naive
    assert engine.free_pages == 1024


def test_children_wait_for_the_parent_and_keep_its_pages_after_it_fails(tiny_llama):
    """A parent that fails the first predicate releases its KV; its children's holds keep the
    shared pages, and the answers equal those computed without sharing."""
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=128, max_batch_tokens=64))
    base = _trace(70, seed=1)
    docs = [base[:40] + _trace(9, seed=i) for i in range(2, 8)] + [base + _trace(5, seed=9)]
    questions = [[11, 12], [13]]
    everyone, _ = run_filter(engine, docs, questions, ANSWERS, threshold=0.0, reuse=NO_SHARING)
    threshold = float(np.median([p[0] for p in everyone.p_yes]))
    a, s1 = run_filter(engine, docs, questions, ANSWERS, threshold)
    b, _ = run_filter(engine, docs, questions, ANSWERS, threshold, reuse=NO_SHARING)
    assert a.passed == b.passed and 0 < sum(a.passed) < len(docs)
    for x, y in zip(a.p_yes, b.p_yes):
        assert [v is None for v in x] == [v is None for v in y]
        np.testing.assert_allclose([v for v in x if v is not None], [v for v in y if v is not None], atol=1e-4)
    assert s1.tokens_reused["sharing"] == 32 * (len(docs) - 1)  # two whole pages each, after the first
    assert engine.free_pages == 128


def test_identical_documents_are_computed_once(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=256, max_batch_tokens=256))
    one, two = _trace(30, seed=3), _trace(50, seed=4)
    docs = [one, two, one, one, two]
    a, s1 = run_filter(engine, docs, [[11], [12]], ANSWERS, threshold=0.0)
    b, s2 = run_filter(engine, docs, [[11], [12]], ANSWERS, threshold=0.0, reuse=Reuse.none())
    _same(a, b)
    assert s1.duplicates == 3
    assert s1.document_tokens_computed == 80
    assert s1.tokens_naive == s2.tokens_computed
    assert s1.tokens_reused["sharing"] == 2 * (30 + 1 + 30 + 1) + (50 + 1 + 50 + 1)
    assert s1.tokens_computed + sum(s1.tokens_reused.values()) == s1.tokens_naive


def test_a_row_limit_switches_sharing_off(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=256, max_batch_tokens=256))
    trace = _trace(200, seed=5)
    docs = [trace[: 40 + 10 * i] for i in range(12)]
    _, stats = run_filter(engine, docs, [[11]], ANSWERS, threshold=0.0, limit=2)
    assert stats.tokens_reused["sharing"] == 0 and stats.duplicates == 0


def test_a_child_that_claims_retained_kv_takes_no_hold(tiny_llama):
    """The child's whole document is retained, so it starts before its parent writes the shared
    pages; the parent must not then make it a hold that nobody releases."""
    from quail.reuse import Retain

    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=128, max_batch_tokens=256))
    trace = _trace(90, seed=6)
    parent, child = trace[:50], trace[:90]
    run_filter(engine, [child], [[11]], ANSWERS, threshold=0.0, retain=Retain())
    a, stats = run_filter(engine, [parent, child], [[12]], ANSWERS, threshold=0.0)
    b, _ = run_filter(engine, [parent, child], [[12]], ANSWERS, threshold=0.0, reuse=Reuse.none())
    _same(a, b)
    assert stats.tokens_reused["retention"] == 90
    assert engine.free_pages == 128
