"""Loads a Llama-family GGUF file: config, weights in Hugging Face names, tokenizer. The file is
memory-mapped and each tensor is dequantized only when the model asks for it, so host memory holds
the file and one dequantized tensor, never the whole model twice."""

import struct
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader, GGUFValueType

from quail.model.config import ModelConfig, RopeScaling
from quail.model.dequantize import dequantize
from quail.model.tokenizer import Tokenizer, tokenizer_from_gguf_fields

_LENGTH = struct.Struct("<Q")  # a string's length, before its bytes
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
    itself, and reading each array in one loop: a 150k-word tokenizer's 450,000 parts then cost no
    Python-level memmap bookkeeping or per-item dispatch (0.4 s for the 1.5B's fields against
    gguf-py's 7.4 s, the same parts)."""

    def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
        count = int(count)
        arr = self._array()[offset : offset + np.dtype(dtype).itemsize * count].view(dtype=dtype)[:count]
        return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    def _array(self) -> np.ndarray:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self._plain = self.data.view(np.ndarray)
        return plain

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list, list[int], list]:
        """An array (a tokenizer's words, merges and word types) read in one loop, into the parts
        gguf-py's own reading gives, one per item; anything else as gguf-py reads it."""
        if raw_type != GGUFValueType.ARRAY or self.byte_order != "I" or sys.byteorder != "little":
            return super()._get_field_parts(orig_offs, raw_type)
        plain = self._array()

        def within(end: int) -> None:
            if end > len(plain):
                raise ValueError(f"the file ends inside the array at byte {orig_offs}: is it whole?")

        within(orig_offs + 12)
        item_type = plain[orig_offs:orig_offs + 4].view(np.uint32)
        count = plain[orig_offs + 4:orig_offs + 12].view(np.uint64)
        item, n, offs = GGUFValueType(int(item_type[0])), int(count[0]), orig_offs + 12
        scalar = self.gguf_scalar_to_np.get(item)
        parts: list = [item_type, count]
        if scalar is not None:
            end = offs + n * np.dtype(scalar).itemsize
            within(end)
            parts += list(plain[offs:end].view(scalar).reshape(-1, 1))
            data = list(range(2, len(parts)))
        elif item == GGUFValueType.STRING:
            length, buffer = _LENGTH.unpack_from, plain.data
            for _ in range(n):
                within(offs + 8)
                (size,) = length(buffer, offs)
                within(offs + 8 + size)
                parts += (plain[offs:offs + 8].view(np.uint64), plain[offs + 8:offs + 8 + size])
                offs += 8 + size
            end, data = offs, list(range(3, len(parts), 2))
        else:  # arrays of arrays
            return super()._get_field_parts(orig_offs, raw_type)
        return end - orig_offs, parts, data, [GGUFValueType.ARRAY] + ([item] if n else [])


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


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's converter interleaves the rotary halves of Q/K for the `llama` architecture."""
    out_dim = w.shape[0]
    return w.reshape(n_head, out_dim // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


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
    """The file's tensors by Hugging Face name, dequantized when looked up: to fp32, or to the dtype
    `to` gives (its `raw` names stay fp32). Each lookup gives a tensor of its own (`fresh`)."""

    fresh = True

    def __init__(self, reader: GGUFReader, cfg: ModelConfig, dtype: torch.dtype = torch.float32,
                 raw: tuple[str, ...] = ()):
        self._reader, self._cfg, self._dtype, self._raw = reader, cfg, dtype, raw
        self._tensors = {name: t for t in reader.tensors if (name := _hf_name(t.name)) is not None}

    def to(self, dtype: torch.dtype, raw: tuple[str, ...] = ()) -> "GGUFWeights":
        """The same tensors, dequantized straight to `dtype`: the values of fp32's rounded to it."""
        return GGUFWeights(self._reader, self._cfg, dtype, raw)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each tensor's shape, read from the header: nothing is dequantized."""
        return {name: tuple(int(n) for n in reversed(t.shape)) for name, t in self._tensors.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        t = self._tensors[name]
        shape = tuple(int(n) for n in reversed(t.shape))
        w = dequantize(t.data, t.tensor_type, torch.float32 if name in self._raw else self._dtype).reshape(shape)
        if self._cfg.arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            w = _unpermute(w, self._cfg.num_heads if "attn_q" in t.name else self._cfg.num_kv_heads)
        return w

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
