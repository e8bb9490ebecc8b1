"""The scheduler's work per step follows the forward pass, not the table: admission stops once the
admitted requests hold two passes of tokens, and a step visits only what it admits, batches and
advances. Counted, not timed (`python -m bench scale filter` has the times)."""

import numpy as np

from quail.executor.engine import Engine, PhysicalSettings
from quail.ops.filter import run_filter
from quail.ops.prompts import YesNoTokens

ANSWERS = YesNoTokens(yes=[5, 6], no=[7, 8])
PREAMBLE = list(range(40, 72))  # two whole pages every document shares: one parent, thousands of children
MAX_BATCH_TOKENS = 256


def _docs(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [PREAMBLE + rng.integers(80, 300, size=int(rng.integers(8, 40))).tolist() for _ in range(n)]


def _run(model, n: int):
    engine = Engine(model, PhysicalSettings(arena_pages=1 << 16, max_batch_tokens=MAX_BATCH_TOKENS))
    result, stats = run_filter(engine, _docs(n, n), [[11, 12], [13]], ANSWERS, threshold=0.0)
    assert len(result.passed) == n and all(result.passed)
    assert stats.tokens_reused["sharing"] > 0  # the preamble's pages were shared, not recomputed
    assert engine.free_pages == engine.settings.arena_pages
    return engine.scheduler


def test_work_per_step_is_bounded_by_the_pass_not_by_the_table(tiny_llama):
    small, large = _run(tiny_llama, 2_000), _run(tiny_llama, 20_000)
    # an admitted program waits for at least one token, and admission stops at two passes of them
    assert large.max_active <= 2 * MAX_BATCH_TOKENS
    assert large.max_step_visits <= 4 * 2 * MAX_BATCH_TOKENS
    # ten times the rows, the same work per step (a scan of the admitted or waiting rows would be 20,000)
    assert large.max_active <= 2 * small.max_active
    assert large.max_step_visits <= 2 * small.max_step_visits
