"""Document KV kept after an operator for later compatible operators (docs/design.md#kv-retention).

Each entry carries its priority from cost/retention.py. The pool holds at most `capacity` pages (the
arena minus two forward passes); a full pool, or admission borrowing pages, removes the lowest
priority first and, among equal priorities, the entry whose next use comes latest.
"""

import hashlib
from dataclasses import dataclass

import numpy as np

from quail.cost import retention
from quail.cost.model import CostModel
from quail.executor.kv_cache import PagedKVCache
from quail.executor.sequence import Seq
from quail.reuse import Retain


def document_key(tokens: list[int]) -> str:
    return hashlib.sha1(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()


@dataclass
class _Entry:
    seq: Seq
    probability: float
    seconds: float  # to recompute it
    consumers: frozenset[str] | None

    def priority(self, probability: float | None = None) -> float:
        p = self.probability if probability is None else probability
        return retention.priority(p, self.seconds, len(self.seq.pages))


class RetentionPool:
    def __init__(self, cache: PagedKVCache, capacity: int, cost: CostModel):
        self.cache = cache
        self.capacity = capacity
        self.cost = cost
        self._entries: dict[str, _Entry] = {}
        self._claims: dict[str, tuple[float, frozenset[str]]] = {}  # taken entries' waiting consumers
        self._pages = 0  # kept as a count: admission asks for it for every waiting program
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def pages(self) -> int:
        return self._pages

    def _pop(self, key: str) -> Seq:
        entry = self._entries.pop(key)
        self._pages -= len(entry.seq.pages)
        return entry.seq

    def pages_of(self, key: str | None) -> int:
        e = self._entries.get(key) if key else None
        return len(e.seq.pages) if e else 0

    def keep_or_release(self, doc: list[int], seq: Seq, retain: Retain | None, passed: bool = True) -> None:
        """Ends an operator's use of a document's KV: kept for later operators (its own plan's, and
        those still waiting for the KV it took: another run's, over the same document), or freed.
        A sequence that holds less than the whole document is never kept."""
        probability = 0.0 if retain is None else retain.passed if passed else retain.failed
        consumers = retain.consumers if retain is not None and probability > 0 else frozenset()
        key = document_key(doc)
        if key in self._claims and seq.tokens == doc:
            claimed_probability, claimed = self._claims.pop(key)
            claimed = claimed - {retain.owner} if retain is not None else claimed  # the taker is done with it
            if claimed and consumers is not None and not claimed <= consumers:
                probability, consumers = max(probability, claimed_probability), consumers | claimed
        if probability <= 0 or seq.tokens != doc:
            self.cache.release(seq)
            return
        self.put(key, seq, probability, consumers)

    def put(self, key: str, seq: Seq, probability: float = 1.0, consumers: frozenset[str] | None = None) -> bool:
        if key in self._entries:
            self.cache.release(self._pop(key))
        seq.fresh, seq.credits = 0, {}
        entry = _Entry(seq, probability, self.cost.prefill_seconds(len(seq)), consumers)
        need = self.pages + len(seq.pages) - self.capacity
        if need > 0:
            cheaper = sum(len(e.seq.pages) for e in self._entries.values() if e.priority() < entry.priority())
            if cheaper < need:  # worth less than what it would push out: not kept, nothing evicted
                self.cache.release(seq)
                return False
            self.borrow(need, entry.priority())
        self._entries[key] = entry
        self._pages += len(seq.pages)
        return True

    def take(self, key: str) -> Seq | None:
        if key not in self._entries:
            return None
        if consumers := self._entries[key].consumers:  # they still wait: it comes back for them
            self._claims[key] = (self._entries[key].probability, consumers)
        seq = self._pop(key)
        seq.credits = {"retention": len(seq)}
        return seq

    def _eviction_order(self, next_use: dict[str, int]) -> list[str]:
        """Lowest priority first; work waiting in this job will certainly read what it claims."""
        def rank(key: str) -> tuple[float, int]:
            e = self._entries[key]
            soon = next_use.get(key)
            return (e.priority(1.0 if soon is not None else None), -(soon if soon is not None else 1 << 62))

        return sorted(self._entries, key=rank)

    def borrow(self, pages: int, worth: float | None, next_use: dict[str, int] | None = None) -> bool:
        """Frees at least `pages` by evicting entries worth less than `worth` per page (None: any)."""
        next_use = next_use or {}
        freed = 0
        for key in self._eviction_order(next_use):
            if freed >= pages:
                break
            e = self._entries[key]
            if worth is not None and e.priority(1.0 if key in next_use else None) >= worth:
                break
            freed += len(e.seq.pages)
            self.cache.release(self._pop(key))
            self.evictions += 1
        return freed >= pages

    def consumed(self, operator: str) -> None:
        """The retention schedule: after `operator` ran, KV that no later operator can claim is freed."""
        for key in list(self._entries):
            e = self._entries[key]
            if e.consumers is None:
                continue
            e.consumers = e.consumers - {operator}
            if not e.consumers:
                self.cache.release(self._pop(key))
        for key, (probability, consumers) in list(self._claims.items()):
            if consumers - {operator}:
                self._claims[key] = (probability, consumers - {operator})
            else:
                del self._claims[key]

    def keys(self) -> list[str]:
        return list(self._entries)

    def sequences(self) -> list[Seq]:
        return [e.seq for e in self._entries.values()]

    def clear(self) -> None:
        for key in list(self._entries):
            self.cache.release(self._pop(key))
        self._claims.clear()
