"""Token accounting for one request, counted once, where the scheduler computes or settles it:
`charge` when a chunk of it goes into a forward pass, `settle` when it completes. Together they keep
tokens_computed + sum(tokens_reused) == tokens_naive for every job (Stats.check)."""

from dataclasses import dataclass, field

import numpy as np
import torch

from quail.executor.program import Extend, Outcome, Reads
from quail.executor.stats import Stats, StepStats


@dataclass(eq=False)
class Request:
    ext: Extend
    done: int = 0
    reads: dict[int, torch.Tensor] = field(default_factory=dict)  # log-probs by offset
    pooled: torch.Tensor | None = None  # the sum of the pool's hidden states so far

    @property
    def remaining(self) -> int:
        return len(self.ext.tokens) - self.done


def charge(stats: Stats, ext: Extend, lo: int, take: int) -> None:
    """Tokens [lo, lo + take) of the request are computed in this pass. A token fed back while
    writing is no prompt's: Stats.tokens_generated counts it (in `settle`)."""
    if ext.writes and not ext.prompt:
        return
    doc = max(0, min(lo + take, ext.n_document) - lo)
    stats.document_tokens_computed += doc
    stats.question_tokens_computed += take - doc
    stats.tokens_computed += take
    if (s := stats.step(ext.step)) is not None:
        s.tokens_computed += take


def settle(req: Request, stats: Stats, out: Outcome, index: int) -> Reads:
    """The request is complete: credit what its prompt reused, by mechanism, and return its reads."""
    ext, seq = req.ext, req.ext.seq
    if ext.writes:
        stats.tokens_generated += 1  # the token its last read chooses
    if not ext.prompt:
        if not ext.writes:  # a written token is rewound before any later prompt
            seq.fresh += len(ext.tokens)
    else:
        total = len(seq)
        reused = total - len(ext.tokens) - seq.fresh
        for mech, n in seq.credits.items():
            take = min(n, reused)
            stats.tokens_reused[mech] += take
            reused -= take
        stats.tokens_reused["rewind"] += reused
        stats.tokens_naive += total
        seq.fresh, seq.credits = 0, {}
        out.naive[index].tokens_naive += total
        out.naive[index].prompts += 1
        if ext.step is not None:  # the run's and this program's counts for its step
            for s in (stats.step(ext.step), out.naive_steps[index].setdefault(ext.step, StepStats())):
                s.tokens_naive += total
                s.prompts += 1
    reads = [(req.reads[off] if ids is None else req.reads[off][ids]).numpy() for off, ids in ext.reads]
    if ext.pool is not None:
        reads.append((req.pooled / len(ext.pool)).numpy() if req.pooled is not None else np.empty(0, np.float32))
    return reads
