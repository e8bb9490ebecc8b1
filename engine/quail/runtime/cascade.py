"""A filter cascade: the session's model answers every row; the rows where a P(yes) it computed
lies inside the band go to a larger model in the same process, whose answers replace its own
(planner/band.py chooses the band). Each model's tokens are reported apart (Stats.by_model)."""

from quail.executor.stats import Stats
from quail.ops.filter import FilterResult
from quail.planner.band import decides
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
    return result, escalated, stats.merge(more.of_model(large.loaded.name, len(unsure)))
