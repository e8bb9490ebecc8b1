"""The page budget admission works under: pages admitted programs may hold at once (`reserved`),
pages pinned by holds, and pages the retention pool may lend (docs/design.md#borrowing)."""

from collections import Counter

from quail.cost import retention
from quail.cost.model import CostModel
from quail.executor.group import Bucket, Group
from quail.executor.kv_cache import PagedKVCache
from quail.executor.retention_pool import RetentionPool
from quail.executor.sequence import Seq


class Admission:
    def __init__(self, cache: PagedKVCache, pool: RetentionPool, cost: CostModel):
        self.cache = cache
        self.pool = pool
        self.cost = cost
        self.reserved = 0
        self._held: Counter[int] = Counter()  # page -> holds that reference it

    def hold(self, bucket: Bucket, seq: Seq) -> None:
        bucket.hold = seq
        self._held.update(seq.pages)

    def unhold(self, bucket: Bucket) -> None:
        seq, bucket.hold = bucket.hold, None
        if seq is None:
            return
        for page in seq.pages:
            self._held[page] -= 1
            if not self._held[page]:
                del self._held[page]
        self.cache.release(seq)

    def short(self, g: Group, i: int, bucket: Bucket) -> int:
        """Pages program i lacks (its bucket's hold and its claim become part of its reservation)."""
        own = bucket.hold.pages if bucket.hold is not None else ()
        held_by_others = len(self._held) - sum(1 for page in own if self._held[page] == 1)
        free = (self.cache.pages.num_pages - self.reserved - held_by_others
                - (self.pool.pages - self.pool.pages_of(g.keys[i])))
        return g.programs[i].pages - free

    def make_room(self, groups: list[Group], g: Group, i: int, bucket: Bucket, busy: bool) -> bool:
        """Borrows from the retention pool for program i: while work runs, only KV worth less per
        page than it; with nothing running, anything, and as a last resort other buckets' holds."""
        worth = None
        if busy:
            if not g.borrowing:
                return False
            doc = g.programs[i].doc
            seconds = self.cost.prefill_seconds(len(doc) if doc else g.programs[i].pages * self.cache.page_size)
            worth = retention.priority(1.0, seconds, g.programs[i].pages)
        before = self.pool.evictions
        self.pool.borrow(self.short(g, i, bucket), worth, self._next_use(groups, g, i))
        g.stats.evictions += self.pool.evictions - before
        if self.short(g, i, bucket) > 0 and not busy:
            for h in groups:
                for b in h.buckets:
                    if b.hold is not None and b is not bucket:
                        self.unhold(b)
        return self.short(g, i, bucket) <= 0

    def _next_use(self, groups: list[Group], g: Group, i: int) -> dict[str, int]:
        """For retained documents that waiting work will claim: how soon (this job's first)."""
        out = {}
        for key in self.pool.keys():
            uses = [n for h in groups if (n := h.waits_for(key, g.rank[i] if h is g else 0)) is not None]
            if uses:
                out[key] = min(uses)
        return out
