"""Every combination of rewind, sharing, retention and borrowing gives the same answers as
computing every prompt from scratch, with exact accounting and no page leaks, in a large arena
and in a tight one of 64 pages that forces eviction and recomputation."""

import itertools

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
LABELS = [[20], [20, 21], [30, 31, 32]]


def _workload():
    rng = np.random.default_rng(11)
    trace = rng.integers(40, 300, size=200).tolist()
    docs = [trace[: 40 + 40 * i] for i in range(5)]  # incremental traces: shared prefixes
    docs += [rng.integers(40, 300, size=int(rng.integers(50, 110))).tolist() for _ in range(7)]
    docs += [docs[1], docs[7]]  # identical rows
    right_b = [rng.integers(40, 300, size=int(rng.integers(5, 25))).tolist() for _ in range(4)]
    right_c = [rng.integers(40, 300, size=int(rng.integers(5, 25))).tolist() for _ in range(3)]
    return docs, right_b, right_c


def _pipeline(engine: Engine, reuse: Reuse, threshold: float):
    """filter (2 predicates) -> classify of the passing rows -> two joins with them as anchor."""
    docs, right_b, right_c = _workload()
    pool = engine.pool

    def retain(*consumers):
        return Retain(frozenset(consumers))

    stats = []
    f, s = run_filter(engine, docs, [[9, 10], [11]], ANSWERS, threshold, reuse=reuse,
                      retain=retain("classify", "join_b", "join_c"))
    stats.append(s)
    pool.consumed("filter")
    kept = [d for d, ok in zip(docs, f.passed) if ok]
    c, s = run_classify(engine, kept, [12, 13], LABELS, reuse=reuse, retain=retain("join_b", "join_c"))
    stats.append(s)
    pool.consumed("classify")
    jb, s = run_join(engine, kept, right_b, PairQuestion([], [14, 15]), ANSWERS, reuse=reuse, retain=retain("join_c"))
    stats.append(s)
    pool.consumed("join_b")
    retained_before_last = pool.pages
    jc, s = run_join(engine, kept, right_c, PairQuestion([], [16]), ANSWERS, reuse=reuse)
    stats.append(s)
    pool.consumed("join_c")
    return (f, c, jb, jc), stats, retained_before_last


COMBINATIONS = [Reuse(*flags) for flags in itertools.product([True, False], repeat=4)]


@pytest.fixture(scope="module")
def threshold(tiny_llama):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=512, max_batch_tokens=256))
    docs, _, _ = _workload()
    f, _ = run_filter(engine, docs, [[9, 10], [11]], ANSWERS, threshold=0.0, reuse=Reuse.none())
    return float(np.percentile([min(p) for p in f.p_yes], 40))  # some rows fail each predicate


@pytest.fixture(scope="module")
def scratch(tiny_llama, threshold):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=512, max_batch_tokens=256))
    return _pipeline(engine, Reuse.none(), threshold)


@pytest.mark.parametrize("pages", [512, 64])
@pytest.mark.parametrize("reuse", COMBINATIONS, ids=lambda r: "".join("RSTBA"[i] if v else "-" for i, v in
                                                                       enumerate(vars(r).values())))
def test_answers_do_not_depend_on_reuse(tiny_llama, threshold, scratch, reuse, pages):
    engine = Engine(tiny_llama, PhysicalSettings(arena_pages=pages, max_batch_tokens=256))
    (f, c, jb, jc), stats, retained = _pipeline(engine, reuse, threshold)
    (f0, c0, jb0, jc0), stats0, _ = scratch
    assert f.passed == f0.passed and 0 < sum(f.passed) < len(f.passed)
    for x, y in zip(f.p_yes, f0.p_yes):
        assert [v is None for v in x] == [v is None for v in y]
        np.testing.assert_allclose([v for v in x if v is not None], [v for v in y if v is not None], atol=1e-4)
    assert c.labels == c0.labels
    np.testing.assert_allclose(c.probabilities, c0.probabilities, atol=1e-4)
    np.testing.assert_allclose(jb.p_yes, jb0.p_yes, atol=1e-4)
    np.testing.assert_allclose(jc.p_yes, jc0.p_yes, atol=1e-4)
    for s, s0 in zip(stats, stats0):
        assert s.tokens_computed + sum(s.tokens_reused.values()) == s.tokens_naive == s0.tokens_naive
        assert s.tokens_computed <= s0.tokens_computed
    if not reuse.retention:
        assert sum(s.tokens_reused["retention"] for s in stats) == 0
    elif reuse.rewind and pages == 512:
        assert retained > 0
        if reuse.sharing:  # without it, an identical row is a document of its own, kept once by key
            assert stats[1].document_tokens_computed == 0  # classify read every kept document from the pool
    elif reuse.rewind:
        assert stats[1].tokens_reused["retention"] > 0
        assert stats[1].document_tokens_computed > 0  # the kept documents outgrew the pool: some recomputed
    if not reuse.sharing:
        assert sum(s.tokens_reused["sharing"] for s in stats) == 0
    assert engine.free_pages == pages and len(engine.pool) == 0  # the last consumer released everything
