from dataclasses import dataclass, field


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling as Hugging Face configs describe it ("linear" or "llama3")."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder (Llama 2/3, Mistral, Qwen2, SmolLM2)."""

    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    tie_embeddings: bool
    qkv_bias: bool = False
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)

    @classmethod
    def from_hf(cls, cfg: dict) -> "ModelConfig":
        arch = cfg["model_type"]
        if arch not in ("llama", "qwen2", "mistral"):
            raise ValueError(f"unsupported model_type {arch!r}: Quail runs llama, qwen2 and mistral")
        heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "linear", "llama3"):
            raise ValueError(f"unsupported rope scaling {kind!r}")
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        return cls(
            arch=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg["rms_norm_eps"],
            rope_theta=float(theta),
            max_position=cfg.get("max_position_embeddings", 4096),
            tie_embeddings=cfg.get("tie_word_embeddings", False),
            qkv_bias=arch == "qwen2" or cfg.get("attention_bias", False),
            rope_scaling=RopeScaling(
                kind=kind,
                factor=rope.get("factor", 1.0),
                low_freq_factor=rope.get("low_freq_factor", 1.0),
                high_freq_factor=rope.get("high_freq_factor", 4.0),
                original_max_position=rope.get("original_max_position_embeddings", 8192),
            ),
        )
