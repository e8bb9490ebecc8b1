"""The engine: a model, its paged KV arena, the retention pool and the scheduler, in one session."""

import time
from collections.abc import Callable
from dataclasses import dataclass

from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import ModelRunner
from quail.executor.retention_pool import RetentionPool
from quail.executor.scheduler import Program, Scheduler
from quail.executor.stats import Stats
from quail.kv import PAGE_SIZE, KVArena, PageArena
from quail.model.llama import LlamaModel

DEFAULT_CPU_BUDGET = 1 << 30  # bytes of KV when neither --arena-pages nor a budget is given


@dataclass(frozen=True)
class PhysicalPlan:
    """The physical plan settings: how big the arena is and how much one forward pass may take."""

    arena_pages: int
    max_batch_tokens: int = 2048
    page_size: int = PAGE_SIZE

    @classmethod
    def for_model(cls, model: LlamaModel, arena_pages=None, memory_budget=None, max_batch_tokens=2048):
        if arena_pages is None:
            cfg = model.cfg
            page = KVArena.page_bytes(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype)
            arena_pages = max(1, (memory_budget or DEFAULT_CPU_BUDGET) // page)
        return cls(arena_pages=arena_pages, max_batch_tokens=max_batch_tokens)


class Engine:
    def __init__(self, model: LlamaModel, plan: PhysicalPlan):
        cfg = model.cfg
        self.model = model
        self.plan = plan
        pages = PageArena(plan.arena_pages, plan.page_size)
        kv = KVArena(cfg.num_layers, plan.arena_pages, cfg.num_kv_heads, cfg.head_dim, model.dtype, model.device)
        self.cache = PagedKVCache(pages, kv)
        self.pool = RetentionPool(self.cache)
        self.scheduler = Scheduler(ModelRunner(model, self.cache), self.cache, self.pool, plan.max_batch_tokens)

    @property
    def free_pages(self) -> int:
        return self.cache.pages.num_free

    def run(self, programs: list[Program], progress: Callable[[int, int], None] | None = None) -> tuple[list, Stats]:
        stats = Stats(pages_total=self.plan.arena_pages)
        self.cache.pages.peak_used = self.cache.pages.num_used
        start = time.perf_counter()
        results = self.scheduler.run(programs, stats, progress)
        stats.seconds = time.perf_counter() - start
        stats.pages_peak = self.cache.pages.peak_used
        stats.check()
        return results, stats
