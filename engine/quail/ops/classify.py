"""LLM classify: every label's full token sequence is scored by teacher forcing on top of the
rewound document+question state, so labels sharing a first token are told apart correctly, and a
label that begins another is scored as the answer that stops there (ops/answers.label_scores)."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.program import Extend, Program, ProgramGen, program_pages
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.kinds.base import OperatorTokens
from quail.kinds.classify import Classify, keys
from quail.ops.calibration import column_means, labels_given
from quail.ops.from_store import with_stored
from quail.ops.prompts import Documents
from quail.ops.scoring import label_probabilities, label_scores
from quail.ops.stored import Run, Value, with_answers
from quail.reuse import Retain, Reuse


@dataclass
class ClassifyResult:
    probabilities: list[list[float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)  # index of the best label per row
    from_store: set[int] = field(default_factory=set)  # rows answered from the answer store


def _teacher_forced(labels: list[list[int]], i: int) -> list[tuple[int, list[int] | None]]:
    """The reads that score label i's tokens after its first."""
    label = labels[i]
    return [(j, [label[j + 1]]) for j in range(len(label) - 1)]


def _rewinding(engine: Engine, doc: list[int], question: list[int], labels: list[list[int]],
               retain: Retain | None) -> Callable[[Seq | None], ProgramGen]:
    firsts = [label[0] for label in labels]
    multi = [i for i in range(len(labels)) if len(labels[i]) > 1]

    def program(seq: Seq | None) -> ProgramGen:
        seq = seq or Seq()
        have = len(seq)
        tokens = doc[have:] + question
        # A prompt of its own only if some label is one token long; otherwise it is the shared
        # head of the multi-token labels' prompts, charged to the first of them.
        prompt = len(multi) < len(labels)
        [[first]] = yield [Extend(seq, tokens, [(len(tokens) - 1, firsts)], len(doc) - have, prompt)]
        token_logprobs = [[x] for x in first.astype(float).tolist()]
        children = [engine.cache.fork(seq) for _ in multi]
        reads = yield [Extend(c, labels[i][:-1], _teacher_forced(labels, i)) for c, i in zip(children, multi)]
        for c, i, r in zip(children, multi, reads):
            token_logprobs[i] += [float(x[0]) for x in r]
            engine.cache.release(c)
        engine.cache.rewind(seq, len(doc))
        engine.pool.keep_or_release(doc, seq, retain)
        return label_probabilities(label_scores(labels, token_logprobs))

    return program


def _scratch(engine: Engine, doc: list[int], question: list[int], labels: list[list[int]],
             retain: Retain | None) -> Callable[[Seq | None], ProgramGen]:
    """Every label's prompt from the document's start, or from the reused prefix it was handed."""
    firsts = [label[0] for label in labels]
    multi = [i for i in range(len(labels)) if len(labels[i]) > 1]

    def program(base: Seq | None):
        def start() -> tuple[Seq, list[int]]:
            seq = engine.cache.fork(base, copy_credits=True) if base else Seq()
            return seq, doc[len(seq):] + question

        have = len(base) if base else 0
        requests = []
        if len(multi) < len(labels):
            seq, head = start()
            requests.append(Extend(seq, head, [(len(head) - 1, firsts)], len(doc) - have))
        for i in multi:
            seq, head = start()
            reads = [(len(head) - 1, [labels[i][0]])] + [(len(head) + j, ids) for j, ids in _teacher_forced(labels, i)]
            requests.append(Extend(seq, head + labels[i][:-1], reads, len(doc) - have))
        out = yield requests
        for r in requests:
            engine.cache.release(r.seq)
        if base is not None:
            engine.pool.keep_or_release(doc, base, retain)
        heads = out[0][0].astype(float).tolist() if len(multi) < len(labels) else [0.0] * len(labels)
        token_logprobs = [[x] for x in heads]
        for i, reads in zip(multi, out[len(out) - len(multi) :]):
            token_logprobs[i] = [float(x[0]) for x in reads]
        return label_probabilities(label_scores(labels, token_logprobs))

    return program


def prompt_extras(question: list[int], labels: list[list[int]]) -> list[int]:
    """The tokens after the document of each prompt a from-scratch run evaluates (the kind's prompt
    shape): the question, if some label is one token, and the question with each longer label but
    its last token."""
    prompts, _ = Classify().prompts(OperatorTokens([], [len(question)], [len(label) for label in labels]), None)
    return [extra for _, extra in prompts]


def run_classify(
    engine: Engine,
    docs: list[list[int]],
    question: list[int],
    labels: list[list[int]],
    reuse: Reuse = Reuse(),
    retain: Retain | None = None,
    progress: Callable[[int, int], None] | None = None,
    known: list[list[float] | None] | None = None,
) -> tuple[ClassifyResult, Stats]:
    """known: per document, its labels' probabilities from the answer store, or None: a document
    with stored ones is not computed."""
    found = {i: p for i, p in enumerate(known or []) if p is not None}
    if found:
        def rest(todo: list[int]) -> tuple[list[list[float]], Stats]:
            r, stats = run_classify(engine, [docs[i] for i in todo], question, labels, reuse, retain, progress)
            return r.probabilities, stats

        extras = prompt_extras(question, labels)
        probs, stats = with_stored(len(docs), found, rest, lambda i: [(len(docs[i]) + e, None) for e in extras],
                                   progress)
        return ClassifyResult(probs, [max(range(len(p)), key=p.__getitem__) for p in probs], set(found)), stats
    n_multi = sum(len(label) > 1 for label in labels)
    longest = max(len(label) for label in labels)
    retain = retain if reuse.retention else None
    programs = []
    make = _rewinding if reuse.rewind else _scratch
    # rewinding, a fork per longer label; from scratch, the question alone is a prompt too
    at_once = n_multi if reuse.rewind else 1 + n_multi
    for doc in docs:
        pages = program_pages(engine.cache.pages_for, reuse.rewind, len(doc) + len(question), longest, at_once)
        programs.append(Program(make(engine, doc, question, labels, retain), pages, doc))
    probs, stats = engine.run(programs, progress, reuse)
    best = [max(range(len(p)), key=p.__getitem__) for p in probs]
    return ClassifyResult(probs, best), stats


@dataclass(frozen=True)
class ClassifyAnswers:
    """A classify's stored answers: a row's labels' raw probabilities (before calibration), under one key."""

    width: int  # the number of labels

    def known(self, row: list[Value | None]) -> list[float] | None:
        return row[0]

    def values(self, result: ClassifyResult) -> Iterable[list[Value | None]]:
        return ([p] for p in result.probabilities)


def stored_classify(run: Run, docs: Documents, question: list[int], labels: list[list[int]],
                    probes: list[list[int]] | None = None) -> tuple[ClassifyResult, Stats]:
    """run_classify with the answers the store holds, keeping the new ones. `probes`: contextual
    calibration's content-free documents (ops/calibration.py), labelled after the documents (keeping
    nothing); their mean probability per label is divided out, and each row's best label chosen again."""
    def asked(docs: list[list[int]], main: bool) -> tuple[ClassifyResult, Stats]:
        return with_answers(run.stored, lambda key: keys(key, question, labels, docs, probes is not None),
                            ClassifyAnswers(len(labels)),
                            lambda known: run_classify(run.engine, docs, question, labels, run.reuse,
                                                       run.retain if main else None,
                                                       run.progress if main else None, known))

    result, stats = asked(docs.tokens, True)
    stats.rows_truncated = docs.truncated
    if probes is not None:
        probe, probe_stats = asked(probes, False)
        bias = column_means(probe.probabilities)
        result.probabilities = [labels_given(p, bias) for p in result.probabilities]
        result.labels = [max(range(len(p)), key=p.__getitem__) for p in result.probabilities]
        stats.merge(probe_stats)
    return result, stats
