"""Concurrent Engine.run calls (the worker's jobs) share forward passes, keep their own accounting
and answers, and a failing or cancelled job never disturbs the others or leaks pages."""

import threading

import numpy as np
import pytest

from quail.executor.engine import Engine, PhysicalSettings
from quail.executor.program import Extend, Program
from quail.executor.sequence import Seq
from quail.kinds.join import PairQuestion
from quail.ops.classify import run_classify
from quail.ops.filter import run_filter
from quail.ops.join import run_join
from quail.ops.prompts import YesNoTokens
from quail.reuse import Retain, Reuse

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])
LABELS = [[20], [20, 21], [30, 31]]


def _docs(n, seed, lo=40, hi=120):
    rng = np.random.default_rng(seed)
    return [rng.integers(40, 300, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def _engine(model, pages=512):
    return Engine(model, PhysicalSettings(arena_pages=pages, max_batch_tokens=128))


def _together(engine, first, *others):
    """Runs `first` on this thread; once it has made one pass, starts the others and lets it go on
    only when they have posted their groups, so every job is in flight at once."""
    results, errors, threads = {}, {}, []

    def call(name, fn, **kw):
        try:
            results[name] = fn(**kw)
        except Exception as e:
            errors[name] = e

    def gate(rows, tokens):
        if not threads:
            threads.extend(threading.Thread(target=call, args=(name, fn)) for name, fn in others)
            for t in threads:
                t.start()
            while len(engine.scheduler.driver.inbox) < len(others):
                threading.Event().wait(0.001)

    call(first[0], first[1], progress=gate)
    for t in threads:
        t.join()
    return results, errors


def test_jobs_share_passes_and_answer_as_if_alone(tiny_llama):
    docs, others, partners = _docs(16, 1), _docs(10, 2), _docs(5, 3, 10, 30)
    alone = _engine(tiny_llama)
    f_ref, f_stats = run_filter(alone, docs, [[11, 12], [13]], ANSWERS, threshold=0.0)
    c_ref, c_stats = run_classify(alone, others, [9, 10], LABELS)
    j_ref, j_stats = run_join(alone, others[:4], partners, PairQuestion([], [14, 15]), ANSWERS)

    engine = _engine(tiny_llama)
    results, errors = _together(
        engine,
        ("filter", lambda progress: run_filter(engine, docs, [[11, 12], [13]], ANSWERS, threshold=0.0,
                                               progress=progress)),
        ("classify", lambda: run_classify(engine, others, [9, 10], LABELS)),
        ("join", lambda: run_join(engine, others[:4], partners, PairQuestion([], [14, 15]), ANSWERS)),
    )
    assert not errors
    (f, fs), (c, cs), (j, js) = results["filter"], results["classify"], results["join"]
    assert f.passed == f_ref.passed
    np.testing.assert_allclose([p[1] for p in f.p_yes], [p[1] for p in f_ref.p_yes], atol=1e-4)
    np.testing.assert_allclose(c.probabilities, c_ref.probabilities, atol=1e-4)
    np.testing.assert_allclose(j.p_yes, j_ref.p_yes, atol=1e-4)
    for mine, ref in ((fs, f_stats), (cs, c_stats), (js, j_stats)):
        assert (mine.tokens_computed, mine.tokens_naive, mine.tokens_reused) == \
               (ref.tokens_computed, ref.tokens_naive, ref.tokens_reused)
    # the passes were shared: fewer of them than the jobs counted, each counting those it was in
    assert engine.scheduler.forward_passes < fs.forward_passes + cs.forward_passes + js.forward_passes
    assert engine.free_pages == engine.settings.arena_pages


def _failing(after: int):
    """A program that raises after `after` requests, holding pages no one knows of."""
    def program(seq):
        seq = seq or Seq()
        for k in range(after):
            yield [Extend(seq, list(range(40, 56)), [(15, [5])])]
        raise RuntimeError("a bug in an operator")
    return Program(program, pages=after + 1)


def test_a_failing_job_leaves_the_others_and_the_retained_kv_alone(tiny_llama):
    engine = _engine(tiny_llama)
    kept = _docs(6, 4)
    run_filter(engine, kept, [[11]], ANSWERS, threshold=0.0, retain=Retain())
    retained = engine.pool.pages
    assert retained > 0
    docs = _docs(12, 5)
    ref, _ = run_filter(_engine(tiny_llama), docs, [[11, 12]], ANSWERS, threshold=0.0)

    results, errors = _together(
        engine,
        ("good", lambda progress: run_filter(engine, docs, [[11, 12]], ANSWERS, threshold=0.0, progress=progress)),
        ("bad", lambda: engine.run([_failing(3), _failing(1)])),
    )
    assert isinstance(errors["bad"], RuntimeError) and "good" not in errors
    assert results["good"][0].passed == ref.passed
    # the failed job's pages were collected; the pool's KV survived and is still right
    assert engine.free_pages + retained == engine.settings.arena_pages
    again, stats = run_classify(engine, kept, [9], LABELS)
    scratch, _ = run_classify(_engine(tiny_llama), kept, [9], LABELS, reuse=Reuse.none())
    assert stats.tokens_reused["retention"] == sum(map(len, kept))
    np.testing.assert_allclose(again.probabilities, scratch.probabilities, atol=1e-4)
    assert engine.free_pages == engine.settings.arena_pages


class _Stop(Exception):
    pass


def test_a_cancelled_job_finishes_its_rows_in_flight_and_starts_no_more(tiny_llama):
    engine = _engine(tiny_llama, pages=64)
    docs = _docs(40, 6)
    calls = []

    def cancel_after_first_pass(rows, tokens):
        calls.append(rows)
        raise _Stop("cancelled")

    with pytest.raises(_Stop):
        run_filter(engine, docs, [[11]], ANSWERS, progress=cancel_after_first_pass)
    assert len(calls) == 1  # progress is not called again once the job is stopping
    assert engine.free_pages == 64
    other, _ = run_filter(engine, docs[:3], [[11]], ANSWERS)  # the engine goes on
    assert len(other.passed) == 3
