"""Loads a Hugging Face model directory: config.json, *.safetensors, tokenizer.json."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from quail.model.config import ModelConfig
from quail.model.tokenizer import Tokenizer


def load_hf_dir(path) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    path = Path(path)
    cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path} holds no *.safetensors file")
    weights = {}
    for f in files:
        weights.update(load_file(str(f)))
    return cfg, weights, Tokenizer.from_file(path / "tokenizer.json")
