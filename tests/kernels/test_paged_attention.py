"""The torch reference of paged attention against attention written out per sequence in fp64, on a
ragged batch whose prefills are longer than one call's rows and whose sequences see different
numbers of keys before their first query token."""

import numpy as np
import pytest
import torch

from quail.kernels import paged_attention
from quail.kernels.paged_attention import AttentionMeta, paged_attention_reference

PAGE = 16
# (q_len, k_len): a prefill of three calls' rows, one with kept keys before it, a question on a
# kept document, one-token steps, and a prefill shorter than a page
RAGGED = [(150, 150), (140, 175), (20, 300), (22, 260), (1, 45), (1, 200), (5, 5)]


def ragged_batch(ragged: list[tuple[int, int]], heads: int, kv_heads: int, dim: int, dtype: torch.dtype,
                 seed: int = 0):
    """Random q and a paged K/V arena for sequences of (q_len, k_len), whose page tables point all
    over the arena."""
    g = torch.Generator().manual_seed(seed)
    pages = sum(-(-k // PAGE) for _, k in ragged) + 3
    order = torch.randperm(pages, generator=g).tolist()
    tables, q_start, at = [], [], 0
    for q, k in ragged:
        n = -(-k // PAGE)
        tables.append(order[:n])
        order = order[n:]
        q_start.append(at)
        at += q
    q = torch.randn(at, heads, dim, generator=g).to(dtype)
    k = torch.randn(pages, PAGE, kv_heads, dim, generator=g).to(dtype)
    v = torch.randn(pages, PAGE, kv_heads, dim, generator=g).to(dtype)
    meta = AttentionMeta(np.array(q_start), np.array([q for q, _ in ragged]), np.array([k for _, k in ragged]),
                         tables, PAGE, torch.device("cpu"))
    return q, k, v, meta


def _written_out(q, k_cache, v_cache, meta, scale):
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k_cache.shape[2]
    for s, table in enumerate(meta.page_tables):
        ql, kl, at = int(meta.q_len[s]), int(meta.k_len[s]), int(meta.q_start[s])
        k = k_cache[table].flatten(0, 1)[:kl].double().repeat_interleave(group, dim=1)
        v = v_cache[table].flatten(0, 1)[:kl].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[at:at + ql].double(), k) * scale
        hidden = torch.arange(kl)[None, :] > (kl - ql + torch.arange(ql))[:, None]
        weights = scores.masked_fill(hidden, float("-inf")).softmax(-1)
        out[at:at + ql] = torch.einsum("hqk,khd->qhd", weights, v)
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("heads,kv_heads,dim", [(6, 2, 32), (4, 4, 16)])
def test_the_reference_is_attention_per_sequence(heads, kv_heads, dim, dtype, tol):
    q, k, v, meta = ragged_batch(RAGGED, heads, kv_heads, dim, dtype)
    got = paged_attention_reference(q, k, v, meta, dim ** -0.5)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), _written_out(q, k, v, meta, dim ** -0.5), atol=tol, rtol=tol)


def test_gathering_a_few_sequences_at_a_time_changes_nothing(monkeypatch):
    q, k, v, meta = ragged_batch(RAGGED, 6, 2, 32, torch.float32)
    whole = paged_attention_reference(q, k, v, meta, 0.2)
    monkeypatch.setattr(paged_attention, "GATHER_BYTES", 1)  # one sequence per call
    meta._groups = None
    torch.testing.assert_close(paged_attention_reference(q, k, v, meta, 0.2), whole, atol=1e-6, rtol=1e-6)

