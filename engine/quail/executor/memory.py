"""How many KV pages the arena gets.

On a GPU, what the device's memory holds after the weights: free memory times the utilization,
less an activation reserve measured by one dry-run pass of `max_batch_tokens` tokens (as vLLM sizes
its cache after a profile run). On a CPU, 1 GiB of KV, as before: the host's RAM is shared with
Airflow and the tables being read, and a CPU is limited by compute, not by KV (1 GiB holds 43,000
tokens of the default 0.5B model, many forward passes' worth). Either way an arena, or an explicit
`arena_pages`, that does not fit the memory available is refused before anything is allocated."""

from dataclasses import asdict, dataclass, replace

import torch

from quail.device import DeviceMemory, device_memory, device_name, synchronize
from quail.errors import QuailError
from quail.kv import KVArena
from quail.model.llama import LlamaModel

DEFAULT_CPU_ARENA_BYTES = 1 << 30


@dataclass(frozen=True)
class ArenaSizing:
    """What `quail worker status` and `quail explain` show of the device and its memory."""

    device: str
    memory_total: int  # bytes
    memory_free: int  # bytes free after the weights were loaded
    weights_bytes: int
    reserve_bytes: int  # one forward pass's activations, measured (0 on a CPU: not measured)
    utilization: float
    page_bytes: int
    arena_pages: int
    rule: str  # how arena_pages was chosen

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        gib = 1 << 30
        return (f"{self.device}: {self.memory_free / gib:.1f} of {self.memory_total / gib:.1f} GiB free after "
                f"{self.weights_bytes / gib:.2f} GiB of weights; activation reserve {self.reserve_bytes / gib:.2f} "
                f"GiB; arena {self.arena_pages:,} pages "
                f"({self.arena_pages * self.page_bytes / gib:.2f} GiB, {self.rule})")


def check_settings(arena_pages: int | None, max_batch_tokens: int | None, utilization: float) -> None:
    """Refuses settings no arena takes, before anything is loaded."""
    if arena_pages is not None and arena_pages < 1:
        raise QuailError(f"arena_pages must be at least 1, got {arena_pages}", parameter="arena_pages")
    if max_batch_tokens is not None and max_batch_tokens < 16:
        raise QuailError(f"max_batch_tokens must be at least 16, got {max_batch_tokens}", parameter="max_batch_tokens")
    if not 0 < utilization <= 1:
        raise QuailError(f"gpu_memory_utilization must be in (0, 1], got {utilization}",
                         parameter="gpu_memory_utilization")


def size_arena(memory: DeviceMemory, *, gpu: bool, weights_bytes: int, reserve_bytes: int, page_bytes: int,
               utilization: float, min_pages: int, arena_pages: int | None = None, device: str = "") -> ArenaSizing:
    """`memory` is read after the weights were loaded. `min_pages`: one forward pass's worth, the
    least an arena sized here may have (an explicit arena_pages is taken as given)."""
    check_settings(arena_pages, None, utilization)
    budget = int(memory.free * utilization) - reserve_bytes
    where = device or ("the GPU" if gpu else "this machine")
    if arena_pages is not None:
        if arena_pages * page_bytes > budget:
            raise QuailError(f"arena_pages {arena_pages:,}: "
                             f"{arena_pages * page_bytes / (1 << 30):.2f} GiB of KV does "
                             f"not fit the {max(budget, 0) / (1 << 30):.2f} GiB {where} has for it "
                             f"({utilization:.0%} of {memory.free / (1 << 30):.2f} GiB free, less the activation "
                             f"reserve); at most {max(budget, 0) // page_bytes:,} pages", parameter="arena_pages")
        rule = "given"
    elif gpu:
        arena_pages, rule = max(budget, 0) // page_bytes, f"{utilization:.0%} of free memory less the reserve"
    else:
        arena_pages, rule = max(min(DEFAULT_CPU_ARENA_BYTES, budget), 0) // page_bytes, "1 GiB of KV, the CPU default"
        if arena_pages < DEFAULT_CPU_ARENA_BYTES // page_bytes:
            rule = f"{utilization:.0%} of available RAM, under 1 GiB of KV"
    if rule != "given" and arena_pages < min_pages:
        raise QuailError(f"{where} leaves room for {arena_pages:,} KV pages after the weights "
                         f"({weights_bytes / (1 << 30):.2f} GiB) and one pass's activations "
                         f"({reserve_bytes / (1 << 30):.2f} GiB); one pass of max_batch_tokens needs {min_pages:,}: "
                         f"lower it, raise gpu_memory_utilization, or take a smaller model",
                         parameter="max_batch_tokens")
    return ArenaSizing(where, memory.total, memory.free, weights_bytes, reserve_bytes, utilization, page_bytes,
                       arena_pages, rule)


def measure_reserve(model: LlamaModel, max_batch_tokens: int, page_size: int) -> int:
    """Peak bytes one forward pass of `max_batch_tokens` tokens allocates beyond its own KV, on a
    scratch arena (CUDA only: a CPU's allocator is not instrumented, and its arena is small)."""
    if model.device.type != "cuda":
        return 0
    from quail.executor.kv_cache import PagedKVCache
    from quail.executor.model_runner import Chunk, ModelRunner
    from quail.executor.sequence import Seq
    from quail.kv import PageArena

    cfg, dev = model.cfg, model.device
    pages = PageArena(-(-max_batch_tokens // page_size), page_size)
    kv = KVArena(cfg.num_layers, pages.num_pages, cfg.num_kv_heads, cfg.head_dim, model.dtype, dev)
    synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    tokens = torch.randint(0, cfg.vocab_size, (max_batch_tokens,), generator=torch.Generator().manual_seed(0))
    ModelRunner(model, PagedKVCache(pages, kv)).run([Chunk(Seq(), tokens.tolist(), [max_batch_tokens - 1])])
    synchronize(dev)
    reserve = torch.cuda.max_memory_allocated(dev) - before
    del kv
    torch.cuda.empty_cache()  # the scratch's blocks go back, so free memory counts them
    return reserve


def plan_memory(model: LlamaModel, max_batch_tokens: int, page_size: int, utilization: float,
                arena_pages: int | None) -> ArenaSizing:
    cfg = model.cfg
    page_bytes = KVArena.page_bytes(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype, page_size)
    reserve = measure_reserve(model, max_batch_tokens, page_size)
    memory = device_memory(model.device)
    if not model.weights_loaded:  # read at their first use, when they take their room
        memory = replace(memory, free=max(0, memory.free - model.nbytes))
    return size_arena(memory, gpu=model.device.type == "cuda", weights_bytes=model.nbytes,
                      reserve_bytes=reserve, page_bytes=page_bytes, utilization=utilization,
                      min_pages=-(-max_batch_tokens // page_size), arena_pages=arena_pages,
                      device=f"{model.device} ({device_name(model.device)})")
