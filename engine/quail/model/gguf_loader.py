"""Loads a Llama-family GGUF file: config, weights in Hugging Face names, tokenizer. The file is
memory-mapped and each tensor is dequantized only when the model asks for it, so host memory holds
the file and one dequantized tensor, never the whole model twice."""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader

from quail.model.config import ModelConfig, RopeScaling
from quail.model.dequantize import dequantize
from quail.model.tokenizer import Tokenizer, tokenizer_from_gguf_fields

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "rope_freqs.weight": "rope_freqs.weight",
}


class _Reader(GGUFReader):
    """gguf-py's reader, slicing a plain array over the file's mapping instead of the np.memmap
    itself: each of the 300,000 slices that a 150k-word tokenizer's strings take then costs no
    Python-level memmap bookkeeping (3-4x less time to read the fields, the same arrays)."""

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self._plain = self.data.view(np.ndarray)
        count = int(count)
        arr = plain[offset : offset + np.dtype(dtype).itemsize * count].view(dtype=dtype)[:count]
        return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _hf_name(name: str) -> str | None:
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    if name.startswith("blk."):
        _, i, rest = name.split(".", 2)
        if rest in _LAYER_NAMES:
            return f"model.layers.{i}.{_LAYER_NAMES[rest]}"
    return None


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter interleaves the rotary halves of Q/K for the `llama` architecture."""
    out_dim = w.shape[0]
    return w.reshape(n_head, out_dim // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_config(reader: GGUFReader, vocab_size: int, tied: bool) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"unsupported GGUF architecture {arch!r}: Quail runs llama and qwen2")

    def key(name: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.{name}", default)

    heads = key("attention.head_count")
    hidden = key("embedding_length")
    scaling = key("rope.scaling.type", "none")
    rope = RopeScaling()
    if scaling == "linear":
        rope = RopeScaling(kind="linear", factor=key("rope.scaling.factor", 1.0))
    elif scaling not in ("none", None):
        raise ValueError(f"unsupported GGUF rope scaling {scaling!r}")
    return ModelConfig(
        arch=arch,
        vocab_size=key("vocab_size", vocab_size),
        hidden_size=hidden,
        intermediate_size=key("feed_forward_length"),
        num_layers=key("block_count"),
        num_heads=heads,
        num_kv_heads=key("attention.head_count_kv", heads),
        head_dim=key("attention.key_length", hidden // heads),
        rms_norm_eps=key("attention.layer_norm_rms_epsilon"),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        max_position=key("context_length"),
        tie_embeddings=tied,
        qkv_bias=arch == "qwen2",
        rope_scaling=rope,
    )


def read_tokenizer(reader: GGUFReader) -> Tokenizer:
    kind = _field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {kind!r}: Quail reads byte-level BPE (gpt2)")
    tk = tokenizer_from_gguf_fields(
        tokens=_field(reader, "tokenizer.ggml.tokens"),
        token_types=_field(reader, "tokenizer.ggml.token_type"),
        merges=_field(reader, "tokenizer.ggml.merges"),
        pre=_field(reader, "tokenizer.ggml.pre", "default"),
    )
    return Tokenizer(tk)


class GGUFWeights(Mapping):
    """The file's tensors by Hugging Face name, dequantized to fp32 when looked up."""

    def __init__(self, reader: GGUFReader, cfg: ModelConfig):
        self._cfg = cfg
        self._tensors = {name: t for t in reader.tensors if (name := _hf_name(t.name)) is not None}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each tensor's shape, read from the header: nothing is dequantized."""
        return {name: tuple(int(n) for n in reversed(t.shape)) for name, t in self._tensors.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        t = self._tensors[name]
        shape = tuple(int(n) for n in reversed(t.shape))
        w = dequantize(t.data, t.tensor_type).reshape(shape)
        if not w.flags.writeable:  # an unquantized tensor is a view of the read-only mapping
            w = w.copy()
        if self._cfg.arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            w = _unpermute(w, self._cfg.num_heads if "attn_q" in t.name else self._cfg.num_kv_heads)
        return torch.from_numpy(w)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def load_gguf(path: str | Path) -> tuple[ModelConfig, GGUFWeights, Tokenizer]:
    reader = _Reader(str(path))
    tokenizer = read_tokenizer(reader)
    names = {t.name for t in reader.tensors}
    cfg = read_config(reader, len(_field(reader, "tokenizer.ggml.tokens")), tied="output.weight" not in names)
    return cfg, GGUFWeights(reader, cfg), tokenizer
