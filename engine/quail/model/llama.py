"""A Llama-family decoder (Llama, Mistral, Qwen2, SmolLM2) that reads and writes paged KV.

Weights arrive in Hugging Face names, from a mapping that may read each tensor only when asked
(the loaders'), and go to the device in the target dtype one at a time, so host memory never holds
a second copy of the model. Q/K/V and gate/up are fused into single matmuls here.
"""

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from quail.kernels.attention import select_attention
from quail.kernels.paged_attention import AttentionMeta
from quail.kv.kv_arena import KVArena
from quail.model.config import ModelConfig
from quail.model.linear import Linear

# With packed weights (a CPU in bf16) a pass's MLP runs in even row blocks whose gate/up output
# stays within about this many bytes: it then stays in cache for SiLU and the down projection
# (gate/up of a 1.5B, 1,536 rows at once: 797 GFLOP/s against 913 in blocks of 256). A row's bits do
# not depend on its block, unless the block is of one row (oneDNN's kernel for a single row sums in
# another order), which even blocks never are unless the pass is
MLP_BLOCK_BYTES = 16 << 20

# A row's vector (the join's candidates) is the mean of its tokens' hidden states after this share
# of the layers: on FEBRL (bench/quality/vectors.py) a quarter found each record's duplicate first
# 99.7% of the time on qwen2.5-coder-1.5b and smollm2-135m; half, 98.7%-99.3%; the last layer, 80%
VECTOR_DEPTH = 0.25


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T] flat KV slots to write
    attention: AttentionMeta
    logit_rows: torch.Tensor  # [R] rows of T whose next-token log-probs are wanted
    pool_rows: torch.Tensor | None = None  # [P] rows of T whose hidden states are summed into vectors
    pool_into: torch.Tensor | None = None  # [P] the vector (0..V-1) each of them is summed into
    vectors: int = 0  # V


@dataclass
class ForwardOutput:
    logprobs: torch.Tensor  # fp32 [R, vocab]
    vectors: torch.Tensor | None  # fp32 [V, hidden]: each vector's sum of hidden states after `vector_layer` blocks


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: Linear
    o: Linear
    mlp_norm: torch.Tensor
    gate_up: Linear
    down: Linear


def inverse_frequencies(cfg: ModelConfig, freq_factors: torch.Tensor | None = None) -> torch.Tensor:
    d = cfg.head_dim
    inv = (1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2).float() / d))).double()
    s = cfg.rope_scaling
    if s.kind == "linear":
        inv = inv / s.factor
    elif s.kind == "llama3":
        low_wavelen = s.original_max_position / s.low_freq_factor
        high_wavelen = s.original_max_position / s.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
        smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    if freq_factors is not None:
        inv = inv / freq_factors.to(torch.float64)
    return inv.float()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LlamaModel:
    RAW_WEIGHTS = ("rope_freqs.weight",)  # read in the dtype they come in; every other weight in `dtype`
    _pending: "Callable[[], LlamaModel] | None"  # a deferred model's weights, until read
    _lock: threading.Lock  # a deferred model's: its weights are read once

    def __init__(self, cfg: ModelConfig, weights: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16,
                 device: str | torch.device = "cpu", attention: str = "auto"):
        """attention: as select_attention takes it ("auto", "triton", "torch" or "cpu")."""
        self._shape(cfg, dtype, device, attention)
        self._pending = None
        self._build(weights)

    @classmethod
    def deferred(cls, cfg: ModelConfig, dtype: torch.dtype, device: str | torch.device,
                 build: Callable[[], "LlamaModel"], attention: str = "auto") -> "LlamaModel":
        """A model whose weights are read at the first use of one (`build` gives the model built, in
        this dtype, on this device): a run whose answers are all stored reads none. Its shape,
        dtype, device and attention, which its identity names, are known before."""
        model = cls.__new__(cls)
        model._shape(cfg, dtype, device, attention)
        model._pending = build
        model._lock = threading.Lock()
        return model

    @property
    def weights_loaded(self) -> bool:
        return self.__dict__.get("_pending") is None

    def __getattr__(self, name: str) -> object:
        """Called only for what is not set: a deferred model's weights, which are read now."""
        if name.startswith("__") or self.__dict__.get("_pending") is None:
            raise AttributeError(name)
        with self._lock:
            if (build := self.__dict__.get("_pending")) is not None:
                built = build()
                if (built.cfg, built.dtype, built.device, built.attention_name) != \
                        (self.cfg, self.dtype, self.device, self.attention_name):
                    raise ValueError("the weights read are not of the model its identity names")
                self.__dict__.update({k: v for k, v in built.__dict__.items() if k not in ("_pending", "_lock")})
                self._pending = None
        return getattr(self, name)

    def _shape(self, cfg: ModelConfig, dtype: torch.dtype, device: str | torch.device, attention: str) -> None:
        self.cfg = cfg
        self.dtype = dtype
        self.device = torch.device(device)
        self.attention, self.attention_name, self.attention_why = select_attention(
            attention, self.device, dtype, cfg.head_dim)
        self.vector_layer = max(1, round(VECTOR_DEPTH * cfg.num_layers))  # blocks before the vectors are read
        self.scale = cfg.head_dim**-0.5

    def _build(self, weights: Mapping[str, torch.Tensor]) -> None:
        cfg, dtype = self.cfg, self.dtype

        # a copy, unless each lookup gives a tensor of its own: one read from a mapped file would change with it
        copy = not getattr(weights, "fresh", False)

        def w(name: str) -> torch.Tensor:
            return weights[name].to(device=self.device, dtype=dtype, copy=copy).contiguous()

        def part(name: str) -> torch.Tensor:  # one part of a fused tensor, which torch.cat copies anyway
            return weights[name].to(device=self.device, dtype=dtype)

        self.embed = w("model.embed_tokens.weight")
        self.lm_head = self.embed if cfg.tie_embeddings else w("lm_head.weight")
        self.norm = w("model.norm.weight")
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            bias = None
            if cfg.qkv_bias:
                bias = torch.cat([part(a + f"{n}_proj.bias") for n in "qkv"])
            self.layers.append(
                _Layer(
                    attn_norm=w(p + "input_layernorm.weight"),
                    qkv=Linear(torch.cat([part(a + f"{n}_proj.weight") for n in "qkv"]).contiguous(), bias),
                    o=Linear(w(a + "o_proj.weight")),
                    mlp_norm=w(p + "post_attention_layernorm.weight"),
                    gate_up=Linear(torch.cat([part(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")]).contiguous()),
                    down=Linear(w(p + "mlp.down_proj.weight")),
                )
            )
        self.inv_freq = inverse_frequencies(cfg, weights.get("rope_freqs.weight")).to(self.device)
        gate_up_row = 2 * cfg.intermediate_size * self.embed.element_size()
        packed = bool(self.layers) and self.layers[0].gate_up.packed
        self.mlp_rows = max(256, MLP_BLOCK_BYTES // gate_up_row) if packed else None

    @property
    def nbytes(self) -> int:
        """Bytes the weights take on the device (a tied lm_head counted once); a deferred model's,
        from its shape."""
        if not self.weights_loaded:
            c = self.cfg
            qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
            layer = c.hidden_size * (qkv + c.num_heads * c.head_dim + 3 * c.intermediate_size + 2) \
                + (qkv if c.qkv_bias else 0)
            embed = c.vocab_size * c.hidden_size * (1 if c.tie_embeddings else 2)
            return (embed + c.hidden_size + c.num_layers * layer) * torch.empty((), dtype=self.dtype).element_size()
        tensors = {id(t): t for t in (self.embed, self.lm_head, self.norm)}
        tensors |= {id(p): p for layer in self.layers for f in fields(layer)
                    if (p := getattr(layer, f.name)) is not None}
        return sum(p.nbytes for p in tensors.values())

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.cfg.rms_norm_eps)

    def _mlp(self, x: torch.Tensor, layer: _Layer) -> torch.Tensor:
        gate, up = layer.gate_up(self._rms_norm(x, layer.mlp_norm)).chunk(2, dim=-1)
        return layer.down(F.silu(gate) * up)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv: KVArena) -> ForwardOutput:
        """Runs the batch, writes its K/V into the arena, returns fp32 log-probs [R, vocab] and the
        vectors' sums."""
        cfg = self.cfg
        h_q, h_kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        angles = batch.positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos().to(self.dtype)[:, None, :], angles.sin().to(self.dtype)[:, None, :]
        x = self.embed[batch.input_ids]
        blocks = -(-len(x) // self.mlp_rows) if self.mlp_rows else 1
        rows = max(1, -(-len(x) // blocks))  # even blocks, so none is a single row unless the pass is
        vectors = None
        for i, layer in enumerate(self.layers):
            if i == self.vector_layer and batch.vectors:
                vectors = _pooled(x, batch)
            h = self._rms_norm(x, layer.attn_norm)
            qkv = layer.qkv(h)
            qk, v = qkv.split([(h_q + h_kv) * d, h_kv * d], dim=-1)
            q, k = _rope(qk.view(-1, h_q + h_kv, d), cos, sin).split([h_q, h_kv], dim=1)
            kv.write(i, batch.slots, k, v.view(-1, h_kv, d))
            attn = self.attention(q, kv.k[i], kv.v[i], batch.attention, self.scale)
            x = x + layer.o(attn.reshape(-1, h_q * d))
            for r in range(0, len(x), rows):
                x[r: r + rows] += self._mlp(x[r: r + rows], layer)
        if vectors is None and batch.vectors:  # a model of fewer layers than the depth asks
            vectors = _pooled(x, batch)
        x = self._rms_norm(x[batch.logit_rows], self.norm)
        return ForwardOutput(torch.log_softmax(F.linear(x, self.lm_head).float(), dim=-1), vectors)


def _pooled(x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
    assert batch.pool_rows is not None and batch.pool_into is not None
    return torch.zeros(batch.vectors, x.shape[1], dtype=torch.float32, device=x.device).index_add_(
        0, batch.pool_into, x[batch.pool_rows].float())
