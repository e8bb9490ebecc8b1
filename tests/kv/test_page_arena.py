import pytest
import torch

from quail.executor.kv_cache import PagedKVCache
from quail.executor.sequence import Seq
from quail.kv import ArenaFull, KVArena, PageArena, PageError


def _cache(pages=4):
    return PagedKVCache(PageArena(pages), KVArena(1, pages, 1, 2, torch.float32))


def test_refcounts_and_free_list():
    a = PageArena(3)
    p = a.allocate()
    a.incref(p)
    a.decref(p)
    assert a.num_free == 2
    a.decref(p)
    assert a.num_free == 3


def test_double_free_and_use_after_free_are_errors():
    a = PageArena(2)
    p = a.allocate()
    a.decref(p)
    with pytest.raises(PageError, match="freed twice"):
        a.decref(p)
    with pytest.raises(PageError, match="after it was freed"):
        a.incref(p)
    with pytest.raises(PageError, match="after they were freed"):
        a.check_live([p])


def test_full_arena_raises():
    a = PageArena(1)
    a.allocate()
    with pytest.raises(ArenaFull):
        a.allocate()


def test_rewind_returns_whole_pages_only():
    c = _cache()
    s = Seq()
    c.grow(s, list(range(40)))  # 3 pages
    c.rewind(s, 17)  # page 2 is wholly past 17; page 1 is partly used and kept
    assert len(s.pages) == 2 and c.pages.num_free == 2
    c.release(s)
    assert c.pages.num_free == 4


def test_fork_shares_pages_and_copies_a_shared_partial_page_before_writing():
    c = _cache()
    parent = Seq()
    c.grow(parent, list(range(20)))
    c.kv.k[0][parent.pages[1], :4] = 7.0
    child = c.fork(parent)
    assert child.pages == parent.pages and c.pages.refcount(parent.pages[0]) == 2
    slots = c.grow(child, [1, 2])
    assert child.pages[0] == parent.pages[0]  # the full page stays shared
    assert child.pages[1] != parent.pages[1]  # the partial page was copied, not written in place
    assert torch.equal(c.kv.k[0][child.pages[1], :4], c.kv.k[0][parent.pages[1], :4])
    assert slots == [child.pages[1] * 16 + 4, child.pages[1] * 16 + 5]
    c.release(child)
    c.release(parent)
    assert c.pages.num_free == 4


def test_rebuild_keeps_what_live_sequences_hold():
    arena = PageArena(8)
    pages = [arena.allocate() for _ in range(6)]
    arena.incref(pages[1])
    arena.rebuild([[pages[0], pages[1]], [pages[1], pages[2]]])  # the rest was abandoned
    assert [arena.refcount(p) for p in pages[:4]] == [1, 2, 1, 0]
    assert arena.num_free == 5
    assert {arena.allocate() for _ in range(5)} == set(range(8)) - set(pages[:3])
