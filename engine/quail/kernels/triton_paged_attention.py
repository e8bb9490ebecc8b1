"""Paged attention in Triton: one kernel for a ragged batch of new tokens against paged K/V.

A program takes BLOCK_M query rows of one sequence and one KV head, a row being a (token, query
head) pair of the G heads that share the KV head: the rows are packed token-major without padding
(vLLM's unified attention packs them the same way), so K and V are loaded once for all G heads and
no row is wasted on a group of 6. It walks that sequence's pages BLOCK_N keys at a time through its
page table, keeping an online softmax in fp32. Causal alignment is at the bottom right: query token
m of a sequence with q_len new and k_len cached tokens sees keys 0 .. k_len - q_len + m, which
covers prefill, chunked prefill, questions over kept documents and one-token steps alike.

The programs of one sequence and KV head are numbered next to each other, so the tiles that read
the same K/V run together and read it from L2, not device memory. When the programs are too few to
fill the GPU (a few sequences, one-token steps over long documents), each sequence's keys are split
across programs, which write partial results and their log-sum-exp; a second kernel merges them.
Tile sizes: BLOCK_M by the batch's rows (`block_m`); BLOCK_N, warps and stages among those that
compile without spills (`SPILL_FREE`), timed once per process and shape on CUDA (`Tuner`).
Selected on CUDA by attention.py.
"""

import time
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl
import triton.testing

BLOCK_MS = (128, 64, 32, 16)  # tl.dot wants at least 16 rows
MIN_KEYS_PER_SPLIT = 256  # fewer, and the merge costs more than the split gains
MAX_SPLITS = 16
WIDE_ELEMENTS = 2**31  # a layer's cache this large or larger takes int64 offsets
EMPTY = tl.constexpr(-1.0e30)  # the log-sum-exp of a split that saw no key: weight 0 in the merge


@triton.jit
def paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, table_ptr, q_start_ptr, q_len_ptr, k_len_ptr,
    scale_log2, tiles, splits, kv_heads,
    stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_os, stride_ot, stride_oh, stride_tb,
    stride_ls, stride_lt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PAGE: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr, WIDE: tl.constexpr,
):
    pid = tl.program_id(0)  # tile fastest, then split, KV head, sequence
    tile = pid % tiles
    split = (pid // tiles) % splits
    kv_head = (pid // (tiles * splits)) % kv_heads
    seq = pid // (tiles * splits * kv_heads)
    q_len = tl.load(q_len_ptr + seq)
    r0 = tile * BLOCK_M
    if r0 >= q_len * GROUP:
        return
    k_len = tl.load(k_len_ptr + seq)
    q_start = tl.load(q_start_ptr + seq)

    rows = r0 + tl.arange(0, BLOCK_M)
    tok = rows // GROUP  # query token within the sequence
    head = kv_head * GROUP + rows % GROUP
    d = tl.arange(0, BLOCK_D)
    row_ok = tok < q_len
    q_mask = row_ok[:, None] & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=q_mask, other=0.0)
    if UPCAST:  # the interpreter's bf16 dot is wrong
        q = q.to(tl.float32)

    last = k_len - q_len + tok  # the last key each row may see
    hi = k_len - q_len + tl.minimum((r0 + BLOCK_M - 1) // GROUP, q_len - 1) + 1
    chunk = tl.cdiv(tl.cdiv(hi, splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(hi, lo + chunk)
    m_i = tl.full([BLOCK_M], EMPTY, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        page = tl.load(table_ptr + seq * stride_tb + n // PAGE, mask=n_ok, other=0)
        if WIDE:  # int32 offsets would wrap; int64 ones cost registers (the tuner skips what spills)
            page = page.to(tl.int64)
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
    at = (q_start + tok) * stride_ot + head * stride_oh
    if SPLIT:
        at += split * stride_os
        lse = tl.where(l_i == 0.0, EMPTY, m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        tl.store(lse_ptr + split * stride_ls + (q_start + tok) * stride_lt + head, lse, mask=row_ok)
    tl.store(out_ptr + at[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def merge_kernel(partial_ptr, lse_ptr, out_ptr, splits, heads,
                 stride_ps, stride_pt, stride_ph, stride_ls, stride_lt, stride_ot, stride_oh,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr):
    """One token, all its heads: the splits' partial outputs weighted by their share of the softmax."""
    t = tl.program_id(0)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    h_ok = h < heads
    mask = h_ok[:, None] & (d[None, :] < HEAD_DIM)
    top = tl.load(lse_ptr + t * stride_lt + h, mask=h_ok, other=0.0)
    for s in range(1, splits):
        top = tl.maximum(top, tl.load(lse_ptr + s * stride_ls + t * stride_lt + h, mask=h_ok, other=0.0))
    total = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    weight = tl.zeros([BLOCK_H], tl.float32)
    for s in range(splits):
        w = tl.exp2(tl.load(lse_ptr + s * stride_ls + t * stride_lt + h, mask=h_ok, other=0.0) - top)
        partial = tl.load(partial_ptr + s * stride_ps + t * stride_pt + h[:, None] * stride_ph + d[None, :], mask=mask,
                       other=0.0)
        total += w[:, None] * partial
        weight += w
    tl.store(out_ptr + t * stride_ot + h[:, None] * stride_oh + d[None, :],
             (total / weight[:, None]).to(out_ptr.dtype.element_ty), mask=mask)


def merge_warps(heads: int, head_dim: int) -> int:
    return 4 if triton.next_power_of_2(heads) * triton.next_power_of_2(head_dim) <= 4096 else 8


def block_m(q_len: np.ndarray, group: int, head_dim: int) -> int:
    """The largest tile that compiles without spills at this head dim whose padding costs at most an
    eighth more rows than the smallest tile's: a batch of questions of 32 tokens on 6 heads (192 rows
    each) gets 64, a prefill the largest, a one-token step 16."""
    rows = q_len.astype(np.int64) * group
    sizes = [m for m in BLOCK_MS if (m, _dims(head_dim)) in SPILL_FREE]
    padded = {m: int((-(-rows // m) * m).sum()) for m in sizes}
    least = padded[sizes[-1]]
    return next(m for m in sizes if padded[m] * 8 <= least * 9)


def kv_splits(programs: int, processors: int, longest_k: int) -> int:
    """Splits of each sequence's keys: enough programs for two per multiprocessor, each split at
    least MIN_KEYS_PER_SPLIT keys."""
    if programs >= 2 * processors:
        return 1
    return max(1, min(-(-2 * processors // programs), longest_k // MIN_KEYS_PER_SPLIT, MAX_SPLITS))


@dataclass(frozen=True)
class LaunchConfig:
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2


# (BLOCK_M, head dims up to): (BLOCK_N, warps) that compile for sm_90a without spilling registers
# (ptxas -v over GQA groups 1, 4, 6 and 8; tests/kernels checks the first of each), the first the
# untimed default, at most three a tile, each compiled once per process at two depths; the tuner
# also skips any that spill on the GPU at hand. 128 rows spill at a head dim of 128 whatever the rest.
SPILL_FREE = {
    (16, 64): ((64, 4), (32, 4), (128, 4)), (32, 64): ((64, 4), (32, 4), (64, 8)),
    (64, 64): ((64, 8), (32, 4), (128, 8)), (128, 64): ((64, 8), (32, 8), (128, 8)),
    (16, 128): ((64, 4), (32, 4)), (32, 128): ((64, 8), (32, 4), (32, 8)), (64, 128): ((64, 8), (32, 8), (128, 8)),
}


def _dims(head_dim: int) -> int:
    return 64 if head_dim <= 64 else 128


def candidates(bm: int, head_dim: int) -> list[LaunchConfig]:
    """What the tuner times, two pipeline depths each; the first is what runs untimed (in the
    interpreter, in compile_ptx). A tile outside the table (forced by a test or a benchmark) gets
    one config, which may spill."""
    tiles = SPILL_FREE.get((bm, _dims(head_dim)), ((64, 8 if bm >= 64 else 4),))
    return [LaunchConfig(n, w, s) for n, w in tiles for s in (2, 3)]


class Tuner:
    """Times each candidate once per process and shape (GQA group, head dim, page, BLOCK_M, split,
    wide offsets, dtype) on the batch at hand, then keeps the fastest; configs that spill registers are skipped.
    `chosen` says what it picked, for the GPU check."""

    def __init__(self):
        self.chosen: dict[tuple, LaunchConfig] = {}

    def config(self, key: tuple, options: list[LaunchConfig], launch, timer) -> LaunchConfig:
        """timer(fn) -> milliseconds, or None: the first option, untimed and not kept."""
        if key in self.chosen:
            return self.chosen[key]
        if timer is None:
            return options[0]
        times: dict[LaunchConfig, float] = {}
        for c in options:
            if getattr(launch(c), "n_spills", 0):
                continue
            times[c] = timer(lambda c=c: launch(c))
        self.chosen[key] = min(times, key=lambda c: times[c]) if times else options[0]
        return self.chosen[key]


def cuda_milliseconds(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=20)


def wall_milliseconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


TUNER = Tuner()


def _processors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _tiling(meta, group: int, kv_heads: int, bm: int) -> tuple[int, int]:
    """The tiles a sequence's query rows take at BLOCK_M `bm`, and the key splits their programs want."""
    tiles = max(1, -(-int(meta.q_len.max()) * group // bm))
    return tiles, kv_splits(len(meta.page_tables) * tiles * kv_heads, _processors(meta.device), int(meta.k_len.max()))


def _device_meta(meta, group: int, kv_heads: int, head_dim: int) -> dict:
    """The batch's lengths, padded page tables, tile and key splits, built once per forward pass
    (every layer reuses them)."""
    cached = meta._triton
    if cached is None:
        def as_t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(meta.device)

        bm = block_m(meta.q_len, group, head_dim)
        tiles, splits = _tiling(meta, group, kv_heads, bm)
        cached = {"table": as_t(meta.padded_tables()), "q_start": as_t(meta.q_start), "q_len": as_t(meta.q_len),
                  "k_len": as_t(meta.k_len), "block_m": bm, "tiles": tiles, "splits": splits}
        meta._triton = cached
    return cached


def paged_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta,
                           scale: float, upcast: bool = False, bm: int | None = None,
                           splits: int | None = None, tune: bool | None = None) -> torch.Tensor:
    """q: [T, H, D]; k_cache, v_cache: [pages, page_size, kv_heads, D]. Returns [T, H, D].
    upcast: compute in fp32 (Triton's interpreter gets bf16 dots wrong). bm, splits: the tile's
    rows and the key splits, for tests and benchmarks (else chosen per batch); tune: time the
    configs (default: on CUDA)."""
    T, H, D = q.shape
    kv_heads = k_cache.shape[2]
    group = H // kv_heads
    if k_cache.stride() != v_cache.stride() or q.stride(2) != 1 or k_cache.stride(3) != 1:
        raise ValueError("paged attention wants contiguous head dims and K/V caches of one layout")
    dm = _device_meta(meta, group, kv_heads, D)
    rows = bm or dm["block_m"]
    tiles, chosen = (dm["tiles"], dm["splits"]) if bm is None else _tiling(meta, group, kv_heads, bm)
    splits = splits or chosen
    wide = k_cache.numel() >= WIDE_ELEMENTS
    out = torch.empty_like(q)
    split = splits > 1
    if split:
        target = torch.empty(splits, T, H, D, dtype=torch.float32, device=q.device)
        lse = torch.empty(splits, T, H, dtype=torch.float32, device=q.device)
    else:
        target, lse = out, out  # lse is not read without a split
    os_, ot, oh = (target.stride(0), target.stride(1), target.stride(2)) if split else (0, out.stride(0), out.stride(1))
    ls, lt = (lse.stride(0), lse.stride(1)) if split else (0, 0)
    grid = (len(meta.page_tables) * kv_heads * splits * tiles,)

    def launch(c: LaunchConfig):
        return paged_attention_kernel[grid](
            q, k_cache, v_cache, target, lse, dm["table"], dm["q_start"], dm["q_len"], dm["k_len"],
            scale * 1.4426950408889634,  # log2(e): the kernel uses exp2
            tiles, splits, kv_heads,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), os_, ot, oh,
            dm["table"].stride(0), ls, lt,
            GROUP=group, HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_M=rows, BLOCK_N=c.block_n,
            PAGE=meta.page_size, SPLIT=split, UPCAST=upcast, WIDE=wide,
            num_warps=c.num_warps if q.is_cuda else 1,
            num_stages=c.num_stages if q.is_cuda else 1,
        )

    key = (group, D, meta.page_size, rows, split, wide, q.dtype)
    timer = (cuda_milliseconds if q.is_cuda else wall_milliseconds) if (q.is_cuda if tune is None else tune) else None
    config = TUNER.config(key, candidates(rows, D), launch, timer)
    launch(config)
    if split:
        merge_kernel[(T,)](target, lse, out, splits, H, target.stride(0), target.stride(1), target.stride(2),
                           lse.stride(0), lse.stride(1), out.stride(0), out.stride(1), HEAD_DIM=D,
                           BLOCK_D=triton.next_power_of_2(D), BLOCK_H=triton.next_power_of_2(H),
                           num_warps=merge_warps(H, D) if q.is_cuda else 1)
    return out


def _ptx(kernel, signature: dict, constants: dict, arch: int, **options: int) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(kernel, signature | dict.fromkeys(constants, "constexpr"), constants)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options).asm["ptx"]


def compile_ptx(arch: int, group: int, head_dim: int, dtype: str = "bf16", bm: int = 64, split: bool = False,
                config: LaunchConfig | None = None, wide: bool = False) -> str:
    """PTX for a CUDA architecture (90: Hopper) at a tile and config (default: the untimed one),
    compiled ahead of time without a GPU; ptxas on it reports registers and spills."""
    c = config or candidates(bm, head_dim)[0]
    ints = ["tiles", "splits", "kv_heads", "stride_qt", "stride_qh", "stride_kp", "stride_ks", "stride_kh",
            "stride_os", "stride_ot", "stride_oh", "stride_tb", "stride_ls", "stride_lt"]
    signature = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}",
                 "out_ptr": "*fp32" if split else f"*{dtype}", "lse_ptr": "*fp32" if split else f"*{dtype}",
                 "table_ptr": "*i32", "q_start_ptr": "*i32", "q_len_ptr": "*i32", "k_len_ptr": "*i32",
                 "scale_log2": "fp32", **dict.fromkeys(ints, "i32")}
    constants = {"GROUP": group, "HEAD_DIM": head_dim, "BLOCK_D": triton.next_power_of_2(head_dim), "BLOCK_M": bm,
                 "BLOCK_N": c.block_n, "PAGE": 16, "SPLIT": split, "UPCAST": False, "WIDE": wide}
    return _ptx(paged_attention_kernel, signature, constants, arch, num_warps=c.num_warps, num_stages=c.num_stages)


def compile_merge_ptx(arch: int, heads: int, head_dim: int, dtype: str = "bf16") -> str:
    ints = ["splits", "heads", "stride_ps", "stride_pt", "stride_ph", "stride_ls", "stride_lt", "stride_ot",
            "stride_oh"]
    signature = {"partial_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": f"*{dtype}", **dict.fromkeys(ints, "i32")}
    constants = {"HEAD_DIM": head_dim, "BLOCK_D": triton.next_power_of_2(head_dim),
                 "BLOCK_H": triton.next_power_of_2(heads)}
    return _ptx(merge_kernel, signature, constants, arch, num_warps=merge_warps(heads, head_dim))
