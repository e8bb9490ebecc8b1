"""Paged attention in Triton: one kernel for a ragged batch of new tokens against paged K/V.

A program takes BLOCK_M query tokens of one sequence and every query head of one KV head (GQA:
the G heads that share it are packed into the tile's rows, so K and V are loaded once for all of
them), walks that sequence's pages BLOCK_N keys at a time through its page table, and keeps an
online softmax in fp32. Causal alignment is at the bottom right: query token m of a sequence with
q_len new and k_len cached tokens sees keys 0 .. k_len - q_len + m, which covers prefill, chunked
prefill and one-token steps alike. Selected on CUDA by attention.py.
"""

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, table_ptr, q_start_ptr, q_len_ptr, k_len_ptr,
    scale_log2,
    stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_ot, stride_oh, stride_tb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr, UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    m0 = tl.program_id(1) * BLOCK_M
    kv_head = tl.program_id(2)
    q_len = tl.load(q_len_ptr + seq)
    if m0 >= q_len:
        return
    k_len = tl.load(k_len_ptr + seq)
    q_start = tl.load(q_start_ptr + seq)

    rows = tl.arange(0, BLOCK_M * GROUP_PAD)
    tok = m0 + rows // GROUP_PAD  # query token within the sequence
    head = kv_head * GROUP + rows % GROUP_PAD
    d = tl.arange(0, BLOCK_D)
    row_ok = (tok < q_len) & (rows % GROUP_PAD < GROUP)
    q_mask = row_ok[:, None] & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=q_mask, other=0.0)
    if UPCAST:  # the interpreter's bf16 dot is wrong
        q = q.to(tl.float32)

    last = k_len - q_len + tok  # the last key each row may see
    hi = tl.minimum(k_len, k_len - q_len + tl.minimum(m0 + BLOCK_M, q_len))
    m_i = tl.full([BLOCK_M * GROUP_PAD], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M * GROUP_PAD], tl.float32)
    acc = tl.zeros([BLOCK_M * GROUP_PAD, BLOCK_D], tl.float32)
    for start in range(0, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < k_len
        page = tl.load(table_ptr + seq * stride_tb + n // PAGE, mask=n_ok, other=0)
        kv_off = page * stride_kp + (n % PAGE) * stride_ks + kv_head * stride_kh
        kv_mask = n_ok[:, None] & (d[None, :] < HEAD_DIM)
        k = tl.load(k_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where((n[None, :] <= last[:, None]) & n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(out_ptr + (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_mask)


def launch_config(group: int, head_dim: int, is_cuda: bool) -> dict:
    """Tile sizes: about 64 query rows (heads x tokens) per program, 64 keys (4 pages) per step;
    8 warps above a head dim of 64 keep the fp32 accumulator in registers (4 spill at 128)."""
    group_pad = triton.next_power_of_2(group)
    warps = 4 if head_dim <= 64 else 8
    return {"GROUP_PAD": group_pad, "BLOCK_M": max(64 // group_pad, 1), "BLOCK_N": 64,
            "num_warps": warps if is_cuda else 1, "num_stages": 2 if is_cuda else 1}


def _device_meta(meta) -> dict[str, torch.Tensor]:
    """The batch's lengths and padded page tables as device tensors, built once per forward pass
    (every layer reuses them)."""
    cached = meta._triton
    if cached is None:
        def as_t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(meta.device)

        cached = {"table": as_t(meta.padded_tables()), "q_start": as_t(meta.q_start), "q_len": as_t(meta.q_len),
                  "k_len": as_t(meta.k_len), "max_q": int(meta.q_len.max())}
        meta._triton = cached
    return cached


def paged_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta,
                           scale: float, upcast: bool = False) -> torch.Tensor:
    """q: [T, H, D]; k_cache, v_cache: [pages, page_size, kv_heads, D]. Returns [T, H, D].
    upcast: compute in fp32 (Triton's interpreter gets bf16 dots wrong)."""
    T, H, D = q.shape
    kv_heads = k_cache.shape[2]
    if k_cache.stride() != v_cache.stride() or q.stride(2) != 1 or k_cache.stride(3) != 1:
        raise ValueError("paged attention wants contiguous head dims and K/V caches of one layout")
    dm = _device_meta(meta)
    cfg = launch_config(H // kv_heads, D, q.is_cuda)
    out = torch.empty_like(q)
    grid = (len(meta.page_tables), triton.cdiv(dm["max_q"], cfg["BLOCK_M"]), kv_heads)
    paged_attention_kernel[grid](
        q, k_cache, v_cache, out, dm["table"], dm["q_start"], dm["q_len"], dm["k_len"],
        scale * 1.4426950408889634,  # log2(e): the kernel uses exp2
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), dm["table"].stride(0),
        GROUP=H // kv_heads, HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), PAGE=meta.page_size, UPCAST=upcast,
        **cfg,
    )
    return out


def compile_ptx(arch: int, group: int, head_dim: int, dtype: str = "bf16") -> str:
    """PTX for a CUDA architecture (90: Hopper) at the default launch configuration, compiled ahead
    of time without a GPU; ptxas on it reports registers and spills."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = launch_config(group, head_dim, is_cuda=True)
    strides = ["stride_qt", "stride_qh", "stride_kp", "stride_ks", "stride_kh", "stride_ot", "stride_oh",
               "stride_tb"]
    signature = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
                 "table_ptr": "*i32", "q_start_ptr": "*i32", "q_len_ptr": "*i32", "k_len_ptr": "*i32",
                 "scale_log2": "fp32", **dict.fromkeys(strides, "i32")}
    constants = {"GROUP": group, "GROUP_PAD": cfg["GROUP_PAD"], "HEAD_DIM": head_dim,
                 "BLOCK_D": triton.next_power_of_2(head_dim), "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                 "PAGE": 16, "UPCAST": False}
    compiled = triton.compile(ASTSource(paged_attention_kernel, signature | dict.fromkeys(constants, "constexpr"),
                                        constants),
                              target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    return compiled.asm["ptx"]
