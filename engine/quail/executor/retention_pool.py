"""Document KV kept after an operator for a later compatible one in the same session.

Entries are keyed by the document's token ids. When admission needs pages, an entry that no waiting
work will claim goes first (oldest first), then the one whose claim comes latest; issue 3 puts
cost/retention.py's priority in front of that order.
"""

import hashlib
from collections import OrderedDict

import numpy as np

from quail.executor.kv_cache import PagedKVCache
from quail.executor.sequence import Seq


def document_key(tokens: list[int]) -> str:
    return hashlib.sha1(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()


class RetentionPool:
    def __init__(self, cache: PagedKVCache):
        self.cache = cache
        self._entries: OrderedDict[str, Seq] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def pages(self) -> int:
        return sum(len(s.pages) for s in self._entries.values())

    def put(self, key: str, seq: Seq) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.cache.release(old)
        seq.fresh, seq.credits = 0, {}
        self._entries[key] = seq

    def keep_or_release(self, doc: list[int], seq: Seq, keep: bool) -> None:
        """Ends an operator's use of a document's KV: kept for a later operator, or freed."""
        if keep:
            self.put(document_key(doc), seq)
        else:
            self.cache.release(seq)

    def take(self, key: str) -> Seq | None:
        seq = self._entries.pop(key, None)
        if seq is not None:
            seq.credits = {"retention": len(seq)}
        return seq

    def evict_one(self, next_use: dict[str, int] | None = None) -> bool:
        """next_use: key -> how soon waiting work claims it (smaller is sooner)."""
        if not self._entries:
            return False
        next_use = next_use or {}
        never = next((k for k in self._entries if k not in next_use), None)
        key = never if never is not None else max(self._entries, key=next_use.__getitem__)
        self.cache.release(self._entries.pop(key))
        return True

    def clear(self) -> None:
        while self.evict_one():
            pass
