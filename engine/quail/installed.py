"""The engine (torch, tokenizers, gguf, safetensors) comes with the `worker` extra, on the worker's
machine; the provider alone, on every Airflow node, runs none of it."""

import importlib.util

from quail.errors import QuailError

ENGINE = ("torch", "tokenizers", "gguf", "safetensors")


def require_engine(what: str) -> None:
    """Refuses `what` where the engine is not installed, saying how to install it."""
    if missing := [m for m in ENGINE if importlib.util.find_spec(m) is None]:
        raise QuailError(f"{what} runs the model, and this install has no engine ({', '.join(missing)} missing): "
                         f"install airflow-quail[worker], or point the quail connection at a worker")
