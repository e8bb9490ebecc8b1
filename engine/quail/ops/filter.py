"""LLM filter: several yes/no predicates per document, with KV rewind.

Rewind (docs/design.md#kv-rewind-chain-mode): process the document and the first question; if it passes,
keep the document's KV, drop the question's, ask the next question on the same state; release
the document's KV when it fails or nothing later needs it.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.program import Extend, Program, ProgramGen, program_pages
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.kinds.filter import keys, stored_prompts
from quail.ops.calibration import column_means
from quail.ops.from_store import with_stored
from quail.ops.prompts import Documents, YesNoTokens
from quail.ops.rewind import calibrated, decided, passed
from quail.ops.scoring import p_yes
from quail.ops.stored import Run, Value, YesNo, with_answers
from quail.prefix_tree import stem
from quail.reuse import Retain, Reuse


@dataclass
class FilterResult:
    p_yes: list[list[float | None]] = field(default_factory=list)  # None: rewind never asked it
    passed: list[bool] = field(default_factory=list)
    raw_p_yes: list[list[float | None]] = field(default_factory=list)  # before calibration
    from_store: set[int] = field(default_factory=set)  # rows answered from the answer store


def _rewound(engine: Engine, doc: list[int], questions: list[list[int]], yes_no: YesNoTokens, threshold: float,
           retain: Retain | None, bias: list[float] | None) -> Callable[[Seq | None], ProgramGen]:
    ids, n_yes = yes_no.ids, len(yes_no.yes)
    state = len(doc) + stem(questions)  # the questions' common opening stays with the document

    def program(seq: Seq | None) -> ProgramGen:
        seq = seq or Seq()
        probs = []
        for i, q in enumerate(questions):
            have = len(seq)  # the first question: a retained or shared prefix; then the kept state
            tokens = (doc + q)[have:]
            [[lp]] = yield [Extend(seq, tokens, [(len(tokens) - 1, ids)], max(len(doc) - have, 0),
                                   step=f"predicate_{i + 1}")]
            probs.append(p_yes(lp, n_yes))
            engine.cache.rewind(seq, state)
            if calibrated(probs, bias)[-1] < threshold:
                break
        engine.cache.rewind(seq, len(doc))
        engine.pool.keep_or_release(doc, seq, retain, passed(calibrated(probs, bias), questions, threshold))
        return probs

    return program


def _scratch(engine: Engine, doc: list[int], questions: list[list[int]], yes_no: YesNoTokens, threshold: float,
             retain: Retain | None, bias: list[float] | None) -> Callable[[Seq | None], ProgramGen]:
    """Every prompt from the document's start, or from the reused prefix it was handed."""
    ids, n_yes = yes_no.ids, len(yes_no.yes)

    def program(base: Seq | None) -> ProgramGen:
        probs = []
        for i, q in enumerate(questions):
            seq = engine.cache.fork(base, copy_credits=True) if base else Seq()
            tokens = doc[len(seq):] + q
            [[lp]] = yield [Extend(seq, tokens, [(len(tokens) - 1, ids)], len(doc) - len(base or ()),
                                   step=f"predicate_{i + 1}")]
            engine.cache.release(seq)
            probs.append(p_yes(lp, n_yes))
            if calibrated(probs, bias)[-1] < threshold:
                break
        if base is not None:  # a retained document is handed on even without rewinding
            engine.pool.keep_or_release(doc, base, retain, passed(calibrated(probs, bias), questions, threshold))
        return probs

    return program


def run_filter(
    engine: Engine,
    docs: list[list[int]],
    questions: list[list[int]],
    yes_no: YesNoTokens,
    threshold: float = 0.5,
    limit: int | None = None,
    reuse: Reuse = Reuse(),
    retain: Retain | None = None,
    progress: Callable[[int, int], None] | None = None,
    bias: list[float] | None = None,
    known: list[list[float | None]] | None = None,
) -> tuple[FilterResult, Stats]:
    """bias: each question's content-free P(yes) (ops/calibration.py), divided out before the
    threshold; None: the model's raw P(yes). known: per document, the raw P(yes) of each predicate
    that the answer store holds (None where it holds none): a document its stored answers decide
    is not computed. Not with a limit, which needs every row in input order."""
    answered = {} if known is None or limit is not None else \
        {i: raw for i, k in enumerate(known) if (raw := decided(k, questions, threshold, bias)) is not None}
    if answered:
        def rest(todo: list[int]) -> tuple[list[list[float | None]], Stats]:
            r, stats = run_filter(engine, [docs[i] for i in todo], questions, yes_no, threshold, None, reuse, retain,
                                  progress, bias)
            return r.raw_p_yes, stats

        raws, stats = with_stored(len(docs), {i: raw + [None] * (len(questions) - len(raw))
                                              for i, raw in answered.items()}, rest,
                                  lambda i: stored_prompts(docs[i], questions, len(answered[i])), progress)
        merged = FilterResult(raw_p_yes=raws, from_store=set(answered))
        for row in raws:
            asked = [p for p in row if p is not None]
            p = calibrated(asked, bias)
            merged.p_yes.append([*p, *[None] * (len(questions) - len(asked))])
            merged.passed.append(passed(p, questions, threshold))
        return merged, stats
    longest_q = max(len(q) for q in questions)
    retain = retain if reuse.retention else None
    make = _rewound if reuse.rewind else _scratch
    # one prompt at a time; rewinding, it extends the document in place
    programs = [Program(make(engine, doc, questions, yes_no, threshold, retain, bias),
                        program_pages(engine.cache.pages_for, reuse.rewind, len(doc) + longest_q, 0,
                                      0 if reuse.rewind else 1), doc) for doc in docs]
    result, total = FilterResult(), None
    if limit is not None:  # sharing reorders documents; a row limit needs them in input order
        reuse = Reuse(reuse.rewind, False, reuse.retention, reuse.borrowing)
    # with a limit, rows go in waves so that rows after the N-th passing one are never computed
    wave = max(len(programs), 1) if limit is None else max(4 * limit, 32)
    for lo in range(0, len(programs), wave):
        probs, stats = engine.run(programs[lo : lo + wave], progress, reuse)
        total = stats if total is None else total.merge(stats)
        for raw in probs:
            q, unasked = calibrated(raw, bias), [None] * (len(questions) - len(raw))
            result.p_yes.append([*q, *unasked])
            result.raw_p_yes.append([*raw, *unasked])
            result.passed.append(passed(q, questions, threshold))
        if limit is not None and sum(result.passed) >= limit:
            break
    if total is None:
        _, total = engine.run([])
    return result, total


class FilterAnswers(YesNo):
    """A filter's stored answers: each predicate's raw P(yes) (before calibration), a key each."""

    def values(self, result: FilterResult) -> Iterable[list[Value | None]]:
        return ([None if p is None else [p] for p in raw] for raw in result.raw_p_yes)


def stored_filter(run: Run, docs: Documents, questions: list[list[int]], yes_no: YesNoTokens, threshold: float = 0.5,
                  limit: int | None = None, probes: list[list[int]] | None = None) -> tuple[FilterResult, Stats]:
    """run_filter with the answers the store holds, keeping the new ones. `probes`: contextual
    calibration's content-free documents (ops/calibration.py), asked every predicate first (at
    threshold 0, keeping nothing); their mean P(yes) per predicate is divided out."""
    def asked(docs: list[list[int]], threshold: float, main: bool, bias: list[float] | None = None,
              limit: int | None = None) -> tuple[FilterResult, Stats]:
        return with_answers(run.stored, lambda key: keys(key, questions, docs, probes is not None), FilterAnswers(),
                            lambda known: run_filter(run.engine, docs, questions, yes_no, threshold, limit, run.reuse,
                                                     run.retain if main else None, run.progress if main else None,
                                                     bias, known))

    bias, probe_stats = None, None
    if probes is not None:
        probe, probe_stats = asked(probes, 0.0, False)
        bias = column_means(probe.p_yes)
    result, stats = asked(docs.tokens, threshold, True, bias, limit)
    stats.rows_truncated = docs.truncated
    return result, stats.merge(probe_stats) if probe_stats else stats
