"""The engine: a model, its paged KV arena, the retention pool and the scheduler, in one session."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from quail.constants import (
    DEFAULT_CUDA_MAX_BATCH_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_BATCH_TOKENS,
    PAGE_SIZE,
)
from quail.cost import retention
from quail.cost.model import CostModel
from quail.device import synchronize
from quail.executor.kv_cache import PagedKVCache
from quail.executor.memory import ArenaSizing, plan_memory
from quail.executor.model_runner import ModelRunner
from quail.executor.program import Program
from quail.executor.retention_pool import RetentionPool
from quail.executor.scheduler import Scheduler
from quail.executor.stats import Stats
from quail.executor.timing import measured_cost
from quail.kv import KVArena, PageArena
from quail.model.llama import LlamaModel
from quail.prefix_tree import PrefixTree
from quail.reuse import Reuse


def default_max_batch_tokens(device: torch.device) -> int:
    return DEFAULT_CUDA_MAX_BATCH_TOKENS if device.type == "cuda" else DEFAULT_MAX_BATCH_TOKENS


@dataclass(frozen=True)
class PhysicalSettings:
    """The physical settings: how big the arena is and how much one forward pass may take."""

    arena_pages: int
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    page_size: int = PAGE_SIZE
    memory: ArenaSizing | None = field(default=None, compare=False)  # how arena_pages was sized

    @classmethod
    def for_model(cls, model: LlamaModel, arena_pages: int | None = None, max_batch_tokens: int | None = None,
                  utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION) -> "PhysicalSettings":
        """Sized from the device's memory (executor/memory.py); `arena_pages` overrides, checked."""
        max_batch_tokens = max_batch_tokens or default_max_batch_tokens(model.device)
        sizing = plan_memory(model, max_batch_tokens, PAGE_SIZE, utilization, arena_pages)
        return cls(sizing.arena_pages, max_batch_tokens, memory=sizing)


class Engine:
    def __init__(self, model: LlamaModel, settings: PhysicalSettings, cost: CostModel | None = None):
        cfg = model.cfg
        self.model = model
        self.settings = settings
        self.cost = cost or measured_cost(model, settings.max_batch_tokens)
        pages = PageArena(settings.arena_pages, settings.page_size)
        kv = KVArena(cfg.num_layers, settings.arena_pages, cfg.num_kv_heads, cfg.head_dim, model.dtype, model.device)
        self.cache = PagedKVCache(pages, kv)
        self.pool = RetentionPool(self.cache, retention.capacity(settings.arena_pages, settings.max_batch_tokens,
                                                                 settings.page_size), self.cost)
        runner = ModelRunner(model, self.cache)
        self.scheduler = Scheduler(runner, self.cache, self.pool, self.cost, settings.max_batch_tokens)

    @property
    def free_pages(self) -> int:
        return self.cache.pages.num_free

    def consumed(self, operator: str) -> None:
        """The retention schedule: `operator` ran, so KV only it could claim is freed."""
        self.scheduler.call(lambda: self.pool.consumed(operator))

    def sharing_plan(self, docs: list[list[int]]) -> PrefixTree:
        """The PrefixTree with the prefix sharing rule applied to each document's shared pages."""
        tree = PrefixTree.build(docs, self.settings.page_size)
        worthless = {i for i, s in enumerate(tree.shared)
                     if s and not self.cost.sharing_saves(s, s // self.settings.page_size)}
        return tree.without(worthless) if worthless else tree

    def run(self, programs: list[Program], progress: Callable[[int, int], None] | None = None,
            reuse: Reuse = Reuse()) -> tuple[list, Stats]:
        stats = Stats(pages_total=self.settings.arena_pages)
        start = time.perf_counter()
        # identical documents are computed once and their answers fanned out (counted as prefix reuse)
        first: dict[str, int] = {}
        copies: list[tuple[int, int]] = []
        unique: list[int] = []
        for i, p in enumerate(programs):
            key = p.key if reuse.sharing else None
            if key is not None and key in first:
                copies.append((i, first[key]))
            else:
                if key is not None:
                    first[key] = len(unique)
                unique.append(i)
        todo = [programs[i] for i in unique]
        docs = [p.doc for p in todo if p.doc is not None]
        tree = self.sharing_plan(docs) if reuse.sharing and len(docs) == len(todo) else PrefixTree.flat(len(todo))
        out = self.scheduler.run(todo, tree, stats, reuse.borrowing, progress)
        results = [None] * len(programs)
        for k, i in enumerate(unique):
            results[i] = out.results[k]
        for i, k in copies:
            results[i] = out.results[k]
            stats.tokens_naive += out.naive[k].tokens_naive
            stats.tokens_reused["sharing"] += out.naive[k].tokens_naive
            for name, s in out.naive_steps[k].items():
                step = stats.step(name)
                step.tokens_naive += s.tokens_naive
                step.prompts += s.prompts
            if progress is not None:
                progress(programs[i].rows, 0)
        stats.duplicates = len(copies)
        synchronize(self.model.device)
        stats.seconds = time.perf_counter() - start
        stats.check()
        return results, stats
