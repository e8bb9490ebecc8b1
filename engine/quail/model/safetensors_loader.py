"""Loads a Hugging Face model directory: config.json, *.safetensors, tokenizer.json. Tensors are
read one at a time, when the model asks for them, from the memory-mapped files."""

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from quail.model.config import ModelConfig
from quail.model.tokenizer import Tokenizer


class SafetensorsWeights(Mapping):
    """The tensors of one or more .safetensors files by name, each read when it is looked up."""

    def __init__(self, files: list[Path]):
        self._files = {}
        self._where = {}
        for f in files:
            handle = safe_open(str(f), framework="pt")
            self._files[f] = handle
            self._where.update(dict.fromkeys(handle.keys(), f))

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._files[self._where[name]].get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def load_hf_dir(path: str | Path) -> tuple[ModelConfig, SafetensorsWeights, Tokenizer]:
    path = Path(path)
    cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path} holds no *.safetensors file")
    return cfg, SafetensorsWeights(files), Tokenizer.from_file(path / "tokenizer.json")
