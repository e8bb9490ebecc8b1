"""The sharing plan: which documents reference which earlier document's KV pages.

docs/design.md#prefix-sharing: sort documents by token sequence, compare neighbours, share only whole
pages, always leave a document's last token to compute, and when the preceding document reuses
the entire shared prefix itself, follow parent links to the document that supplies those pages.
"""

from dataclasses import dataclass

from quail.constants import PAGE_SIZE


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def stem(sequences: list[list[int]]) -> int:
    """Leading tokens every sequence shares, leaving each at least one token of its own (rewind
    keeps them with the document and rewinds only past them)."""
    if len(sequences) < 2:
        return 0
    n = min(len(s) for s in sequences) - 1
    for s in sequences[1:]:
        n = min(n, common_prefix(sequences[0], s))
    return max(n, 0)


@dataclass(frozen=True)
class PrefixTree:
    order: list[int]  # the planned admission order
    parent: list[int | None]  # per document: who supplies its shared pages
    shared: list[int]  # per document: leading tokens referenced from the parent (whole pages)

    @classmethod
    def build(cls, docs: list[list[int]], page_size: int = PAGE_SIZE) -> "PrefixTree":
        order = sorted(range(len(docs)), key=lambda i: (docs[i], i))
        parent: list[int | None] = [None] * len(docs)
        shared = [0] * len(docs)
        for prev, cur in zip(order, order[1:]):
            n = min(common_prefix(docs[prev], docs[cur]), len(docs[cur]) - 1)
            n -= n % page_size
            if n <= 0:
                continue
            supplier = prev
            while shared[supplier] >= n and (up := parent[supplier]) is not None:
                supplier = up
            parent[cur], shared[cur] = supplier, n
        return cls(order, parent, shared)

    @classmethod
    def flat(cls, n: int) -> "PrefixTree":
        """No sharing, input order (a filter with a row limit; sharing switched off)."""
        return cls(list(range(n)), [None] * n, [0] * n)

    def without(self, drop: set[int]) -> "PrefixTree":
        """The same order with the sharing of the documents in `drop` removed."""
        parent = [None if i in drop else p for i, p in enumerate(self.parent)]
        shared = [0 if i in drop else s for i, s in enumerate(self.shared)]
        return PrefixTree(self.order, parent, shared)

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i, p in enumerate(self.parent):
            if p is not None:
                out.setdefault(p, []).append(i)
        return out

    def tokens_computed(self, lengths: list[int]) -> int:
        """Document tokens computed when every shared prefix is available."""
        return sum(n - s for n, s in zip(lengths, self.shared))
