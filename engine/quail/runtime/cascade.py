"""A filter cascade: the session's model answers every row; the rows where a P(yes) it computed
lies inside the band go to a larger model in the same process, whose answers replace its own. The
band is given, or chosen on the first window for a target (planner/guarantee.py): the small model
answers every row of it at threshold 0, the larger model a seeded random sample, and the band is
the guarantee's. Each model's tokens are reported apart (Stats.by_model), the choosing's too."""

import hashlib
import random
from dataclasses import replace

from quail.executor.stats import Stats
from quail.ops.filter import FilterResult
from quail.planner.band import decides
from quail.planner.guarantee import choose
from quail.planner.specs import Cascade
from quail.reuse import Retain
from quail.session import Session


def cascade_filter(session: Session, cascade: Cascade, texts: list[str], predicates: list[str], threshold: float,
                   reuse=True, retain: Retain | None = None, truncate=False, progress=None,
                   rows: list[int] | None = None, calibration="auto") -> tuple[FilterResult, list[bool], Stats]:
    """The answers, whether the large model gave each one, and the two models' accounting merged.
    The small model runs at threshold `low`, so that chain mode stops only at a sure no and a sure
    row passed exactly when all its P(yes) are above `high`; `threshold` is the large model's. Each
    model calibrates as `calibration` resolves for it; the large model retains nothing, since later
    operators run on the session's model."""
    rows = rows if rows is not None else list(range(len(texts)))
    large = session.peer(cascade.model)  # a model that cannot load is refused before anything runs
    chosen = None
    if not cascade.chosen:
        cascade, chosen = choose_band(session, cascade, texts, predicates, threshold, reuse, truncate, progress,
                                      rows, calibration)
    result, stats = session.filter(texts, predicates, cascade.low, None, reuse, retain, truncate, progress, rows,
                                   calibration)
    stats.of_model(session.loaded.name, len(texts))
    unsure = [i for i, p in enumerate(result.p_yes) if not decides(p, cascade.low, cascade.high)]
    tokens_only = (lambda _, tokens: progress(0, tokens)) if progress else None  # the rows are counted once
    second, more = large.filter([texts[i] for i in unsure], predicates, threshold, None, reuse, None, truncate,
                                tokens_only, [rows[i] for i in unsure], calibration) if unsure else (None, Stats())
    escalated = [False] * len(texts)
    for j, i in enumerate(unsure):
        result.p_yes[i], result.raw_p_yes[i], result.passed[i] = second.p_yes[j], second.raw_p_yes[j], second.passed[j]
        escalated[i] = True
    stats.merge(more.of_model(large.loaded.name, len(unsure)))
    if chosen is not None:
        stats.merge(chosen)
    return result, escalated, stats


def choose_band(session: Session, cascade: Cascade, texts: list[str], predicates: list[str], threshold: float,
                reuse, truncate, progress, rows: list[int], calibration) -> tuple[Cascade, Stats]:
    """The cascade with its band chosen on these rows for its target, and what choosing computed
    (its `guarantee` says how the band was chosen). The sample is drawn with a seed from the rows'
    texts, so that a run and its retry choose the same band."""
    tokens_only = (lambda _, tokens: progress(0, tokens)) if progress else None  # the rows are counted once
    small, stats = session.filter(texts, predicates, 0.0, None, reuse, None, truncate, tokens_only, rows, calibration)
    seed = int.from_bytes(hashlib.sha256("\x1e".join(texts).encode()).digest()[:8], "big")
    picked = sorted(random.Random(seed).sample(range(len(texts)), min(cascade.sample, len(texts))))
    large = session.peer(cascade.model)
    big, big_stats = large.filter([texts[i] for i in picked], predicates, 0.0, None, reuse, None, truncate,
                                  tokens_only, [rows[i] for i in picked], calibration)
    truth = [all(p > threshold for p in big.p_yes[j]) for j in range(len(picked))]
    g = choose(cascade.metric, cascade.target, cascade.delta, [small.p_yes[i] for i in picked], truth)
    stats = stats.of_model(f"{session.loaded.name} (choosing the band)", len(texts))
    stats.merge(big_stats.of_model(f"{large.loaded.name} (choosing the band)", len(picked)))
    stats.guarantee = g.to_dict() | {"accounting": {"tokens_naive": stats.tokens_naive,
                                                    "tokens_computed": stats.tokens_computed,
                                                    "tokens_reused": dict(stats.tokens_reused)}}
    return replace(cascade, low=g.low, high=g.high), stats
