"""Turns a list of chunks (new tokens on top of sequences) into one ragged forward pass."""

from dataclasses import dataclass

import numpy as np
import torch

from quail.executor.kv_cache import PagedKVCache
from quail.executor.sequence import Seq
from quail.kernels.paged_attention import AttentionMeta
from quail.model.llama import ForwardBatch, LlamaModel


@dataclass
class Chunk:
    seq: Seq
    tokens: list[int]
    reads: list[int]  # offsets within `tokens` whose next-token log-probs are wanted
    pool: range | None = None  # offsets within `tokens` whose hidden states are summed into a vector


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: PagedKVCache):
        self.model = model
        self.cache = cache

    def run(self, chunks: list[Chunk]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Returns, per chunk, fp32 log-probs [len(reads), vocab] and the sum of its pool's hidden
        states [hidden] (None without a pool)."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        rows: list[int] = []
        q_start: list[int] = []
        q_len: list[int] = []
        k_len: list[int] = []
        tables: list[list[int]] = []
        pool_rows: list[int] = []
        pool_into: list[int] = []
        vectors = 0
        offset = 0
        for c in chunks:
            start = len(c.seq)
            slots.extend(self.cache.grow(c.seq, c.tokens))
            ids.extend(c.tokens)
            positions.extend(range(start, start + len(c.tokens)))
            rows.extend(offset + r for r in c.reads)
            q_start.append(offset)
            q_len.append(len(c.tokens))
            k_len.append(len(c.seq))
            tables.append(c.seq.pages)
            if c.pool is not None and len(c.pool):
                pool_rows.extend(range(offset + c.pool.start, offset + c.pool.stop))
                pool_into.extend([vectors] * len(c.pool))
                vectors += 1
            offset += len(c.tokens)
        self.cache.pages.check_live(np.concatenate([np.asarray(t, dtype=np.int64) for t in tables]))
        dev = self.model.device
        batch = ForwardBatch(
            input_ids=torch.tensor(ids, device=dev),
            positions=torch.tensor(positions, device=dev),
            slots=torch.tensor(slots, device=dev),
            attention=AttentionMeta(
                np.array(q_start), np.array(q_len), np.array(k_len), tables, self.cache.page_size, dev
            ),
            logit_rows=torch.tensor(rows, dtype=torch.long, device=dev),
            pool_rows=torch.tensor(pool_rows, dtype=torch.long, device=dev) if vectors else None,
            pool_into=torch.tensor(pool_into, dtype=torch.long, device=dev) if vectors else None,
            vectors=vectors,
        )
        out = self.model.forward(batch, self.cache.kv)
        logprobs = out.logprobs.cpu().split([len(c.reads) for c in chunks])
        sums = iter(list(out.vectors.cpu()) if out.vectors is not None else [])
        return [(lp, next(sums) if c.pool is not None and len(c.pool) else None) for lp, c in zip(logprobs, chunks)]
