"""Writing after a document: an extract's JSON or a map's text, greedily, token by token on the paged
arena. Each row is a program whose prompt is the document (its KV retained or shared, as a filter's)
and a question; each token it writes is then fed back, with the tokens the grammar forces after it
(an extract's keys and punctuation), as one request, so rows' writing steps share forward passes
with each other and with other rows' prompts (the scheduler batches them). The document's KV is
rewound to and kept for later operators, as every kind keeps it. The answer store keeps each row's
output (`WrittenAnswers`, `stored_generate`)."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.program import ALL, Extend, Program, ProgramGen, program_pages
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.kinds.writes import keys
from quail.ops.from_store import with_stored
from quail.ops.grammar import Grammar
from quail.ops.stored import Run, Value, with_answers
from quail.reuse import Retain, Reuse
from quail.store import WRITTEN


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


@dataclass(frozen=True)
class WrittenAnswers:
    """Written outputs, one a row, each stored as whether it was truncated (1.0 or 0.0), then its
    tokens. `readable`: whether an output can be read as its kind's result; a stored one that
    cannot, or that holds a token the model lacks, is a miss, and a computed one that cannot is not
    stored."""

    vocab: int
    readable: Callable[[Written], bool]
    width = WRITTEN

    def known(self, row: list[Value | None]) -> Written | None:
        [value] = row
        if value is None:
            return None
        w = Written(tuple(int(t) for t in value[1:]), bool(value[0]))
        return w if all(t < self.vocab for t in w.tokens) and self.readable(w) else None

    def values(self, result: GenerateResult) -> Iterable[list[Value | None]]:
        return ([[float(w.truncated), *map(float, w.tokens)] if self.readable(w) else None] for w in result.written)


def stored_generate(run: Run, docs: list[list[int]], question: list[int], grammar: Grammar, most: int, asked: str,
                    vocab: int, readable: Callable[[Written], bool] = lambda w: True) -> tuple[GenerateResult, Stats]:
    """run_generate with the outputs the store holds, keeping the new ones, each keyed by `asked` (the
    kind's: kinds/extract.py, kinds/map.py) and its document; `vocab`: the model's tokens."""
    return with_answers(run.stored, lambda key: keys(key, asked, docs), WrittenAnswers(vocab, readable),
                        lambda known: run_generate(run.engine, docs, question, grammar, most, run.reuse, run.retain,
                                                   run.progress, known))
