"""The retention pool's order: lowest priority first, then latest next use; capacity; borrowing."""

import torch

from quail.cost import retention
from quail.cost.model import CostModel
from quail.executor.kv_cache import PagedKVCache
from quail.executor.retention_pool import RetentionPool
from quail.executor.sequence import Seq
from quail.kv import KVArena, PageArena

# a linear cost model: recompute seconds proportional to tokens, so priority = probability * const
LINEAR = CostModel(per_pass=0.0, per_token=1e-3, per_token_context=0.0, kv_write_per_page=1e-6,
                   max_batch_tokens=256)


def _pool(pages=64, capacity=10):
    cache = PagedKVCache(PageArena(pages), KVArena(1, pages, 1, 4, torch.float32))
    return cache, RetentionPool(cache, capacity, LINEAR)


def _seq(cache, n_pages, start=0):
    seq = Seq()
    cache.grow(seq, list(range(start, start + 16 * n_pages)))
    return seq


def test_priority_is_reuse_probability_times_seconds_per_page():
    assert retention.priority(0.5, 2.0, 4) == 0.25
    assert retention.capacity(arena_pages=100, max_batch_tokens=256, page_size=16) == 68


def test_full_pool_evicts_the_lowest_priority_and_refuses_what_is_worth_less():
    cache, pool = _pool(capacity=6)
    assert pool.put("a", _seq(cache, 2), probability=0.2)
    assert pool.put("b", _seq(cache, 2), probability=1.0)
    assert pool.put("c", _seq(cache, 2), probability=0.5)
    assert pool.put("d", _seq(cache, 2), probability=0.9)  # evicts a
    assert "a" not in pool and len(pool) == 3
    assert not pool.put("e", _seq(cache, 2), probability=0.1)  # worth less than everything kept
    assert pool.pages == 6 and cache.pages.num_used == 6
    # a large entry that only the cheapest kept one could make room for is refused without evicting it
    assert not pool.put("f", _seq(cache, 4), probability=0.7)
    assert {k for k in "bcd" if k in pool} == {"b", "c", "d"} and pool.evictions == 1


def test_borrowing_takes_only_what_is_worth_less_than_the_work():
    cache, pool = _pool()
    pool.put("low", _seq(cache, 2), probability=0.1)
    pool.put("high", _seq(cache, 2), probability=1.0)
    worth = retention.priority(0.5, LINEAR.prefill_seconds(32), 2)
    assert not pool.borrow(4, worth)  # only "low" is worth less than the work
    assert "low" not in pool and "high" in pool
    assert pool.borrow(2, None)  # with nothing running, anything may go
    assert len(pool) == 0 and cache.pages.num_used == 0


def test_equal_priorities_evict_the_latest_needed_and_unclaimed_first():
    cache, pool = _pool()
    for key in "xyz":
        pool.put(key, _seq(cache, 1), probability=0.5)
    # waiting work claims z next and x later; y is not claimed by it. Claimed entries count as certain.
    pool.borrow(1, None, next_use={"z": 0, "x": 5})
    assert "y" not in pool
    pool.put("w", _seq(cache, 1), probability=1.0)
    pool.borrow(1, None, next_use={"z": 0, "x": 5, "w": 9})
    assert "w" not in pool and {"x", "z"} <= {k for k in "xz" if k in pool}


def test_entries_are_released_after_their_last_consumer():
    cache, pool = _pool()
    pool.put("a", _seq(cache, 1), consumers=frozenset({"classify", "join"}))
    pool.put("b", _seq(cache, 1), consumers=frozenset({"classify"}))
    pool.consumed("classify")
    assert "a" in pool and "b" not in pool
    pool.consumed("join")
    assert len(pool) == 0 and cache.pages.num_used == 0


def test_kv_taken_by_another_run_comes_back_for_the_consumers_still_waiting():
    """Two DAG runs over the same document on one worker: run 2's filter takes the KV run 1's filter
    kept for its classify, and keeps it for both classifies; each classify then finds it, and it
    is freed once both have run."""
    from quail.executor.retention_pool import document_key
    from quail.reuse import Retain

    cache, pool = _pool()
    doc = list(range(32))
    key = document_key(doc)
    for_run = lambda run: Retain(frozenset({f"{run}:topic"}), 1.0, 0.0)
    first = Seq()
    cache.grow(first, doc)
    pool.keep_or_release(doc, first, for_run("r1"))  # run 1's filter
    second = pool.take(key)  # run 2's filter reuses it...
    pool.keep_or_release(doc, second, for_run("r2"))  # ...and keeps it for run 2's classify
    for run in ("r1", "r2"):  # each classify finds it, and plans nothing after itself
        seq = pool.take(key)
        assert seq is not None and seq.credits == {"retention": 32}, run
        pool.keep_or_release(doc, seq, None)
        pool.consumed(f"{run}:topic")
    assert len(pool) == 0 and cache.pages.num_used == 0
