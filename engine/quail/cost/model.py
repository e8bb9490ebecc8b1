"""Tokens -> seconds, from forward passes measured on this device (executor/timing.py).

One pass of n new tokens whose attention spans, on average, c earlier tokens each costs
    seconds = per_pass + n * (per_token + c * per_token_context)
fitted by least squares; writing one page of K/V into the arena costs kv_write_per_page.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from quail.atomic import write_text_atomically


@dataclass(frozen=True)
class Sample:
    tokens: int  # new tokens in the pass
    context: float  # mean number of earlier tokens each new token attends to
    seconds: float


@dataclass(frozen=True)
class CostModel:
    per_pass: float
    per_token: float
    per_token_context: float
    kv_write_per_page: float
    max_batch_tokens: int
    device: str = ""

    @classmethod
    def fit(cls, samples: list[Sample], kv_write_per_page: float, max_batch_tokens: int, device: str) -> "CostModel":
        a = np.array([[1.0, s.tokens, s.tokens * s.context] for s in samples])
        y = np.array([s.seconds for s in samples])
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        per_pass, per_token, per_ctx = (max(float(c), 0.0) for c in coef)
        if per_token == 0.0:  # timer noise on a tiny model: fall back to the plain average
            per_token = float(y.sum() / a[:, 1].sum())
        return cls(per_pass, per_token, per_ctx, kv_write_per_page, max_batch_tokens, device)

    def prefill_seconds(self, tokens: int, context: int = 0) -> float:
        """Computing `tokens` new tokens of one sequence on top of `context` cached ones, in full passes."""
        if tokens <= 0:
            return 0.0
        passes = -(-tokens // self.max_batch_tokens)
        mean_context = context + (tokens - 1) / 2
        return passes * self.per_pass + tokens * (self.per_token + mean_context * self.per_token_context)

    def sharing_saves(self, shared_tokens: int, pages: int) -> bool:
        """The prefix sharing rule: the compute saved exceeds the extra KV writes it costs."""
        return self.prefill_seconds(shared_tokens) > pages * self.kv_write_per_page

    def save(self, path: Path) -> None:
        write_text_atomically(path, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> "CostModel | None":
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
