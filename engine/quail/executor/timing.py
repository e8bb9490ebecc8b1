"""Measures the cost model on this device at engine start, once per device, model and dtype.

A few short prefill passes at different sizes and contexts on a scratch arena, then a least-squares
fit (cost/model.py). The result is cached under $QUAIL_HOME/cost (or $QUAIL_CALIBRATIONS, a private
folder that several homes on one machine share), so only the first start pays.
"""

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from quail.cost.model import CostModel, Sample
from quail.device import device_name, synchronize
from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.sequence import Seq
from quail.kv import PAGE_SIZE, KVArena, PageArena
from quail.model.llama import LlamaModel
from quail.paths import home
from quail.trust import private_folder

# (new tokens, tokens already cached): sizes small enough to take seconds on a CPU
PASSES = [(16, 0), (64, 0), (256, 0), (64, 192), (64, 448)]


def _cache_key(model: LlamaModel, max_batch_tokens: int) -> str:
    ident = {"config": asdict(model.cfg), "dtype": str(model.dtype), "device": device_name(model.device),
             "max_batch_tokens": max_batch_tokens}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _timed(fn: Callable[[], None], device: torch.device, repeat: int = 3) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)  # a GPU's kernels run after the launch returns
        best = min(best, time.perf_counter() - start)
    return best


def measure(model: LlamaModel, max_batch_tokens: int) -> CostModel:
    cfg = model.cfg
    longest = max(n + c for n, c in PASSES)
    pages = PageArena(-(-longest // PAGE_SIZE) + 1)
    kv = KVArena(cfg.num_layers, pages.num_pages, cfg.num_kv_heads, cfg.head_dim, model.dtype, model.device)
    cache = PagedKVCache(pages, kv)
    runner = ModelRunner(model, cache)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (longest,), generator=gen).tolist()
    samples = []
    for n, context in PASSES:
        seq = Seq()
        if context:
            runner.run([Chunk(seq, tokens[:context], [])])

        def one_pass(seq: Seq = seq, context: int = context, n: int = n) -> None:
            runner.run([Chunk(seq, tokens[context : context + n], [n - 1])])
            cache.rewind(seq, context)

        samples.append(Sample(n, context + (n - 1) / 2, _timed(one_pass, model.device)))
        cache.release(seq)
    slots = torch.arange(PAGE_SIZE * 4, device=model.device)
    k = torch.zeros(len(slots), cfg.num_kv_heads, cfg.head_dim, dtype=model.dtype, device=model.device)

    def write_pages() -> None:
        for layer in range(cfg.num_layers):
            kv.write(layer, slots, k, k)

    per_page = _timed(write_pages, model.device) / 4
    return CostModel.fit(samples, per_page, max_batch_tokens, device_name(model.device))


def calibrations() -> Path:
    """Where calibrations are kept: they describe this machine, not a user's runs."""
    given = os.environ.get("QUAIL_CALIBRATIONS", "")
    return private_folder(Path(given)) if given else home() / "cost"


def measured_cost(model: LlamaModel, max_batch_tokens: int) -> CostModel:
    path = calibrations() / f"{_cache_key(model, max_batch_tokens)}.json"
    cost = CostModel.load(path)
    if cost is None:
        cost = measure(model, max_batch_tokens)
        cost.save(path)
    return cost
