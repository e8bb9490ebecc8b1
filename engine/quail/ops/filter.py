"""LLM filter: several yes/no predicates per document, in chain mode (KV rewind).

Chain mode, as the seed states it: process the document and the first question; if it passes,
keep the document's KV, drop the question's, ask the next question on the same state; release
the document's KV when it fails or nothing later needs it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.retention_pool import document_key
from quail.executor.scheduler import Extend, Program
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.ops.answers import p_yes
from quail.ops.prompts import AnswerTokens


@dataclass
class FilterResult:
    p_yes: list[list[float | None]] = field(default_factory=list)  # None: chain mode never asked it
    passed: list[bool] = field(default_factory=list)


def _chain(engine: Engine, doc, questions, answers, threshold, retain) -> Callable[[Seq | None], object]:
    ids, n_yes = answers.ids, len(answers.yes)

    def program(seq: Seq | None):
        fresh = seq is None
        seq = seq or Seq()
        probs = []
        for i, q in enumerate(questions):
            tokens = (doc if fresh and i == 0 else []) + q
            n_doc = len(doc) if fresh and i == 0 else 0
            [[lp]] = yield [Extend(seq, tokens, [(len(tokens) - 1, ids)], n_doc, step=f"predicate_{i + 1}")]
            probs.append(p_yes(lp, n_yes))
            engine.cache.rewind(seq, len(doc))
            if probs[-1] < threshold:
                break
        passed = len(probs) == len(questions) and probs[-1] >= threshold
        engine.pool.keep_or_release(doc, seq, passed and retain)
        return probs

    return program


def _scratch(engine: Engine, doc, questions, answers, threshold) -> Callable[[Seq | None], object]:
    ids, n_yes = answers.ids, len(answers.yes)

    def program(_):
        probs = []
        for i, q in enumerate(questions):
            seq = Seq()
            tokens = doc + q
            [[lp]] = yield [Extend(seq, tokens, [(len(tokens) - 1, ids)], len(doc), step=f"predicate_{i + 1}")]
            engine.cache.release(seq)
            probs.append(p_yes(lp, n_yes))
            if probs[-1] < threshold:
                break
        return probs

    return program


def run_filter(
    engine: Engine,
    docs: list[list[int]],
    questions: list[list[int]],
    answers: AnswerTokens,
    threshold: float = 0.5,
    limit: int | None = None,
    reuse: bool = True,
    retain: bool = False,
    progress=None,
) -> tuple[FilterResult, Stats]:
    longest_q = max(len(q) for q in questions)
    programs = []
    for doc in docs:
        if reuse:
            start = _chain(engine, doc, questions, answers, threshold, retain)
            claim = document_key(doc)
        else:
            start, claim = _scratch(engine, doc, questions, answers, threshold), None
        programs.append(Program(start, engine.cache.pages_for(len(doc) + longest_q), claim=claim))
    result, total = FilterResult(), None
    # with a limit, rows go in waves so that rows after the N-th passing one are never computed
    wave = max(len(programs), 1) if limit is None else max(4 * limit, 32)
    for lo in range(0, len(programs), wave):
        probs, stats = engine.run(programs[lo : lo + wave], progress)
        total = stats if total is None else total.merge(stats)
        for p in probs:
            passed = len(p) == len(questions) and p[-1] >= threshold
            result.p_yes.append(p + [None] * (len(questions) - len(p)))
            result.passed.append(passed)
        if limit is not None and sum(result.passed) >= limit:
            break
    if total is None:
        _, total = engine.run([])
    return result, total
