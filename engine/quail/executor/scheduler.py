"""Runs programs (one per document or anchor) through shared, token-budgeted forward passes.

A program is a generator: it yields a list of `Extend` requests and receives, for each, the
log-probs it asked to read. Admission follows the sharing plan's order and reserves the most pages
a program can hold at once, so admitted work always finishes. A document whose parent shares pages
with it waits until the parent's KV for them is written, then starts from a reference to those
pages (a "hold", kept while it waits). When pages run short, admission borrows them from the
retention pool, lowest priority first, if the work is worth more; with nothing running it always
may, and as a last resort drops other holds (those documents then compute their prefix).

Concurrent callers (the worker's jobs) are batched into the same passes: each call is a group with
its own sharing plan and accounting, admitted side by side under one page budget.
"""

import threading
from collections import deque
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
class Outcome:
    results: list
    naive: list[StepStats]  # per program: the tokens and prompts a from-scratch run evaluates
    naive_steps: list[dict[str, StepStats]]


@dataclass
class _Group:
    """One Engine.run call (a job's documents): its programs, sharing plan, accounting and state.
    Groups of concurrent jobs are admitted side by side and share forward passes."""

    programs: list[Program]
    tree: PrefixTree
    stats: Stats
    borrowing: bool
    progress: Callable[[int, int], None] | None
    out: Outcome = field(init=False)
    keys: list[str | None] = field(init=False)
    waiting: list[int] = field(init=False)
    pending: dict[int, list[int]] = field(init=False)  # parent -> children that have no hold yet
    finished: set[int] = field(default_factory=set)
    holds: dict[int, Seq] = field(default_factory=dict)
    rows: int = 0  # finished this step
    tokens: int = 0  # computed this step
    error: BaseException | None = None
    done: bool = False

    def __post_init__(self):
        n = len(self.programs)
        self.out = Outcome([None] * n, [StepStats() for _ in range(n)], [{} for _ in range(n)])
        self.keys = [p.key for p in self.programs]
        self.waiting = list(self.tree.order)
        self.pending = self.tree.children()

    def blocked(self, i: int, pool: RetentionPool) -> bool:
        p = self.tree.parent[i]
        return p is not None and i not in self.holds and p not in self.finished and self.keys[i] not in pool

    def stop(self, cache: PagedKVCache, error: BaseException) -> None:
        """Admits nothing more; what is running finishes (a cancel) or is abandoned by the caller."""
        self.error = self.error or error
        self.waiting, self.pending = [], {}
        for seq in self.holds.values():
            cache.release(seq)
        self.holds = {}


@dataclass
class _Active:
    group: _Group
    index: int
    program: Program
    gen: ProgramGen
    requests: list[_Request]


class Scheduler:
    """Threads that call `run` at once have their groups batched together. Whichever caller finds
    no one driving steps every group until its own is done, then hands over; all engine state is
    touched only by the driving thread (`call` runs a function there, between passes)."""

    def __init__(self, runner: ModelRunner, cache: PagedKVCache, pool: RetentionPool, cost: CostModel,
                 max_batch_tokens: int):
        self.runner = runner
        self.cache = cache
        self.pool = pool
        self.cost = cost
        self.max_batch_tokens = max_batch_tokens
        self.groups: list[_Group] = []
        self.active: list[_Active] = []
        self.reserved = 0  # pages the admitted programs may hold at once
        self.forward_passes = 0
        self._inbox: deque[Callable[[], None]] = deque()
        self._turn = threading.Condition()
        self._driving = False
        self._abandoned = False  # a failed group left pages behind: collected once nothing runs

    def run(self, programs: list[Program], tree: PrefixTree, stats: Stats, borrowing: bool = True,
            progress: Callable[[int, int], None] | None = None) -> Outcome:
        """`progress(rows, tokens)` is called after every pass; if it raises, the group stops
        admitting, lets its running programs finish and raises that error (a cancel)."""
        total = self.cache.pages.num_pages
        for i, p in enumerate(programs):
            if p.pages > total:
                raise QuailError(
                    f"--arena-pages {total} is too small: row {i} needs {p.pages} pages "
                    f"({p.pages * self.cache.page_size} tokens with its question); use at least {p.pages}"
                )
        group = _Group(programs, tree, stats, borrowing, progress)
        self._drive(lambda: self.groups.append(group), lambda: group.done)
        if group.error is not None:
            raise group.error
        return group.out

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs fn between forward passes, on the thread that owns the arena and the pool."""
        box: list = []

        def task():
            try:
                box.append((fn(), None))
            except Exception as e:
                box.append((None, e))

        self._drive(task, lambda: bool(box))
        value, error = box[0]
        if error is not None:
            raise error
        return value

    def _drive(self, task: Callable[[], None], until: Callable[[], bool]) -> None:
        with self._turn:
            self._inbox.append(task)
            while not until():
                if not self._driving:
                    self._driving = True
                    break
                self._turn.wait()
            else:
                return
        try:
            while True:
                while self._inbox:
                    self._inbox.popleft()()
                if until():
                    return
                self._step()
                with self._turn:
                    self._turn.notify_all()
        finally:
            with self._turn:
                self._driving = False
                self._turn.notify_all()

    # admission
    def _held_pages(self, but: tuple[_Group, int]) -> int:
        return len({page for g in self.groups for c, h in g.holds.items() if (g, c) != but for page in h.pages})

    def _short(self, g: _Group, i: int) -> int:
        """Pages program i lacks (its own hold and claim become part of its reservation)."""
        free = (self.cache.pages.num_pages - self.reserved - self._held_pages((g, i))
                - (self.pool.pages - self.pool.pages_of(g.keys[i])))
        return g.programs[i].pages - free

    def _make_room(self, g: _Group, i: int, position: int) -> bool:
        next_use = {k: n for h in self.groups for n, j in enumerate(h.waiting[position if h is g else 0:])
                    if (k := h.keys[j])}
        doc = g.programs[i].doc
        worth = None
        if self.active and g.borrowing:
            seconds = self.cost.prefill_seconds(len(doc) if doc else g.programs[i].pages * self.cache.page_size)
            worth = retention.priority(1.0, seconds, g.programs[i].pages)
        elif self.active:
            return False
        before = self.pool.evictions
        self.pool.borrow(self._short(g, i), worth, next_use)
        g.stats.evictions += self.pool.evictions - before
        if self._short(g, i) > 0 and not self.active:
            for h in self.groups:
                for c in [c for c in h.holds if (h, c) != (g, i)]:
                    self.cache.release(h.holds.pop(c))
        return self._short(g, i) <= 0

    def _admit(self, g: _Group) -> None:
        position = 0
        while position < len(g.waiting):
            i = g.waiting[position]
            if g.blocked(i, self.pool):
                position += 1
                continue
            if self._short(g, i) > 0 and not self._make_room(g, i, position):
                break
            g.waiting.pop(position)
            parent = g.tree.parent[i]
            if parent is not None and i in g.pending.get(parent, ()):
                g.pending[parent].remove(i)  # admitted without a hold: it needs none later
            claimed = self.pool.take(g.keys[i]) if g.keys[i] else None
            hold = g.holds.pop(i, None)
            if claimed is not None and hold is not None:
                self.cache.release(hold)
            self.reserved += g.programs[i].pages
            act = _Active(g, i, g.programs[i], g.programs[i].start(claimed or hold), [])
            if not self._advance(act, None):
                return
            if act.requests:
                self.active.append(act)
                self._offer(act)
            else:
                self._finished(act)

    def _offer(self, act: _Active) -> None:
        """Makes holds for the children whose shared prefix this program's KV now covers."""
        g = act.group
        for c in list(g.pending.get(act.index, ())):
            s = g.tree.shared[c]
            for req in act.requests:
                seq = req.ext.seq
                if len(seq) >= s and seq.tokens[:s] == g.programs[c].doc[:s]:
                    g.holds[c] = self.cache.prefix(seq, s)
                    g.pending[act.index].remove(c)
                    break

    def _finished(self, act: _Active) -> None:
        g = act.group
        self.reserved -= act.program.pages
        g.rows += act.program.rows
        g.finished.add(act.index)
        g.pending.pop(act.index, None)  # children it gave no hold compute their prefix

    def _fail(self, g: _Group, error: BaseException, current: _Active | None = None) -> None:
        """A program raised (an engine bug): its group's running programs are abandoned and their
        pages collected once nothing runs; other groups go on."""
        g.stop(self.cache, error)
        doomed = [a for a in self.active if a.group is g]
        if current is not None and current not in doomed:
            doomed.append(current)
        for act in doomed:
            if act in self.active:
                self.active.remove(act)
            act.gen.close()
            self.reserved -= act.program.pages
        self._abandoned = True

    def _collect(self) -> None:
        """With nothing running, only the pool's sequences and holds own pages."""
        live = [s.pages for s in self.pool.sequences()] + [h.pages for g in self.groups for h in g.holds.values()]
        self.cache.pages.rebuild(live)
        self._abandoned = False

    # one scheduler step: admit, one forward pass, advance
    def _step(self) -> None:
        for g in self.groups:
            if g.error is None:
                self._admit(g)
        chunks, owners = self._batch()
        if chunks:
            groups = list({id(a.group): a.group for a, _, _ in owners}.values())
            try:
                outputs = self.runner.run(chunks)
            except Exception as e:
                for g in groups:
                    self._fail(g, e)
                outputs = None
            if outputs is not None:
                self.forward_passes += 1
                for g in groups:  # the arena is fullest right after a pass wrote its KV
                    g.stats.forward_passes += 1
                    g.stats.pages_peak = max(g.stats.pages_peak, self.cache.pages.num_used)
                for (act, req, offset), chunk, o in zip(owners, chunks, outputs):
                    for r, row in zip(chunk.reads, o):
                        req.reads[offset + r] = row
                    req.done += len(chunk.tokens)
                    act.group.tokens += len(chunk.tokens)
        for act in self.active:
            self._offer(act)
        for act in list(self.active):
            if act not in self.active or any(r.remaining for r in act.requests):
                continue
            if not self._advance(act, [self._finish(r, act) for r in act.requests]):
                continue
            if not act.requests:
                self.active.remove(act)
                self._finished(act)
        for g in list(self.groups):
            self._report(g)
            if not g.waiting and not any(a.group is g for a in self.active):
                self.groups.remove(g)
                g.done = True
        if self._abandoned and not self.active:
            self._collect()

    def _report(self, g: _Group) -> None:
        rows, tokens, g.rows, g.tokens = g.rows, g.tokens, 0, 0
        if g.progress is None or g.error is not None:
            return
        try:
            g.progress(rows, tokens)
        except Exception as e:  # a cancel: what runs finishes, nothing more is admitted
            g.stop(self.cache, e)

    def _advance(self, act: _Active, sent: list[Reads] | None) -> bool:
        """Runs the program to its next requests; False if it raised (its group failed)."""
        g, before = act.group, self.pool.evictions
        exts = []
        try:
            while not exts:  # a program may yield nothing to do (say, no multi-token labels)
                exts = act.gen.send(sent)
                sent = []
        except StopIteration as stop:
            g.out.results[act.index] = stop.value
        except Exception as e:
            self._fail(g, e, act)
            return False
        finally:
            g.stats.evictions += self.pool.evictions - before  # a full pool evicts to keep what ends here
        act.requests = [_Request(e) for e in exts]
        return True

    def _batch(self) -> tuple[list[Chunk], list[tuple[_Active, _Request, int]]]:
        chunks, owners, budget = [], [], self.max_batch_tokens
        for act in self.active:
            stats = act.group.stats
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
                owners.append((act, req, lo))
                doc = max(0, min(hi, ext.n_document) - lo)
                stats.document_tokens_computed += doc
                stats.question_tokens_computed += take - doc
                stats.tokens_computed += take
                if (s := stats.step(ext.step)) is not None:
                    s.tokens_computed += take
                budget -= take
        return chunks, owners

    @staticmethod
    def _finish(req: _Request, act: _Active) -> Reads:
        ext, seq = req.ext, req.ext.seq
        stats, out = act.group.stats, act.group.out
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
            out.naive[act.index].tokens_naive += total
            out.naive[act.index].prompts += 1
            if (s := stats.step(ext.step)) is not None:
                s.tokens_naive += total
                s.prompts += 1
                mine = out.naive_steps[act.index].setdefault(ext.step, StepStats())
                mine.tokens_naive += total
                mine.prompts += 1
        return [req.reads[off][ids].numpy() for off, ids in ext.reads]
