"""Runs programs (one per document or anchor) through shared, token-budgeted forward passes.

A program is a generator: it yields a list of `Extend` requests and receives, for each, the
log-probs it asked to read. Admission follows the sharing plan's order and reserves the most pages
a program can hold at once, so admitted work always finishes. A document whose parent shares pages
with it waits until the parent's KV for them is written, then starts from a reference to those
pages (a "hold", kept while it waits). When pages run short, admission borrows them from the
retention pool, lowest priority first, if the work is worth more; with nothing running it always
may, and as a last resort drops other holds (those documents then compute their prefix).
"""

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from quail.cost import retention
from quail.cost.model import CostModel
from quail.errors import QuailError
from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.retention_pool import RetentionPool, document_key
from quail.executor.sequence import Seq
from quail.executor.stats import Stats, StepStats
from quail.planner.prefix_tree import PrefixTree

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
    # receives a sequence already holding a prefix of `doc` (retained or shared KV), or None
    start: Callable[[Seq | None], ProgramGen]
    pages: int  # the most pages the program holds at any time
    doc: list[int] | None = None  # its document: the key for retention, sharing and duplicates
    rows: int = 1  # progress units it completes

    @cached_property  # a hash of the whole document; read by dedup, admission and claims
    def key(self) -> str | None:
        return None if self.doc is None else document_key(self.doc)


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


@dataclass
class Outcome:
    results: list
    naive: list[StepStats]  # per program: the tokens and prompts a from-scratch run evaluates
    naive_steps: list[dict[str, StepStats]]


class Scheduler:
    def __init__(self, runner: ModelRunner, cache: PagedKVCache, pool: RetentionPool, cost: CostModel,
                 max_batch_tokens: int):
        self.runner = runner
        self.cache = cache
        self.pool = pool
        self.cost = cost
        self.max_batch_tokens = max_batch_tokens

    def run(self, programs: list[Program], tree: PrefixTree, stats: Stats, borrowing: bool = True,
            progress: Callable[[int, int], None] | None = None) -> Outcome:
        total = self.cache.pages.num_pages
        for i, p in enumerate(programs):
            if p.pages > total:
                raise QuailError(
                    f"--arena-pages {total} is too small: row {i} needs {p.pages} pages "
                    f"({p.pages * self.cache.page_size} tokens with its question); use at least {p.pages}"
                )
        out = Outcome([None] * len(programs), [StepStats() for _ in programs], [{} for _ in programs])
        keys = [p.key for p in programs]
        waiting = list(tree.order)
        finished: set[int] = set()
        pending = tree.children()  # parent -> children that have no hold yet
        holds: dict[int, Seq] = {}
        active: list[_Active] = []
        reserved = 0

        def blocked(i: int) -> bool:
            p = tree.parent[i]
            return p is not None and i not in holds and p not in finished and keys[i] not in self.pool

        def held_pages(but: int) -> int:
            return len({page for c, h in holds.items() if c != but for page in h.pages})

        def short(i: int) -> int:
            """Pages program i lacks (its own hold and claim become part of its reservation)."""
            free = total - reserved - held_pages(i) - (self.pool.pages - self.pool.pages_of(keys[i]))
            return programs[i].pages - free

        def fits(i: int) -> bool:
            return short(i) <= 0

        def make_room(i: int, position: int) -> bool:
            next_use = {keys[j]: n for n, j in enumerate(waiting[position:]) if keys[j]}
            doc = programs[i].doc
            worth = None
            if active and borrowing:
                seconds = self.cost.prefill_seconds(len(doc) if doc else programs[i].pages * self.cache.page_size)
                worth = retention.priority(1.0, seconds, programs[i].pages)
            elif active:
                return False
            self.pool.borrow(short(i), worth, next_use)
            if not fits(i) and not active:
                for c in [c for c in holds if c != i]:
                    self.cache.release(holds.pop(c))
            return fits(i)

        def offer(act: _Active) -> None:
            """Makes holds for the children whose shared prefix this program's KV now covers."""
            for c in list(pending.get(act.index, ())):
                s = tree.shared[c]
                for req in act.requests:
                    seq = req.ext.seq
                    if len(seq) >= s and seq.tokens[:s] == programs[c].doc[:s]:
                        holds[c] = self.cache.prefix(seq, s)
                        pending[act.index].remove(c)
                        break

        while waiting or active:
            position = 0
            started_rows = 0
            while position < len(waiting):
                i = waiting[position]
                if blocked(i):
                    position += 1
                    continue
                if not fits(i) and not make_room(i, position):
                    break
                waiting.pop(position)
                if tree.parent[i] is not None and i in pending.get(tree.parent[i], ()):
                    pending[tree.parent[i]].remove(i)  # admitted without a hold: it needs none later
                claimed = self.pool.take(keys[i]) if keys[i] else None
                hold = holds.pop(i, None)
                if claimed is not None and hold is not None:
                    self.cache.release(hold)
                reserved += programs[i].pages
                act = _Active(i, programs[i], programs[i].start(claimed or hold), [])
                self._advance(act, None, out)
                if act.requests:
                    active.append(act)
                    offer(act)
                else:
                    reserved -= programs[i].pages
                    finished.add(i)
                    started_rows += programs[i].rows
            chunks, owners = self._batch(active, stats)
            if chunks:
                outputs = self.runner.run(chunks)
                stats.forward_passes += 1
                for (req, offset), chunk, o in zip(owners, chunks, outputs):
                    for r, row in zip(chunk.reads, o):
                        req.reads[offset + r] = row
                    req.done += len(chunk.tokens)
            for act in active:
                offer(act)
            still = []
            finished_rows = started_rows
            for act in active:
                if any(r.remaining for r in act.requests):
                    still.append(act)
                    continue
                self._advance(act, [self._finish(r, stats, out, act.index) for r in act.requests], out)
                if act.requests:
                    still.append(act)
                else:
                    reserved -= act.program.pages
                    finished_rows += act.program.rows
                    finished.add(act.index)
                    pending.pop(act.index, None)  # children it gave no hold compute their prefix
            active = still
            if progress is not None:
                progress(finished_rows, sum(len(c.tokens) for c in chunks))
        return out

    def _advance(self, act: _Active, sent: list[Reads] | None, out: Outcome) -> None:
        exts = []
        try:
            while not exts:  # a program may yield nothing to do (say, no multi-token labels)
                exts = act.gen.send(sent)
                sent = []
        except StopIteration as stop:
            out.results[act.index] = stop.value
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
    def _finish(req: _Request, stats: Stats, out: Outcome, index: int) -> Reads:
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
            out.naive[index].tokens_naive += total
            out.naive[index].prompts += 1
            if (s := stats.step(ext.step)) is not None:
                s.tokens_naive += total
                s.prompts += 1
                mine = out.naive_steps[index].setdefault(ext.step, StepStats())
                mine.tokens_naive += total
                mine.prompts += 1
        return [req.reads[off][ids].numpy() for off, ids in ext.reads]
