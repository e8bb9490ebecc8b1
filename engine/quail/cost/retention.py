"""What retained KV is worth, and how much of the arena retention may hold (docs/design.md#kv-retention)."""


def priority(probability_of_reuse: float, recompute_seconds: float, pages: int) -> float:
    """Estimated future compute saved per page; the pool evicts the lowest first."""
    return probability_of_reuse * recompute_seconds / max(pages, 1)


def capacity(arena_pages: int, max_batch_tokens: int, page_size: int) -> int:
    """The arena minus a reserve for two forward passes at max_batch_tokens."""
    return max(0, arena_pages - 2 * -(-max_batch_tokens // page_size))
