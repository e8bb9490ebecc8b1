"""The GPU check: the Triton paged-attention kernel against an fp64 reference, its speed next to
the device's measured ceilings, and engine prefill tokens/s on a randomly initialised Llama of
Llama-3.2-1B's shape (no weights needed). Run through bench/gpu_check.sh; prints one table.

    PYTHONPATH=engine python bench/gpu_check.py [--device cpu --small]   # cpu: a smoke run
"""

import argparse
import json
import time

import numpy as np
import torch

from quail.executor.kv_cache import PagedKVCache
from quail.executor.model_runner import Chunk, ModelRunner
from quail.executor.sequence import Seq
from quail.kernels.paged_attention import AttentionMeta, paged_attention, paged_attention_reference
from quail.kv import KVArena, PageArena
from quail.model.config import ModelConfig
from quail.model.llama import LlamaModel

PAGE = 16
LLAMA_1B = dict(arch="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
                num_heads=32, num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                max_position=131072, tie_embeddings=True)
SMALL = dict(LLAMA_1B, vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=8,
             num_kv_heads=2, head_dim=32)


def bench(fn, device) -> float:
    """Milliseconds per call: triton.testing.do_bench on CUDA, a median of wall times elsewhere."""
    if device.type == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=200)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def ragged(shapes, heads, kv_heads, dim, device, dtype, seed=0):
    """q, K/V caches and AttentionMeta for (q_len, k_len) per sequence, pages scattered."""
    g = torch.Generator().manual_seed(seed)
    counts = [-(-k // PAGE) for _, k in shapes]
    order = torch.randperm(sum(counts) + 8, generator=g).tolist()
    tables, starts, at = [], [], 0
    for (q, _), n in zip(shapes, counts):
        tables.append(order[:n])
        order = order[n:]
        starts.append(at)
        at += q
    pages = sum(counts) + 8
    make = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)
    meta = AttentionMeta(np.array(starts), np.array([q for q, _ in shapes]), np.array([k for _, k in shapes]),
                         tables, PAGE, device)
    return make(at, heads, dim), make(pages, PAGE, kv_heads, dim), make(pages, PAGE, kv_heads, dim), meta


def attention_work(shapes, heads, kv_heads, dim, itemsize) -> tuple[float, float]:
    """FLOPs (QK and PV over the causally visible keys) and bytes (K/V read once per sequence and
    KV head, Q read and O written once)."""
    visible = sum(q * k - q * (q - 1) / 2 for q, k in shapes)
    flops = 4 * visible * heads * dim
    bytes_ = sum(2 * k * kv_heads * dim + 2 * q * heads * dim for q, k in shapes) * itemsize
    return flops, bytes_


def ceilings(device) -> dict:
    """Measured here: bf16 matmul FLOP/s and device-memory copy bandwidth."""
    if device.type != "cuda":
        return {"flops": float("nan"), "bandwidth": float("nan")}
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = bench(lambda: a @ a, device)
    src = torch.empty(1 << 30, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src), device)
    return {"flops": 2 * n**3 / ms * 1e3, "bandwidth": 2 * src.numel() / copy_ms * 1e3}


def check_kernel(device, dims) -> list[dict]:
    heads, kv_heads, dim = dims
    rows = []
    for shapes in ([(37, 37), (20, 70), (1, 45), (9, 130), (5, 5)], [(512, 2048), (1, 4096), (64, 64)]):
        q, k, v, meta = ragged(shapes, heads, kv_heads, dim, device, torch.bfloat16)
        got = paged_attention(q, k, v, meta, dim ** -0.5).double().cpu()
        ref_meta = AttentionMeta(meta.q_start, meta.q_len, meta.k_len, meta.page_tables, PAGE, torch.device("cpu"))
        want = paged_attention_reference(q.double().cpu(), k.double().cpu(), v.double().cpu(), ref_meta, dim ** -0.5)
        err = (got - want).abs().max().item()
        rows.append({"check": f"kernel vs fp64, {len(shapes)} sequences", "max_abs_error": err, "ok": err < 2e-2})
    return rows


def time_attention(device, dims, ceil) -> list[dict]:
    heads, kv_heads, dim = dims
    cases = {"prefill 4 x 2048": [(2048, 2048)] * 4,
             "questions 64 x 32 on 1024": [(32, 1056)] * 64,
             "one-token steps 256 on 2048": [(1, 2048)] * 256}
    rows = []
    for name, shapes in cases.items():
        q, k, v, meta = ragged(shapes, heads, kv_heads, dim, device, torch.bfloat16)
        ms = bench(lambda: paged_attention(q, k, v, meta, dim ** -0.5), device)
        flops, bytes_ = attention_work(shapes, heads, kv_heads, dim, 2)
        tflops, tbs = flops / ms / 1e9, bytes_ / ms / 1e9
        rows.append({"check": f"attention: {name}", "ms": ms, "TFLOP/s": tflops, "TB/s": tbs,
                     "of FLOP ceiling": tflops * 1e12 / ceil["flops"], "of bandwidth": tbs * 1e12 / ceil["bandwidth"]})
    return rows


def engine_prefill(device, cfg_dict, ceil, docs=32, doc_len=1024, batch_tokens=8192) -> dict:
    cfg = ModelConfig(**cfg_dict)
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.bfloat16) * std)

    h, q_out, kv_out = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    weights = {"model.embed_tokens.weight": rnd(cfg.vocab_size, h), "model.norm.weight": torch.ones(h, device=device)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        weights |= {p + "input_layernorm.weight": torch.ones(h, device=device),
                    p + "post_attention_layernorm.weight": torch.ones(h, device=device),
                    p + "self_attn.q_proj.weight": rnd(q_out, h), p + "self_attn.k_proj.weight": rnd(kv_out, h),
                    p + "self_attn.v_proj.weight": rnd(kv_out, h), p + "self_attn.o_proj.weight": rnd(h, q_out),
                    p + "mlp.gate_proj.weight": rnd(cfg.intermediate_size, h),
                    p + "mlp.up_proj.weight": rnd(cfg.intermediate_size, h),
                    p + "mlp.down_proj.weight": rnd(h, cfg.intermediate_size)}
    model = LlamaModel(cfg, weights, torch.bfloat16, device)
    params = sum(t.numel() for name, t in weights.items() if "norm" not in name)
    del weights
    pages = docs * -(-doc_len // PAGE)
    cache = PagedKVCache(PageArena(pages, PAGE), KVArena(cfg.num_layers, pages, cfg.num_kv_heads, cfg.head_dim,
                                                          torch.bfloat16, device))
    runner = ModelRunner(model, cache)
    tokens = torch.randint(0, cfg.vocab_size, (docs, doc_len), generator=torch.Generator().manual_seed(1)).tolist()

    def prefill():
        seqs = [Seq() for _ in range(docs)]
        per_pass = max(1, batch_tokens // doc_len)
        for lo in range(0, docs, per_pass):
            runner.run([Chunk(s, t, [len(t) - 1]) for s, t in zip(seqs[lo:lo + per_pass], tokens[lo:lo + per_pass])])
        for s in seqs:
            cache.release(s)
        if device.type == "cuda":
            torch.cuda.synchronize()

    prefill()  # warm-up: compiles the kernel
    ms = bench(prefill, device)
    tok_s = docs * doc_len / ms * 1e3
    flops = 2 * params * tok_s
    return {"check": f"engine prefill, {params / 1e9:.2f}B params, {docs} x {doc_len} tokens", "ms": ms,
            "tokens/s": tok_s, "TFLOP/s": flops / 1e12, "of FLOP ceiling": flops / ceil["flops"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="a tiny model and shapes (a CPU smoke run)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    device = torch.device(args.device)
    dims = (8, 2, 32) if args.small else (32, 8, 64)
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}", flush=True)
    ceil = ceilings(device)
    print(f"ceilings: {ceil['flops'] / 1e12:.0f} TFLOP/s bf16 matmul, {ceil['bandwidth'] / 1e12:.2f} TB/s copy",
          flush=True)
    rows = check_kernel(device, dims)
    if not args.small:
        rows += time_attention(device, dims, ceil)
    rows.append(engine_prefill(device, SMALL if args.small else LLAMA_1B, ceil,
                               *((4, 64, 128) if args.small else ())))
    cols = ["check", "ok", "max_abs_error", "ms", "tokens/s", "TFLOP/s", "TB/s", "of FLOP ceiling", "of bandwidth"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        cells = [r.get(c, "") for c in cols]
        print("| " + " | ".join(f"{c:.3g}" if isinstance(c, float) else str(c) for c in cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ceilings": ceil, "rows": rows}, f, indent=1)
    if not all(r.get("ok", True) for r in rows):
        raise SystemExit("the kernel disagrees with the fp64 reference")


if __name__ == "__main__":
    main()
