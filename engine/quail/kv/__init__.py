from quail.kv.kv_arena import KVArena
from quail.kv.page_arena import PAGE_SIZE, ArenaFull, PageArena, PageError

__all__ = ["KVArena", "PageArena", "PAGE_SIZE", "ArenaFull", "PageError"]
