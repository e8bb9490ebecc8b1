"""Runs programs (one per document or anchor) through shared, token-budgeted forward passes.

A program is a generator: it yields a list of `Extend` requests and receives, for each, the
log-probs it asked to read. Admission reserves the most pages a program can hold at once, so
admitted work always finishes and the scheduler never deadlocks.
"""

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quail.errors import QuailError
from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.retention_pool import RetentionPool
from quail.executor.sequence import Seq
from quail.executor.stats import Stats

Reads = list[np.ndarray]
ProgramGen = Generator[list["Extend"], list[Reads], Any]


@dataclass
class Extend:
    """Append `tokens` to `seq` and read next-token log-probs of `ids` at each (offset, ids).

    `prompt`: the sequence after this request is a prompt a from-scratch run would evaluate.
    `n_document`: how many leading tokens are document text (the rest count as question tokens).
    """

    seq: Seq
    tokens: list[int]
    reads: list[tuple[int, list[int]]] = field(default_factory=list)
    n_document: int = 0
    prompt: bool = True
    step: str | None = None


@dataclass
class Program:
    start: Callable[[Seq | None], ProgramGen]  # receives the retained KV it claimed, if any
    pages: int  # the most pages the program holds at any time
    claim: str | None = None  # retention-pool key of the document KV it would reuse
    rows: int = 1  # progress units it completes


@dataclass
class _Request:
    ext: Extend
    done: int = 0
    reads: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        return len(self.ext.tokens) - self.done


@dataclass
class _Active:
    index: int
    program: Program
    gen: ProgramGen
    requests: list[_Request]


class Scheduler:
    def __init__(self, runner: ModelRunner, cache: PagedKVCache, pool: RetentionPool, max_batch_tokens: int):
        self.runner = runner
        self.cache = cache
        self.pool = pool
        self.max_batch_tokens = max_batch_tokens

    def run(self, programs: list[Program], stats: Stats, progress: Callable[[int, int], None] | None = None) -> list:
        total = self.cache.pages.num_pages
        for i, p in enumerate(programs):
            if p.pages > total:
                raise QuailError(
                    f"--arena-pages {total} is too small: row {i} needs {p.pages} pages "
                    f"({p.pages * self.cache.page_size} tokens with its question); use at least {p.pages}"
                )
        results: list = [None] * len(programs)
        waiting = deque(enumerate(programs))
        active: list[_Active] = []
        reserved = 0
        while waiting or active:
            while waiting:
                index, program = waiting[0]
                claimed = self.pool.take(program.claim) if program.claim else None

                def fits() -> bool:
                    return reserved + program.pages <= total - self.pool.pages

                if not fits():
                    next_use = {p.claim: i for i, p in reversed(waiting) if p.claim}
                    while not fits() and self.pool.evict_one(next_use):
                        pass
                if not fits():
                    if claimed is not None:
                        self.pool.put(program.claim, claimed)
                    break
                waiting.popleft()
                reserved += program.pages
                act = _Active(index, program, program.start(claimed), [])
                self._advance(act, None, results)
                if act.requests:
                    active.append(act)
                else:
                    reserved -= program.pages
            chunks, owners = self._batch(active, stats)
            if not chunks:
                continue
            outputs = self.runner.run(chunks)
            stats.forward_passes += 1
            for (req, offset), chunk, out in zip(owners, chunks, outputs):
                for r, row in zip(chunk.reads, out):
                    req.reads[offset + r] = row
                req.done += len(chunk.tokens)
            still = []
            finished_rows = 0
            for act in active:
                if any(r.remaining for r in act.requests):
                    still.append(act)
                    continue
                self._advance(act, [self._finish(r, stats) for r in act.requests], results)
                if act.requests:
                    still.append(act)
                else:
                    reserved -= act.program.pages
                    finished_rows += act.program.rows
            active = still
            if progress is not None:
                progress(finished_rows, sum(len(c.tokens) for c in chunks))
        return results

    def _advance(self, act: _Active, sent: list[Reads] | None, results: list) -> None:
        exts = []
        try:
            while not exts:  # a program may yield nothing to do (say, no multi-token labels)
                exts = act.gen.send(sent)
                sent = []
        except StopIteration as stop:
            results[act.index] = stop.value
        act.requests = [_Request(e) for e in exts]

    def _batch(self, active: list[_Active], stats: Stats):
        chunks, owners, budget = [], [], self.max_batch_tokens
        for act in active:
            for req in act.requests:
                if budget == 0:
                    return chunks, owners
                if not req.remaining:
                    continue
                take = min(req.remaining, budget)
                lo, hi = req.done, req.done + take
                ext = req.ext
                reads = [off - lo for off, _ in ext.reads if lo <= off < hi]
                chunks.append(Chunk(ext.seq, ext.tokens[lo:hi], reads))
                owners.append((req, lo))
                doc = max(0, min(hi, ext.n_document) - lo)
                stats.document_tokens_computed += doc
                stats.question_tokens_computed += take - doc
                stats.tokens_computed += take
                if (s := stats.step(ext.step)) is not None:
                    s.tokens_computed += take
                budget -= take
        return chunks, owners

    @staticmethod
    def _finish(req: _Request, stats: Stats) -> Reads:
        ext, seq = req.ext, req.ext.seq
        if not ext.prompt:
            seq.fresh += len(ext.tokens)
        else:
            total = len(seq)
            reused = total - len(ext.tokens) - seq.fresh
            for mech, n in seq.credits.items():
                take = min(n, reused)
                stats.tokens_reused[mech] += take
                reused -= take
            stats.tokens_reused["rewind"] += reused
            stats.tokens_naive += total
            seq.fresh, seq.credits = 0, {}
            if (s := stats.step(ext.step)) is not None:
                s.tokens_naive += total
                s.prompts += 1
        return [req.reads[off][ids].numpy() for off, ids in ext.reads]
