"""Sequences over the paged arena: grow, rewind, fork and release, with copy-on-write of a shared
partly filled page so a page that several sequences reference is never written."""

from quail.executor.sequence import Seq
from quail.kv import KVArena, PageArena


class PagedKVCache:
    def __init__(self, pages: PageArena, kv: KVArena):
        self.pages = pages
        self.kv = kv
        self.page_size = pages.page_size

    def pages_for(self, tokens: int) -> int:
        return self.pages.pages_for(tokens)

    def grow(self, seq: Seq, tokens: list[int]) -> list[int]:
        """Appends tokens to seq, allocating pages; returns their flat KV slots."""
        ps, start = self.page_size, len(seq)
        if start % ps and self.pages.refcount(seq.pages[-1]) > 1:
            shared = seq.pages[-1]
            own = self.pages.allocate()
            self.kv.copy_page(shared, own)
            self.pages.decref(shared)
            seq.pages[-1] = own
        end = start + len(tokens)
        while len(seq.pages) * ps < end:
            seq.pages.append(self.pages.allocate())
        seq.tokens.extend(tokens)
        return [seq.pages[p // ps] * ps + p % ps for p in range(start, end)]

    def rewind(self, seq: Seq, length: int) -> None:
        """Truncates seq's KV to `length` tokens; pages wholly past it return to the arena."""
        if length > len(seq):
            raise ValueError(f"cannot rewind a {len(seq)}-token sequence forward to {length}")
        keep = self.pages_for(length)
        for page in seq.pages[keep:]:
            self.pages.decref(page)
        del seq.pages[keep:]
        del seq.tokens[length:]
        seq.fresh = min(seq.fresh, length)

    def fork(self, seq: Seq, copy_credits: bool = False) -> Seq:
        """A child that references all of seq's pages. The accounting state moves to the child, so
        the first prompt evaluated on top of seq is charged for seq's fresh tokens exactly once.
        copy_credits: every child is credited with what seq received from another mechanism (for
        prompts computed without rewinding on a shared or retained base)."""
        for page in seq.pages:
            self.pages.incref(page)
        child = Seq(list(seq.tokens), list(seq.pages), seq.fresh, dict(seq.credits))
        seq.fresh = 0
        if not copy_credits:
            seq.credits = {}
        return child

    def share(self, seq: Seq, length: int) -> Seq:
        """A new sequence referencing seq's first `length` tokens (whole pages), credited as shared."""
        if length % self.page_size or length > len(seq):
            raise ValueError(f"a shared prefix is whole pages within the sequence, got {length} of {len(seq)}")
        pages = seq.pages[: length // self.page_size]
        for page in pages:
            self.pages.incref(page)
        return Seq(seq.tokens[:length], list(pages), 0, {"sharing": length})

    def release(self, seq: Seq) -> None:
        self.rewind(seq, 0)
