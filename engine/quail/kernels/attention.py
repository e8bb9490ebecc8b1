"""Which paged attention a model runs: the Triton kernel on CUDA, the fused CPU kernel for bf16 K/V
on CPUs with AVX512-BF16, else the torch reference; each on the same `AttentionMeta`."""

from collections.abc import Callable

import torch

from quail.kernels import cpu_attention
from quail.kernels.paged_attention import AttentionMeta, paged_attention_reference

ATTENTION_CHOICES = ("auto", "triton", "torch", "cpu")
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMeta, float], torch.Tensor]


def select_attention(backend: str, device: torch.device, dtype: torch.dtype = torch.float32,
                     head_dim: int = 64) -> tuple[Attention, str, str]:
    """The attention for a model, its name ("triton", "torch" or "cpu") and why. "auto": the Triton
    kernel on CUDA; on a CPU, the fused kernel (cpu_attention.py) for bf16 K/V where this CPU and a
    compiler allow it, else the torch reference. "triton" off CUDA runs in Triton's interpreter
    (TRITON_INTERPRET=1 before the kernel module is imported), for tests; "cpu" insists on the fused
    kernel."""
    if backend not in ATTENTION_CHOICES:
        raise ValueError(f"attention {backend!r}: choose one of {', '.join(ATTENTION_CHOICES)}")
    if backend == "triton" or (backend == "auto" and device.type == "cuda"):
        from quail.kernels.triton_paged_attention import paged_attention_triton

        if device.type == "cuda":
            return paged_attention_triton, "triton", f"{backend} on cuda"
        return (lambda q, k, v, meta, scale: paged_attention_triton(q, k, v, meta, scale, upcast=True),
                "triton", "Triton's interpreter")
    if backend == "torch" or (backend == "auto" and device.type != "cpu"):
        return paged_attention_reference, "torch", backend
    why = None
    if device.type != "cpu":
        why = f"device {device.type}, where the fused kernel runs on the CPU"
    elif dtype != torch.bfloat16:
        why = f"{str(dtype).removeprefix('torch.')} K/V, where the fused kernel takes bf16"
    elif head_dim % 64:
        why = f"head dim {head_dim}, where the fused kernel takes multiples of 64"
    elif cpu_attention.library() is None:
        why = f"the fused kernel is unavailable: {cpu_attention.why_unavailable()}"
    if why is None:
        return cpu_attention.paged_attention_cpu, "cpu", f"{backend}: bf16 on a CPU with AVX512-BF16"
    if backend == "cpu":
        raise ValueError(f"attention 'cpu': {why}")
    return paged_attention_reference, "torch", f"auto: {why}"


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta, scale: float
) -> torch.Tensor:
    return select_attention("auto", q.device, k_cache.dtype, q.shape[-1])[0](q, k_cache, v_cache, meta, scale)
