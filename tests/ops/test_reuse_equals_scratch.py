"""KV reuse never changes an answer: rewind and retention against from-scratch computation."""

import numpy as np
import pytest

from quail.executor.engine import Engine, PhysicalSettings
from quail.kinds.join import PairQuestion
from quail.ops.classify import run_classify
from quail.ops.filter import run_filter
from quail.ops.join import run_join
from quail.ops.prompts import YesNoTokens
from quail.reuse import Retain, Reuse

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])
NONE = Reuse.none()
# labels that share first tokens, of one, two and three tokens
LABELS = [[20], [20, 21], [20, 21, 22], [30, 31]]


def _docs(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(40, 300, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def _accounted(stats):
    assert stats.tokens_computed + sum(stats.tokens_reused.values()) == stats.tokens_naive


@pytest.fixture
def engine(tiny_llama):
    e = Engine(tiny_llama, PhysicalSettings(arena_pages=64, max_batch_tokens=256))
    yield e
    e.pool.clear()
    assert e.free_pages == e.settings.arena_pages


def test_classify_teacher_forcing_with_shared_first_tokens(engine):
    docs = _docs(12, 5, 60, seed=3)
    question = [9, 10, 11]
    a, s1 = run_classify(engine, docs, question, LABELS)
    b, s2 = run_classify(engine, docs, question, LABELS, reuse=NONE)
    np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-5)
    assert a.labels == b.labels
    assert s1.tokens_naive == s2.tokens_naive == s2.tokens_computed
    _accounted(s1)
    # one head prompt (for the one-token label) plus three label prompts per document
    head = sum(len(d) + 3 for d in docs)
    assert s1.tokens_reused["rewind"] == 3 * head
    # probabilities of distinct label sequences differ, and sum to 1
    assert np.allclose(np.sum(a.probabilities, axis=1), 1.0)


@pytest.mark.parametrize("lead", [[], [20, 21, 22, 23]])  # the condition after each partner, or before it
def test_join_rewinds_the_anchor_for_each_partner(engine, lead):
    anchors, partners = _docs(5, 10, 50, seed=4), _docs(7, 3, 30, seed=5)
    condition = PairQuestion(lead, [12, 13, 14])
    a, s1 = run_join(engine, anchors, partners, condition, ANSWERS)
    b, s2 = run_join(engine, anchors, partners, condition, ANSWERS, reuse=NONE)
    np.testing.assert_allclose(a.p_yes, b.p_yes, atol=1e-5)
    _accounted(s1)
    assert s1.tokens_naive == s2.tokens_computed
    assert s1.tokens_reused["rewind"] == sum(len(x) + len(lead) for x in anchors) * (len(partners) - 1)


def test_classify_after_filter_reuses_retained_document_kv(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=256, max_batch_tokens=256))
    docs = _docs(10, 20, 70, seed=6)
    questions = [[9, 10], [11, 12, 13]]
    passed, s_f = run_filter(engine, docs, questions, ANSWERS, threshold=0.0, retain=Retain())
    assert all(passed.passed) and len(engine.pool) == len(docs)
    question = [14, 15]
    a, s_c = run_classify(engine, docs, question, LABELS)
    assert len(engine.pool) == 0
    b, _ = run_classify(engine, docs, question, LABELS, reuse=NONE)
    np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-5)
    assert s_c.tokens_reused["retention"] == sum(len(d) for d in docs)
    assert s_c.document_tokens_computed == 0
    _accounted(s_c)
    assert engine.free_pages == 256


def test_eviction_keeps_what_waiting_work_claims_soonest(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=40, max_batch_tokens=256))
    docs = _docs(8, 40, 48, seed=10)  # 3-4 pages each
    run_filter(engine, docs, [[9]], ANSWERS, threshold=0.0, retain=Retain())
    a, stats = run_classify(engine, docs, [14, 15], LABELS)
    b, _ = run_classify(engine, docs, [14, 15], LABELS, reuse=NONE)
    np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-5)
    assert 0 < stats.tokens_reused["retention"] < sum(len(d) for d in docs)
    _accounted(stats)
    assert engine.free_pages == 40


def test_retained_kv_is_evicted_when_admission_needs_pages(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=24, max_batch_tokens=128))
    docs = _docs(6, 40, 60, seed=7)
    run_filter(engine, docs, [[9]], ANSWERS, threshold=0.0, retain=Retain())
    assert engine.pool.pages > 0
    other = _docs(6, 40, 60, seed=8)
    a, _ = run_filter(engine, other, [[9]], ANSWERS)
    b, _ = run_filter(engine, other, [[9]], ANSWERS, reuse=NONE)
    np.testing.assert_allclose([p[0] for p in a.p_yes], [p[0] for p in b.p_yes], atol=1e-5)
    engine.pool.clear()
    assert engine.free_pages == 24


def test_limit_returns_rows_in_input_order(engine):
    docs = _docs(80, 5, 20, seed=9)
    full, _ = run_filter(engine, docs, [[9]], ANSWERS, threshold=0.0)
    limited, stats = run_filter(engine, docs, [[9]], ANSWERS, threshold=0.0, limit=3)
    assert len(limited.passed) < len(full.passed)  # later rows were never computed
    assert limited.p_yes == full.p_yes[: len(limited.p_yes)]


def test_a_common_opening_of_the_questions_is_kept_with_the_document(engine):
    """Chain mode rewinds only past the questions' (or partners') shared opening tokens."""
    docs = _docs(6, 10, 40, seed=12)
    questions = [[9, 10, 11, 12], [9, 10, 11, 13, 14], [9, 10, 15]]
    a, s1 = run_filter(engine, docs, questions, ANSWERS, threshold=0.0)
    b, _ = run_filter(engine, docs, questions, ANSWERS, threshold=0.0, reuse=NONE)
    np.testing.assert_allclose(a.p_yes, b.p_yes, atol=1e-5)
    _accounted(s1)
    # each document and the opening [9, 10] once, then each question's own tokens
    assert s1.tokens_computed == sum(len(d) + 2 for d in docs) + len(docs) * (2 + 3 + 1)

    anchors = _docs(3, 10, 30, seed=13)
    partners = [[50, 51, 52] + p for p in _docs(4, 3, 12, seed=14)]
    a, s2 = run_join(engine, anchors, partners, PairQuestion([], [12, 13]), ANSWERS)
    b, _ = run_join(engine, anchors, partners, PairQuestion([], [12, 13]), ANSWERS, reuse=NONE)
    np.testing.assert_allclose(a.p_yes, b.p_yes, atol=1e-5)
    _accounted(s2)
    assert s2.tokens_computed == sum(len(x) + 3 for x in anchors) + len(anchors) * sum(len(p) - 3 + 2 for p in partners)
