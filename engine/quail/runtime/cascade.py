"""Cascades. A filter's: the session's model answers every row; the rows where a P(yes) it computed
lies inside the band go to a larger model in the same process, whose answers replace its own. The
band is given, or chosen on the first window for a target (planner/guarantee.py): the small model
answers every row of it at threshold 0, the larger model a seeded random sample, and the band is
the guarantee's. Each model's tokens are reported apart (Stats.by_model), the choosing's too. A
classify's cascade is the same on its top label's probability, a join's on each pair's P(yes)."""

import hashlib
import random
from collections.abc import Callable
from dataclasses import replace

from quail.executor.stats import Stats
from quail.kinds.words import SECOND
from quail.ops.classify import ClassifyResult
from quail.ops.filter import FilterResult
from quail.ops.join import JoinResult
from quail.planner.band import decides
from quail.planner.guarantee import Guarantee, choose, choose_labels
from quail.reuse import Retain, Reuse
from quail.runtime.pairs import Pairs
from quail.session import Session
from quail.specs import Cascade


def cascade_filter(session: Session, cascade: Cascade, texts: list[str], predicates: list[str], threshold: float,
                   reuse: bool | Reuse = True, retain: Retain | None = None, truncate: bool = False,
                   progress: Callable[[int, int], None] | None = None, rows: list[int] | None = None,
                   calibration: str = "auto") -> tuple[FilterResult, list[bool], Stats]:
    """The results, whether the cascade model gave each one, and the two models' accounting merged.
    The small model runs at threshold `low`, so that rewind stops only at a sure no and a sure
    row passed exactly when all its P(yes) are above `high`; `threshold` is the cascade model's. Each
    model calibrates as `calibration` resolves for it; the cascade model retains nothing, since later
    operators run on the session's model."""
    rows = rows if rows is not None else list(range(len(texts)))
    cascade_model = session.cascade_model(cascade.model)  # a model that cannot load is refused before anything runs
    chosen = None
    if not cascade.chosen:
        cascade, chosen = choose_band(session, cascade, texts, predicates, threshold, reuse, truncate, progress,
                                      rows, calibration)
    low, high = cascade.band()
    result, stats = session.filter(texts, predicates, low, None, reuse, retain, truncate, progress, rows, calibration)
    stats.of_model(session.loaded.name, len(texts))
    unsure = [i for i, p in enumerate(result.p_yes) if not decides(p, low, high)]
    escalated, more = [False] * len(texts), Stats()
    if unsure:
        checked, more = cascade_model.filter([texts[i] for i in unsure], predicates, threshold, None, reuse, None,
                                             truncate, _tokens_only(progress), [rows[i] for i in unsure], calibration)
        for j, i in enumerate(unsure):
            result.p_yes[i], result.raw_p_yes[i] = checked.p_yes[j], checked.raw_p_yes[j]
            result.passed[i], escalated[i] = checked.passed[j], True
    stats.merge(more.of_model(cascade_model.loaded.name, len(unsure)))
    if chosen is not None:
        stats.merge(chosen)
    return result, escalated, stats


def choose_band(session: Session, cascade: Cascade, texts: list[str], predicates: list[str], threshold: float,
                reuse: bool | Reuse, truncate: bool, progress: Callable[[int, int], None] | None, rows: list[int],
                calibration: str) -> tuple[Cascade, Stats]:
    """The cascade with its band chosen on these rows for its target, and what choosing computed
    (its `guarantee` says how the band was chosen). The sample is drawn with a seed from the rows'
    texts, so that a run and its retry choose the same band."""
    tokens_only = _tokens_only(progress)
    small, stats = session.filter(texts, predicates, 0.0, None, reuse, None, truncate, tokens_only, rows, calibration)
    picked = _sample(texts, cascade.sample)
    cascade_model = session.cascade_model(cascade.model)
    checked, checked_stats = cascade_model.filter([texts[i] for i in picked], predicates, 0.0, None, reuse, None,
                                                  truncate, tokens_only, [rows[i] for i in picked], calibration)
    truth = [all(p is not None and p > threshold for p in checked.p_yes[j]) for j in range(len(picked))]
    asked = [[p for p in small.p_yes[i] if p is not None] for i in picked]  # threshold 0 asks every predicate
    g = choose(*cascade.goal(), cascade.delta, asked, truth)
    stats = stats.of_model(f"{session.loaded.name} (choosing the band)", len(texts))
    stats.merge(checked_stats.of_model(f"{cascade_model.loaded.name} (choosing the band)", len(picked)))
    return replace(cascade, low=g.low, high=g.high), _guaranteed(stats, g)


def cascade_classify(session: Session, cascade: Cascade, texts: list[str], labels: list[str], question: str,
                     descriptions: tuple[str, ...] = (), reuse: bool | Reuse = True, retain: Retain | None = None,
                     truncate: bool = False, progress: Callable[[int, int], None] | None = None,
                     rows: list[int] | None = None,
                     calibration: str = "auto") -> tuple[ClassifyResult, list[bool], Stats]:
    """A classify cascade: the session's model labels every row; the rows whose top label's
    probability lies inside the band (for a target: [0, high], chosen on these rows) are labelled
    again by the larger model, whose labels and probabilities replace its own."""
    rows = rows if rows is not None else list(range(len(texts)))
    cascade_model = session.cascade_model(cascade.model)
    result, stats = session.classify(texts, labels, question, reuse, retain, truncate, progress, rows, calibration,
                                     descriptions)
    stats.of_model(session.loaded.name, len(texts))
    if not cascade.chosen:  # the small model's labels are in hand: the larger model labels a sample
        picked = _sample(texts, cascade.sample)
        checked, chosen = cascade_model.classify([texts[i] for i in picked], labels, question, reuse, None, truncate,
                                                 _tokens_only(progress), [rows[i] for i in picked], calibration,
                                                 descriptions)
        g = choose_labels(cascade.goal()[1], cascade.delta, [max(result.probabilities[i]) for i in picked],
                          [result.labels[i] == checked.labels[j] for j, i in enumerate(picked)])
        cascade = replace(cascade, low=g.low, high=g.high)
        stats.merge(_guaranteed(chosen.of_model(f"{cascade_model.loaded.name} (choosing the band)", len(picked)), g))
    low, high = cascade.band()
    unsure = [i for i, p in enumerate(result.probabilities) if low <= max(p) <= high]
    escalated = [False] * len(texts)
    if unsure:
        checked, more = cascade_model.classify([texts[i] for i in unsure], labels, question, reuse, None, truncate,
                                                 _tokens_only(progress), [rows[i] for i in unsure], calibration,
                                                 descriptions)
        for j, i in enumerate(unsure):
            result.probabilities[i], result.labels[i], escalated[i] = checked.probabilities[j], checked.labels[j], True
        stats.merge(more.of_model(cascade_model.loaded.name, len(unsure)))
    return result, escalated, stats


def cascade_join(session: Session, cascade: Cascade, left: list[str], right: list[str], condition: str,
                 threshold: float, reuse: bool | Reuse = True, retain: Retain | None = None, truncate: bool = False,
                 progress: Callable[[int, int], None] | None = None, left_rows: list[int] | None = None,
                 right_rows: list[int] | None = None, calibration: str = "auto", partner: str = SECOND,
                 condition_first: bool = True) -> tuple[JoinResult, set[tuple[int, int]], Stats]:
    """A join cascade, per pair: the session's model answers every pair; the pairs whose P(yes) lies
    inside the band are answered again by the larger model (each left row with its unsure right
    rows), whose P(yes) replaces its own. For a target the band is chosen on a sample of these
    pairs (`choose_pair_band`). Returns the answers, the pairs (left index, right index) the larger
    model answered, and the accounting."""
    pairs = Pairs(left, right, condition, reuse, truncate,
                  left_rows if left_rows is not None else list(range(len(left))),
                  right_rows if right_rows is not None else list(range(len(right))), calibration, partner,
                  condition_first)
    cascade_model = session.cascade_model(cascade.model)
    bias: dict[int, float] = {}  # the larger model's right rows' content-free P(yes), probed once
    result, stats = session.join(left, right, condition, reuse, retain, truncate, progress, pairs.left_rows,
                                 pairs.right_rows, calibration, partner, condition_first=condition_first)
    stats.of_model(session.loaded.name, len(left))
    m = len(right)
    if not cascade.chosen:
        cascade, chosen = choose_pair_band(cascade_model, cascade, pairs, threshold, bias,
                                           lambda ids: {k: result.p_yes[k // m][k % m] for k in ids})
        stats.merge(chosen)
    low, high = cascade.band()
    unsure = [i * m + j for i, row in enumerate(result.p_yes) for j, p in enumerate(row) if low <= p <= high]
    if unsure:
        checked, more = pairs.ask(cascade_model, unsure, None, bias)
        for k, p in checked.items():
            result.p_yes[k // m][k % m] = p
        stats.merge(more.of_model(cascade_model.loaded.name, len({k // m for k in unsure})))
    return result, {divmod(k, m) for k in unsure}, stats


def choose_pair_band(cascade_model: Session, cascade: Cascade, pairs: Pairs, threshold: float,
                     bias: dict[int, float], small: Callable[[list[int]], dict[int, float]]) -> tuple[Cascade, Stats]:
    """A join cascade's band chosen for its target on a seeded uniform sample of the product's
    pairs, which the larger model answers at `threshold`; `small`: the small model's P(yes) of
    the sampled pairs. The sample is the product's, whichever pairs a blocked join asks, so a
    blocked join chooses the band that the full join would."""
    picked = _sample(pairs.left + pairs.right, cascade.sample, pairs.size)
    first = small(picked)
    checked, chosen = pairs.ask(cascade_model, picked, None, bias)
    g = choose(*cascade.goal(), cascade.delta, [[first[k]] for k in picked], [checked[k] >= threshold for k in picked])
    return (replace(cascade, low=g.low, high=g.high),
            _guaranteed(chosen.of_model(f"{cascade_model.loaded.name} (choosing the band)", len(picked)), g))


def _tokens_only(progress: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
    """The progress of a second pass over rows already counted: its tokens only."""
    return (lambda _, tokens: progress(0, tokens)) if progress else None


def _sample(texts: list[str], n: int, population: int | None = None) -> list[int]:
    """A uniform random sample of n of the rows (of `population` items: a join's pairs), seeded by
    the texts, so that a run and its retry choose the same band."""
    population = len(texts) if population is None else population
    seed = int.from_bytes(hashlib.sha256("\x1e".join(texts).encode()).digest()[:8], "big")
    return sorted(random.Random(seed).sample(range(population), min(n, population)))


def _guaranteed(stats: Stats, g: Guarantee) -> Stats:
    """The choosing's accounting, carrying how the band was chosen (Stats.guarantee) and what
    choosing it computed (predict_escalated adds that to the prediction)."""
    stats.guarantee = g.to_dict() | {"accounting": {"tokens_naive": stats.tokens_naive,
                                                    "tokens_computed": stats.tokens_computed,
                                                    "tokens_reused": dict(stats.tokens_reused)}}
    return stats
