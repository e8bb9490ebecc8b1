"""Each row's vector, from the model's own hidden states: a join's candidates (ops/candidates.py).

A row is read once as a plain document, as a filter reads it, and its vector is the mean of its
text's hidden states after LlamaModel.vector_layer. The document's KV is then kept for the operators
that follow (a join's left rows are its anchors) like any other document's. A document handed over
with some of its text already computed (shared or retained KV) is computed again from its text's
start: KV keeps no hidden states. The answer store keeps each row's vector, so that a rerun over
the same table reads none of them again."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from quail.executor.engine import Engine
from quail.executor.program import Extend, Program, ProgramGen
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.ops.from_store import with_stored
from quail.ops.stored import Run, Value, with_answers
from quail.reuse import Retain, Reuse
from quail.store import VECTOR


def _read(engine: Engine, doc: list[int], start: int, retain: Retain | None) -> Callable[[Seq | None], ProgramGen]:
    def program(seq: Seq | None) -> ProgramGen:
        seq = seq or Seq()
        if len(seq) > start:
            engine.cache.rewind(seq, start)
        have = len(seq)
        [[vector]] = yield [Extend(seq, doc[have:], n_document=len(doc) - have,
                                   pool=range(start - have, len(doc) - have))]
        engine.pool.keep_or_release(doc, seq, retain)
        return vector

    return program


@dataclass
class VectorResult:
    vectors: np.ndarray  # [documents, hidden], float32
    from_store: set[int] = field(default_factory=set)  # rows whose vector the answer store held


def run_vectors(engine: Engine, docs: list[list[int]], start: int, reuse: Reuse = Reuse(),
                retain: Retain | None = None, progress: Callable[[int, int], None] | None = None,
                known: list[list[float] | None] | None = None) -> tuple[VectorResult, Stats]:
    """The vectors of documents whose text begins at token `start`. known: per document, the vector
    the answer store holds, or None: a document with one is not read."""
    held = {i: v for i, v in enumerate(known or []) if v is not None}
    if held:
        def rest(todo: list[int]) -> tuple[list, Stats]:
            r, stats = run_vectors(engine, [docs[i] for i in todo], start, reuse, retain, progress)
            return list(r.vectors), stats

        vectors, stats = with_stored(len(docs), held, rest, lambda i: [(len(docs[i]), None)], progress)
        return VectorResult(np.asarray(vectors, np.float32).reshape(len(docs), -1), set(held)), stats
    retain = retain if reuse.retention else None
    programs = [Program(_read(engine, doc, min(start, len(doc) - 1), retain), engine.cache.pages_for(len(doc)) + 1,
                        doc) for doc in docs]
    vectors, stats = engine.run(programs, progress, reuse)
    if not vectors:
        return VectorResult(np.empty((0, engine.model.cfg.hidden_size), np.float32)), stats
    return VectorResult(np.stack(vectors).astype(np.float32)), stats


class VectorAnswers:
    """Rows' vectors as the answer store keeps them: one key a row."""

    width = VECTOR

    def known(self, row: list[Value | None]) -> list[float] | None:
        return row[0]

    def values(self, result: VectorResult) -> Iterable[list[Value | None]]:
        return ([v.tolist()] for v in result.vectors)


def vector_keys(key: Callable[[str, list[int]], bytes], docs: list[list[int]], start: int,
                layer: int) -> list[list[bytes]]:
    """The answer store's key of each row's vector: its document, the layer its vector is read after
    and where its text begins."""
    return [[key(f"vector\x1f{layer}\x1f{start}", doc)] for doc in docs]


def stored_vectors(run: Run, docs: list[list[int]], start: int, layer: int) -> tuple[VectorResult, Stats]:
    """run_vectors with the vectors the store holds, keeping the new ones."""
    return with_answers(run.stored, lambda key: vector_keys(key, docs, start, layer), VectorAnswers(),
                        lambda known: run_vectors(run.engine, docs, start, run.reuse, run.retain, run.progress,
                                                  known))
