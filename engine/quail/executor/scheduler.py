"""Runs programs (one per document or anchor) through shared, token-budgeted forward passes.

Each step admits programs, batches one forward pass, and advances the programs whose requests it
completed. Admission follows the sharing plan's order (group.py), reserves the most pages a program
can hold at once, so admitted work always finishes, and stops once the admitted requests hold two
passes of tokens: the table waits outside, so a step's work follows the pass, not the table. When
pages run short it borrows from the retention pool (admission.py).

Concurrent callers (the worker's jobs) are batched into the same passes: each call is a group with
its own sharing plan and accounting, admitted side by side under one page budget.
"""

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quail.cost.model import CostModel
from quail.errors import QuailError
from quail.executor.accounting import Request, charge, settle
from quail.executor.admission import Admission
from quail.executor.driver import Driver
from quail.executor.group import Group
from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.program import Extend, Outcome, Program, ProgramGen, Reads
from quail.executor.retention_pool import RetentionPool
from quail.executor.stats import Stats
from quail.prefix_tree import PrefixTree


@dataclass(eq=False)
class _Active:
    group: Group
    index: int
    program: Program
    gen: ProgramGen
    serial: int  # its key in Scheduler.active
    requests: list[Request] = field(default_factory=list)
    live: bool = True


class Scheduler:
    def __init__(self, runner: ModelRunner, cache: PagedKVCache, pool: RetentionPool, cost: CostModel,
                 max_batch_tokens: int):
        self.runner = runner
        self.cache = cache
        self.pool = pool
        self.max_batch_tokens = max_batch_tokens
        self.admission = Admission(cache, pool, cost)
        self.driver = Driver(self._step)
        self.groups: list[Group] = []
        self.active: dict[int, _Active] = {}  # by serial, in admission order
        self._serials = itertools.count()
        self.queued_tokens = 0  # not yet computed, in the admitted programs' requests
        self.forward_passes = 0
        self.batch_tokens = 0  # what the passes computed, all groups together (worker/metrics.py)
        self.visits = 0  # programs and buckets the current step looked at
        self.max_step_visits = 0  # the most of any step: bounded by the pass, never by the table
        self.max_active = 0  # the most programs admitted at once: bounded the same way
        self._due: list[_Active] = []  # requests complete without a pass (empty ones)
        self._abandoned = False  # a failed group left pages behind: collected once nothing runs

    def run(self, programs: list[Program], tree: PrefixTree, stats: Stats, borrowing: bool = True,
            progress: Callable[[int, int], None] | None = None) -> Outcome:
        """`progress(rows, tokens)` is called after every pass; if it raises, the group stops
        admitting, lets its running programs finish and raises that error (a cancel)."""
        total = self.cache.pages.num_pages
        for i, p in enumerate(programs):
            if p.pages > total:
                raise QuailError(
                    f"arena_pages {total} is too small: row {i} needs {p.pages} pages "
                    f"({p.pages * self.cache.page_size} tokens with its question); use at least {p.pages}",
                    parameter="arena_pages")
        group = Group(programs, tree, stats, borrowing, progress)
        self.driver.drive(lambda: self.groups.append(group), lambda: group.done)
        if group.error is not None:
            raise group.error
        return group.out

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs fn between forward passes, on the thread that owns the arena and the pool."""
        return self.driver.call(fn)

    # one step: admit, one forward pass, advance
    def _step(self) -> None:
        self.visits = 0
        n = len(self.groups)
        for k in range(n):  # the groups take turns at the front of admission
            g = self.groups[(self.forward_passes + k) % n]
            if g.error is None:
                self._admit(g)
        touched = self._pass()
        for act in touched:
            if act.live:
                self._offer(act)
        due, self._due = self._due, []
        for act in touched + due:
            self.visits += 1
            if not act.live or any(r.remaining for r in act.requests):
                continue
            if self._advance(act, [settle(r, act.group.stats, act.group.out, act.index) for r in act.requests]):
                if not act.requests:
                    self._retire(act)
        for g in list(self.groups):
            self._report(g)
            if g.n_active == 0 and not g.ready:
                if g.waiting and g.error is None:
                    g.error = RuntimeError(f"scheduler: {g.waiting} programs never became admissible")
                self.groups.remove(g)
                g.done = True
        if self._abandoned and not self.active:
            self._collect()
        self.max_step_visits = max(self.max_step_visits, self.visits)
        self.max_active = max(self.max_active, len(self.active))

    def _admit(self, g: Group) -> None:
        while self.queued_tokens < 2 * self.max_batch_tokens and (head := g.next()) is not None:
            bucket, i = head
            self.visits += 1
            adm = self.admission
            if adm.short(g, i, bucket) > 0 and not adm.make_room(self.groups, g, i, bucket, bool(self.active)):
                return
            g.take(bucket)
            key = g.keys[i]
            claimed = self.pool.take(key) if key else None
            start = claimed
            if claimed is None and bucket.hold is not None:
                start = self.cache.share(bucket.hold, bucket.length)
            if bucket.exhausted and bucket.hold is not None:
                adm.unhold(bucket)
            adm.reserved += g.programs[i].pages
            act = _Active(g, i, g.programs[i], g.programs[i].start(start), next(self._serials))
            if not self._advance(act, None):
                return
            if act.requests:
                self.active[act.serial] = act
                g.n_active += 1
                self._offer(act)
            else:
                self._finished(act)

    def _offer(self, act: _Active) -> None:
        """Opens, with a hold, the buckets whose shared prefix this program's KV now covers."""
        g = act.group
        buckets = g.unoffered.get(act.index)
        if not buckets:
            return
        for b in list(buckets):
            self.visits += 1
            prefix = (g.programs[b.head].doc or [])[: b.length]  # every member begins with these tokens
            for req in act.requests:
                seq = req.ext.seq
                if len(seq) >= b.length and seq.tokens[: b.length] == prefix:
                    self.admission.hold(b, self.cache.share(seq, b.length))
                    buckets.remove(b)
                    g.open(b)
                    break
        if not buckets:
            del g.unoffered[act.index]

    def _retire(self, act: _Active) -> None:
        del self.active[act.serial]
        act.live = False
        act.group.n_active -= 1
        self._finished(act)

    def _finished(self, act: _Active) -> None:
        g = act.group
        self.admission.reserved -= act.program.pages
        g.rows += act.program.rows
        for b in g.unoffered.pop(act.index, ()):  # members compute the prefix it gave no hold for
            g.open(b)

    def _stop(self, g: Group, error: BaseException) -> None:
        """Admits nothing more for g; what is running finishes (a cancel) or is abandoned (_fail)."""
        g.error = g.error or error
        g.ready, g.unoffered = [], {}
        for b in g.buckets:
            if b.hold is not None:
                self.admission.unhold(b)

    def _fail(self, g: Group, error: BaseException, current: _Active | None = None) -> None:
        """A program raised (an engine bug): its group's running programs are abandoned and their
        pages collected once nothing runs; other groups go on."""
        self._stop(g, error)
        doomed = [a for a in self.active.values() if a.group is g]
        if current is not None and current.live and current not in doomed:
            doomed.append(current)
        for act in doomed:
            if act.serial in self.active:
                del self.active[act.serial]
                g.n_active -= 1
            act.live = False
            act.gen.close()
            self.queued_tokens -= sum(r.remaining for r in act.requests)
            self.admission.reserved -= act.program.pages
        self._abandoned = True

    def _collect(self) -> None:
        """With nothing running, only the pool's sequences and holds own pages."""
        holds = [b.hold.pages for g in self.groups for b in g.buckets if b.hold is not None]
        self.cache.pages.rebuild([s.pages for s in self.pool.sequences()] + holds)
        self._abandoned = False

    def _report(self, g: Group) -> None:
        rows, tokens, g.rows, g.tokens = g.rows, g.tokens, 0, 0
        if g.progress is None or g.error is not None:
            return
        try:
            g.progress(rows, tokens)
        except Exception as e:  # a cancel: what runs finishes, nothing more is admitted
            self._stop(g, e)

    def _advance(self, act: _Active, sent: list[Reads] | None) -> bool:
        """Runs the program to its next requests; False if it raised (its group failed)."""
        g, before = act.group, self.pool.evictions
        exts: list[Extend] = []
        try:
            while not exts:  # a program may yield nothing to do (say, no multi-token labels)
                exts = next(act.gen) if sent is None else act.gen.send(sent)
                sent = []
        except StopIteration as stop:
            g.out.results[act.index] = stop.value
        except Exception as e:
            self._fail(g, e, act)
            return False
        finally:
            g.stats.evictions += self.pool.evictions - before  # a full pool evicts to keep what ends here
        act.requests = [Request(e) for e in exts]
        queued = sum(r.remaining for r in act.requests)
        self.queued_tokens += queued
        if act.requests and not queued:
            self._due.append(act)
        return True

    def _pass(self) -> list[_Active]:
        """Batches up to max_batch_tokens from the admitted requests, in admission order, and runs
        one forward pass; returns the programs it computed for."""
        chunks, owners, budget = [], [], self.max_batch_tokens
        for act in self.active.values():
            if budget == 0:
                break
            self.visits += 1
            for req in act.requests:
                if budget == 0 or not req.remaining:
                    continue
                take = min(req.remaining, budget)
                lo, ext = req.done, req.ext
                reads = [off - lo for off, _ in ext.reads if lo <= off < lo + take]
                pool = None if ext.pool is None else range(max(ext.pool.start, lo) - lo,
                                                           min(ext.pool.stop, lo + take) - lo)
                chunks.append(Chunk(ext.seq, ext.tokens[lo : lo + take], reads, pool))
                owners.append((act, req, lo))
                charge(act.group.stats, ext, lo, take)
                budget -= take
        if not chunks:
            return []
        groups = list({id(a.group): a.group for a, _, _ in owners}.values())
        try:
            outputs = self.runner.run(chunks)
        except Exception as e:
            for g in groups:
                self._fail(g, e)
            return []
        self.forward_passes += 1
        self.batch_tokens += self.max_batch_tokens - budget
        for g in groups:  # the arena is fullest right after a pass wrote its KV
            g.stats.forward_passes += 1
            g.stats.pages_peak = max(g.stats.pages_peak, self.cache.pages.num_used)
        touched: dict[int, _Active] = {}
        for (act, req, offset), chunk, (o, pooled) in zip(owners, chunks, outputs):
            for r, row in zip(chunk.reads, o):
                req.reads[offset + r] = row
            if pooled is not None:
                req.pooled = pooled if req.pooled is None else req.pooled + pooled
            req.done += len(chunk.tokens)
            self.queued_tokens -= len(chunk.tokens)
            act.group.tokens += len(chunk.tokens)
            touched[act.serial] = act
        return list(touched.values())
