"""Each row's vector, from the model's own hidden states: a join's candidates (ops/candidates.py).

A row is read once as a plain document, as a filter reads it, and its vector is the mean of its
text's hidden states after LlamaModel.vector_layer. The document's KV is then kept for the operators
that follow (a join's left rows are its anchors) like any other document's. A document handed over
with some of its text already computed (shared or retained KV) is computed again from its text's
start: KV keeps no hidden states."""

from collections.abc import Callable

import numpy as np

from quail.executor.engine import Engine
from quail.executor.program import Extend, Program, ProgramGen
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.reuse import Retain, Reuse


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


def run_vectors(engine: Engine, docs: list[list[int]], start: int, reuse: Reuse = Reuse(),
                retain: Retain | None = None,
                progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, Stats]:
    """The vectors [len(docs), hidden] (float32) of documents whose text begins at token `start`."""
    retain = retain if reuse.retention else None
    programs = [Program(_read(engine, doc, min(start, len(doc) - 1), retain), engine.cache.pages_for(len(doc)) + 1,
                        doc) for doc in docs]
    vectors, stats = engine.run(programs, progress, reuse)
    if not vectors:
        return np.empty((0, engine.model.cfg.hidden_size), np.float32), stats
    return np.stack(vectors).astype(np.float32), stats
