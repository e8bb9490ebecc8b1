"""Writing after a document (an extract's or a map's): greedy, token by token on the paged arena,
the same with reuse as from scratch, and accounted exactly."""

import numpy as np
import pytest

from quail.executor.engine import Engine, PhysicalSettings
from quail.ops.filter import run_filter
from quail.ops.generate import run_generate
from quail.ops.grammar import FreeText
from quail.ops.prompts import YesNoTokens
from quail.reuse import Retain, Reuse

NONE = Reuse.none()
QUESTION = [9, 10, 11, 12]


def _docs(n, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(40, 300, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


@pytest.fixture
def engine(tiny_llama):
    e = Engine(tiny_llama, PhysicalSettings(arena_pages=96, max_batch_tokens=64))
    yield e
    e.pool.clear()
    assert e.free_pages == e.settings.arena_pages


def _stops(engine, docs, n=3):
    """Tokens the random model writes early for these documents: stops that end some rows."""
    r, _ = run_generate(engine, docs, QUESTION, FreeText([]), 4, NONE)
    return sorted({w.tokens[1] for w in r.written})[:n]


def test_writing_with_reuse_equals_writing_from_scratch_token_for_token(engine):
    docs = _docs(10, 5, 70, seed=1) + _docs(1, 5, 70, seed=1)  # a duplicate: written once, given twice
    grammar = FreeText(_stops(engine, docs))
    a, s1 = run_generate(engine, docs, QUESTION, grammar, 12)
    b, s2 = run_generate(engine, docs, QUESTION, grammar, 12, NONE)
    assert a.written == b.written
    assert any(w.truncated for w in a.written) and any(not w.truncated for w in a.written)
    for w in a.written:
        assert len(w.tokens) == 12 if w.truncated else len(w.tokens) < 12
        assert not set(w.tokens) & grammar.stop
    # the prompt side: computed + reused = naive, the naive count being each document and question once
    naive = sum(len(d) + len(QUESTION) for d in docs)
    assert s1.tokens_naive == s2.tokens_naive == s2.tokens_computed == naive
    assert s1.tokens_computed + sum(s1.tokens_reused.values()) == naive
    # every token chosen is counted once: what each row wrote, and the stop that ended it
    written = sum(len(w.tokens) + (not w.truncated) for w in b.written)
    assert s2.tokens_generated == written
    assert s1.tokens_generated == written - len(a.written[-1].tokens) - (not a.written[-1].truncated)


def test_rows_write_in_the_same_forward_passes(engine):
    docs = _docs(8, 5, 30, seed=2)
    _, stats = run_generate(engine, docs, QUESTION, FreeText([]), 10, NONE)
    # eight rows of ten tokens each: batched, far fewer passes than one row after another would take
    assert stats.tokens_generated == 80
    assert stats.forward_passes < 8 * 10 / 2


def test_writing_after_a_filter_reuses_the_retained_document(engine):
    docs = _docs(6, 20, 60, seed=3)
    keep = Retain(frozenset({"extract"}), 1.0, 1.0, owner="filter")
    run_filter(engine, docs, [[5, 6, 7]], YesNoTokens([5], [6]), 0.0, retain=keep)
    after = Retain(owner="extract")
    a, stats = run_generate(engine, docs, QUESTION, FreeText([]), 6, retain=after)
    assert stats.tokens_reused["retention"] == sum(len(d) for d in docs)
    assert stats.tokens_computed == len(docs) * len(QUESTION)
    b, _ = run_generate(engine, docs, QUESTION, FreeText([]), 6, NONE)
    assert a.written == b.written
