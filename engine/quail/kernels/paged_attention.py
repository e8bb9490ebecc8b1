"""Paged attention over a ragged batch: the torch reference.

Each sequence b brings q_len[b] new query tokens (stored contiguously from q_start[b]) and attends,
causally aligned at the bottom right, to its k_len[b] cached tokens found through its page table.
The kernels (triton_paged_attention.py on CUDA, cpu_attention.py for bf16 on CPUs with AVX512-BF16)
take the same `AttentionMeta`; attention.py chooses among them.

The reference cuts each padded group into calls of at most `ROWS_PER_CALL` query rows, and gives
each call only the keys its last row may see, so a prefill computes about half the scores a square
masked call would (the CPU flash kernel skips nothing within a 512-key block).
"""

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class _Group:
    tok_idx: torch.Tensor  # flat positions of this group's query tokens
    pad_idx: torch.Tensor  # where they sit in the padded [b * max_q] layout
    pages: torch.Tensor  # [b, max_pages] page ids (padding points at page 0, masked out)
    mask: torch.Tensor  # [b, 1, max_q, max_pages * page_size]
    batch: int
    max_q: int
    max_k: int
    shift: int  # the most keys any sequence sees before its first query token


@dataclass
class AttentionMeta:
    q_start: np.ndarray
    q_len: np.ndarray
    k_len: np.ndarray
    page_tables: list[list[int]]
    page_size: int
    device: torch.device
    _groups: list[_Group] | None = field(default=None, repr=False)
    _triton: dict | None = field(default=None, repr=False)  # device tensors for the Triton kernel
    _cpu: tuple | None = field(default=None, repr=False)  # host arrays for the fused CPU kernel

    def padded_tables(self) -> np.ndarray:
        """The page tables as one [batch, longest table] array, padded with page 0 (never read)."""
        table = np.zeros((len(self.page_tables), max(1, max(len(t) for t in self.page_tables))), dtype=np.int64)
        for i, t in enumerate(self.page_tables):
            table[i, : len(t)] = t
        return table

    def groups(self) -> list[_Group]:
        if self._groups is None:
            self._groups = _build_groups(self)
        return self._groups


def _split_by_length(q_len: np.ndarray) -> list[np.ndarray]:
    """Sequences of similar query length share one padded SDPA call, so a long prefill chunk in
    the same pass as many short questions does not pad every question to the chunk's length."""
    order = np.argsort(-q_len, kind="stable")
    groups, current = [], [order[0]]
    for b in order[1:]:
        if q_len[b] * 2 < q_len[current[0]]:
            groups.append(np.array(current))
            current = []
        current.append(b)
    groups.append(np.array(current))
    return groups


def _build_groups(meta: AttentionMeta) -> list[_Group]:
    ps = meta.page_size
    out = []
    for seqs in _split_by_length(meta.q_len):
        ql, kl = meta.q_len[seqs], meta.k_len[seqs]
        b, max_q = len(seqs), int(ql.max())
        max_pages = int((kl.max() + ps - 1) // ps)
        max_k = max_pages * ps
        tok_idx = np.concatenate([np.arange(meta.q_start[s], meta.q_start[s] + meta.q_len[s]) for s in seqs])
        pad_idx = np.concatenate([i * max_q + np.arange(q) for i, q in enumerate(ql)])
        pages = np.zeros((b, max_pages), dtype=np.int64)
        for i, s in enumerate(seqs):
            table = meta.page_tables[s]
            pages[i, : len(table)] = table[:max_pages]
        qi = np.arange(max_q)[None, :, None]
        kj = np.arange(max_k)[None, None, :]
        last_visible = (kl - ql)[:, None, None] + qi  # bottom-right causal alignment
        mask = (kj <= last_visible) & (kj < kl[:, None, None])
        mask |= (qi >= ql[:, None, None]) & (kj == 0)  # padded query rows: avoid an all-masked row
        dev = meta.device
        out.append(
            _Group(
                tok_idx=torch.from_numpy(tok_idx).to(dev),
                pad_idx=torch.from_numpy(pad_idx).to(dev),
                pages=torch.from_numpy(pages).to(dev),
                mask=torch.from_numpy(mask[:, None]).to(dev),
                batch=b,
                max_q=max_q,
                max_k=max_k,
                shift=int((kl - ql).max()),
            )
        )
    return out


ROWS_PER_CALL = 64
# A call's keys in multiples of 16, as whole pages gave them: the CPU kernel then sums a row's
# masked keys as exact zeros in the same order, and the row's result does not move by a bit with
# the keys its call's other rows need
KEYS_ALIGN = 16
GATHER_BYTES = 64 << 20  # the most fp32 keys, values and mask one call gathers


def paged_attention_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta, scale: float
) -> torch.Tensor:
    """q: [T, H, D]; k_cache, v_cache: [pages, page_size, kv_heads, D]. Returns [T, H, D].

    Computed in fp32 whatever the cache's dtype: torch's CPU flash kernel runs bf16 no faster than
    fp32, and one-token steps ten times slower."""
    T, H, D = q.shape
    kvh = k_cache.shape[2]
    out = torch.empty_like(q)
    for g in meta.groups():
        qp = q.new_zeros(g.batch * g.max_q, H, D, dtype=torch.float32)
        qp[g.pad_idx] = q[g.tok_idx].float()
        qp = qp.view(g.batch, g.max_q, H, D).transpose(1, 2)
        o = torch.empty_like(qp)
        seqs = max(1, GATHER_BYTES // (4 * g.max_k * (2 * kvh * D + g.max_q)))
        for b0 in range(0, g.batch, seqs):
            b1 = min(b0 + seqs, g.batch)
            pages = g.pages[b0:b1].reshape(-1)
            k = k_cache.index_select(0, pages).float().view(b1 - b0, g.max_k, kvh, D).transpose(1, 2)
            v = v_cache.index_select(0, pages).float().view(b1 - b0, g.max_k, kvh, D).transpose(1, 2)
            for r0 in range(0, g.max_q, ROWS_PER_CALL):
                r1 = min(r0 + ROWS_PER_CALL, g.max_q)
                keys = min(g.max_k, -(-(g.shift + r1) // KEYS_ALIGN) * KEYS_ALIGN)
                o[b0:b1, :, r0:r1] = F.scaled_dot_product_attention(
                    qp[b0:b1, :, r0:r1], k[:, :, :keys], v[:, :, :keys],
                    attn_mask=g.mask[b0:b1, :, r0:r1, :keys], scale=scale, enable_gqa=True)
        out[g.tok_idx] = o.transpose(1, 2).reshape(g.batch * g.max_q, H, D)[g.pad_idx].to(q.dtype)
    return out
