"""One Engine.run call (a job's documents) inside the scheduler: its programs, its sharing plan as
admission buckets, its answers and accounting.

A bucket holds the documents that take the same shared prefix (`length` tokens) from the same
parent, in planned order; documents that share nothing form the root bucket. A bucket opens when
its parent's KV covers the prefix (it then takes one reference to those pages, a "hold", that every
member starts from) or when the parent ends without it (members compute the prefix). Admission pops
the open bucket whose next member comes first in the planned order, so finding the next document
costs O(log buckets), however many documents wait behind a parent.
"""

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from quail.executor.program import Outcome, Program
from quail.executor.sequence import Seq
from quail.executor.stats import Stats, StepStats
from quail.prefix_tree import PrefixTree


@dataclass(eq=False)
class Bucket:
    parent: int | None
    length: int
    members: list[int] = field(default_factory=list)  # program indices, in planned order
    cursor: int = 0
    hold: Seq | None = None

    @property
    def head(self) -> int:
        return self.members[self.cursor]

    @property
    def exhausted(self) -> bool:
        return self.cursor >= len(self.members)


@dataclass(eq=False)
class Group:
    programs: list[Program]
    tree: PrefixTree
    stats: Stats
    borrowing: bool
    progress: Callable[[int, int], None] | None
    out: Outcome = field(init=False)
    keys: list[str | None] = field(init=False)
    rank: list[int] = field(init=False)  # position in the planned order
    first_with_key: dict[str, int] = field(init=False)
    buckets: list[Bucket] = field(init=False)
    unoffered: dict[int, list[Bucket]] = field(init=False)  # parent -> its buckets not yet open
    ready: list[tuple[int, Bucket]] = field(default_factory=list)  # heap of (rank of head, open bucket)
    waiting: int = field(init=False)  # programs not yet admitted
    started: bytearray = field(init=False)  # per program: admitted
    n_active: int = 0
    rows: int = 0  # finished this step
    tokens: int = 0  # computed this step
    error: BaseException | None = None
    done: bool = False

    def __post_init__(self):
        n = len(self.programs)
        self.out = Outcome([None] * n, [StepStats() for _ in range(n)], [{} for _ in range(n)])
        self.keys = [p.key for p in self.programs]
        self.rank = [0] * n
        self.first_with_key = {}
        by_source: dict[tuple[int | None, int], Bucket] = {}
        for r, i in enumerate(self.tree.order):
            self.rank[i] = r
            if (key := self.keys[i]) is not None:
                self.first_with_key.setdefault(key, i)
            source = (self.tree.parent[i], self.tree.shared[i]) if self.tree.parent[i] is not None else (None, 0)
            if source not in by_source:
                by_source[source] = Bucket(*source)
            by_source[source].members.append(i)
        self.buckets = list(by_source.values())
        self.unoffered = {}
        for b in self.buckets:
            if b.parent is None:
                self.open(b)
            else:
                self.unoffered.setdefault(b.parent, []).append(b)
        self.waiting = n
        self.started = bytearray(n)

    def open(self, bucket: Bucket) -> None:
        heapq.heappush(self.ready, (self.rank[bucket.head], bucket))

    def next(self) -> tuple[Bucket, int] | None:
        """The open bucket whose next member comes first in the planned order, and that member."""
        if not self.ready:
            return None
        bucket = self.ready[0][1]
        return bucket, bucket.head

    def take(self, bucket: Bucket) -> None:
        """Its head is admitted."""
        self.started[bucket.head] = 1
        bucket.cursor += 1
        self.waiting -= 1
        if bucket.exhausted:
            heapq.heappop(self.ready)
        else:
            heapq.heapreplace(self.ready, (self.rank[bucket.head], bucket))

    def waits_for(self, key: str, after: int) -> int | None:
        """How far past rank `after` the first program with this document waits; None if none does."""
        i = self.first_with_key.get(key)
        if i is None or self.started[i]:
            return None
        return max(self.rank[i] - after, 0)
