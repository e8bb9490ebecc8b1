"""Writing after a document: an extract's JSON or a map's text, greedily, token by token on the paged
arena. Each row is a program whose prompt is the document (its KV retained or shared, as a filter's)
and a question; each token it writes is then fed back, with the tokens the grammar forces after it
(an extract's keys and punctuation), as one request, so rows' writing steps share forward passes
with each other and with other rows' prompts (the scheduler batches them). The document's KV is
rewound to and kept for later operators, as every kind keeps it."""

from collections.abc import Callable
from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.program import ALL, Extend, Program, ProgramGen, program_pages
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.ops.from_store import with_stored
from quail.ops.grammar import Grammar
from quail.reuse import Retain, Reuse


@dataclass(frozen=True)
class Written:
    """One row's output: the tokens written (a stop token not among them), and whether the row
    reached the most it may write before its output was complete."""

    tokens: tuple[int, ...]
    truncated: bool


@dataclass
class GenerateResult:
    written: list[Written] = field(default_factory=list)
    from_store: set[int] = field(default_factory=set)  # rows answered from the answer store


def _program(engine: Engine, doc: list[int], question: list[int], grammar: Grammar, most: int,
             retain: Retain | None, forced: list[int]) -> Callable[[Seq | None], ProgramGen]:
    """forced[0] counts the tokens the grammar forced: chosen without a read of their own."""
    def program(seq: Seq | None) -> ProgramGen:
        seq = seq or Seq()
        have = len(seq)
        tokens = doc[have:] + question
        matcher = grammar.matcher()
        [[row]] = yield [Extend(seq, tokens, [(len(tokens) - 1, ALL)], len(doc) - have, writes=True)]
        out: list[int] = []
        token: int | None = matcher.choose(row)
        while True:
            # the chosen token, then each the grammar forces: fed together, read at the last
            feed: list[int] = []
            while token is not None and matcher.accept(token):
                out.append(token)
                feed.append(token)
                if matcher.stopped or len(out) == most:
                    break
                token = matcher.forced()
                forced[0] += token is not None
            if matcher.stopped or len(out) == most:
                break
            [[row]] = yield [Extend(seq, feed, [(len(feed) - 1, ALL)], prompt=False, writes=True)]
            token = matcher.choose(row)
        engine.cache.rewind(seq, min(len(seq), len(doc)))
        engine.pool.keep_or_release(doc, seq, retain)
        return Written(tuple(out), not matcher.stopped)

    return program


def run_generate(engine: Engine, docs: list[list[int]], question: list[int], grammar: Grammar, most: int,
                 reuse: Reuse = Reuse(), retain: Retain | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 known: list[Written | None] | None = None) -> tuple[GenerateResult, Stats]:
    """Each document's output after `question`, at most `most` tokens. known: per document, its
    output from the answer store, or None: a document with one is not computed."""
    found = {i: w for i, w in enumerate(known or []) if w is not None}
    if found:
        def rest(todo: list[int]) -> tuple[list[Written], Stats]:
            r, stats = run_generate(engine, [docs[i] for i in todo], question, grammar, most, reuse, retain,
                                    progress)
            return r.written, stats

        written, stats = with_stored(len(docs), found, rest, lambda i: [(len(docs[i]) + len(question), None)],
                                     progress)
        return GenerateResult(written, set(found)), stats
    retain = retain if reuse.retention else None
    programs, forced = [], [0]
    for doc in docs:
        # one prompt, written on to its end, on top of a reused base whose partial page it may copy
        pages = program_pages(engine.cache.pages_for, False, len(doc) + len(question), most, 1)
        programs.append(Program(_program(engine, doc, question, grammar, most, retain, forced), pages, doc))
    written, stats = engine.run(programs, progress, reuse)
    stats.tokens_generated += forced[0]
    return GenerateResult(written), stats
