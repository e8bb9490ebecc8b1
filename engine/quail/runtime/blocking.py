"""A join that asks the model about few of its pairs (docs/design.md, "Blocked joins").

Each left and right row is read once for its vector (the model's own hidden states, ops/vectors.py,
or a sentence-transformers model's, ops/embedding.py); the vectors score every pair, in blocks
(ops/candidates.py). Then either:
- a recall target: the pairs above a score cut and a sample below it are asked, and the output is
  certified to hold at least `recall_target` of the full join with probability 1 - `recall_delta`
  (planner/recall.py), or every pair is asked where that costs less;
- a recall target with top_k: a sample of left rows is asked about every right row, and every
  left row asks as many best-scoring candidates as certify the share of left rows whose top k
  lies inside them;
- candidates: each left row asks its K best-scoring right rows, and a sample of the other pairs
  estimates the recall, stated as an estimate.
The output is every asked pair the model matched. The sample is drawn with a seed from the
tables' content and the condition, so a rerun asks the same pairs (the answer store answers them)."""

import hashlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from quail.executor.stats import Stats
from quail.kinds.join import partner, ranked
from quail.ops.candidates import VectorProduct
from quail.ops.join import JoinResult
from quail.planner.recall import certify, draw_below
from quail.runtime.cascade import choose_pair_band
from quail.runtime.pairs import Pairs
from quail.sampling import FIRST_CUT, TOP_K_SLACK, predict_blocked, sample_size, upper_bound
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.reuse import Retain, Reuse
    from quail.session import Session


def blocked_join(session: "Session", spec: OperatorSpec, left: list[str], right: list[str], reuse: "Reuse",
                 retain: "Retain | None", truncate: bool, left_rows: list[int],
                 right_rows: list[int]) -> tuple[JoinResult, list[list[int]], set[tuple[int, int]], Stats]:
    """Each left row's P(yes) of the right rows it asked, and which (per left row, in order); the
    pairs a cascade's larger model answered. With a cascade, an asked pair's P(yes) is the full
    cascade join's: the session's model answers it, and the larger model where the band (chosen, for
    a target, on the product's sample, as the full join chooses it) leaves it unsure."""
    n, m = len(left), len(right)
    pairs = Pairs(left, right, spec.questions[0], reuse, truncate, left_rows, right_rows, spec.calibration,
                  partner(spec), spec.condition_first)
    p_of: dict[int, float] = {}  # pair id -> P(yes)
    first: dict[int, float] = {}  # pair id -> the session's model's P(yes), where a cascade may replace it
    bias: dict[int, float] = {}  # right row -> its content-free P(yes), where the model calibrates: probed once
    stats = Stats(pages_total=session.engine.settings.arena_pages)
    escalated: set[int] = set()
    cascade_model = session.cascade_model(spec.cascade.model) if spec.cascade is not None else None
    band = spec.cascade.band() if spec.cascade is not None and spec.cascade.chosen else None
    large_bias: dict[int, float] = {}
    small_stats, large_stats = Stats(), Stats()

    def answered(ids: list[int]) -> dict[int, float]:
        found, asked = pairs.ask(session, [k for k in ids if k not in first], retain, bias)
        first.update(found)
        small_stats.merge(asked)
        return {k: first[k] for k in ids}

    def ask(ids: np.ndarray) -> np.ndarray:
        new = [k for k in dict.fromkeys(ids.tolist()) if k not in p_of]
        if new:
            p_of.update(answered(new))
            if cascade_model is not None and band is not None:
                low, high = band
                unsure = [k for k in new if low <= p_of[k] <= high]
                checked, more = pairs.ask(cascade_model, unsure, None, large_bias)
                p_of.update(checked)
                escalated.update(unsure)
                large_stats.merge(more)
        return np.array([p_of[pair] >= spec.threshold for pair in ids.tolist()], bool)

    if n and m:
        product, vector_stats = scored_product(session, spec, left, right, reuse, retain, truncate, left_rows,
                                               right_rows)
        stats.merge(vector_stats)
        if cascade_model is not None and spec.cascade is not None and band is None:
            cascade, chosen = choose_pair_band(cascade_model, spec.cascade, pairs, spec.threshold, large_bias,
                                               answered)
            band = cascade.band()
            stats.merge(small_stats.of_model(f"{session.loaded.name} (choosing the band)", len(first))).merge(chosen)
            small_stats = Stats()
        seed = _seed(spec, left, right)
        if spec.recall_target is not None and spec.top_k is not None:
            report = _top_k(product, ask, p_of, spec.top_k, spec.threshold, spec.recall_target, spec.recall_delta,
                            seed)
        elif spec.recall_target is not None:
            report = _certified(product, ask, spec.recall_target, spec.recall_delta, max(n, m), seed)
        else:
            report = _candidates(product, ask, spec.candidates or 1, spec.recall_delta, max(n, m), seed)
    else:
        report = {"mode": "empty", "pairs": 0, "asked": 0, "recall_lower": 1.0,
                  "why": "a side has no rows: the join is empty, and its recall 1"}
    if cascade_model is None:
        stats.merge(small_stats)
    else:
        stats.merge(small_stats.of_model(session.loaded.name, len({k // m for k in p_of})))
        stats.merge(large_stats.of_model(cascade_model.loaded.name, len({k // m for k in escalated})))
    stats.blocking = report | {"asked": len(p_of), "embedding": spec.embedding or "the model's own hidden states",
                               "matched": sum(p >= spec.threshold for p in p_of.values())}
    if cascade_model is not None:
        stats.blocking["escalated"] = len(escalated)
    result, asked = JoinResult([[] for _ in range(n)]), [cast(list[int], []) for _ in range(n)]
    for pair in sorted(p_of):
        i, j = divmod(pair, m)
        asked[i].append(j)
        result.p_yes[i].append(p_of[pair])
    return result, asked, {divmod(k, m) for k in escalated}, stats


def scored_product(session: "Session", spec: OperatorSpec, left: list[str], right: list[str], reuse: "Reuse",
                   retain: "Retain | None", truncate: bool, left_rows: list[int],
                   right_rows: list[int]) -> tuple[VectorProduct, Stats]:
    """The product scored by the rows' vectors, centred on their mean (a model's hidden states share
    a large common part that would otherwise dominate every cosine)."""
    stats = Stats()
    if spec.embedding is not None:
        from quail.ops.embedding import embedding_model

        vectors = embedding_model(spec.embedding).encode(left + right)
    else:
        lv, stats = session.vectors(left, reuse, retain, truncate, left_rows)  # kept for the join's anchors
        rv, right_stats = session.vectors(right, reuse, None, truncate, right_rows)
        vectors = np.concatenate([lv.vectors, rv.vectors])
        stats.merge(right_stats)
    vectors = vectors - vectors.mean(0)
    return VectorProduct(vectors[: len(left)], vectors[len(left):]), stats


def _seed(spec: OperatorSpec, left: list[str], right: list[str]) -> int:
    h = hashlib.sha256(spec.questions[0].encode())
    for side in (left, right):
        h.update(len(side).to_bytes(8, "little"))
        for text in side:
            h.update(hashlib.sha256(text.encode()).digest())
    return int.from_bytes(h.digest()[:8], "little")


def _certified(product: VectorProduct, ask: Callable[[np.ndarray], np.ndarray], target: float, delta: float,
               rows: int, seed: int) -> dict:
    if predict_blocked(product.size, rows, target, delta) == product.size:
        matched = int(ask(product.between(math.inf, -math.inf)).sum())
        why = "a recall target of 1 is met only by asking every pair" if target >= 1.0 else \
            "certifying would ask about half the pairs or more: every pair costs about as much and leaves nothing " \
            "uncertain"
        return {"mode": "every pair", "pairs": product.size, "asked": product.size, "matched_above": matched,
                "recall_lower": 1.0, "target": target, "delta": delta,
                "why": why + ("; no pair matched, so the recall is 1 by definition" if not matched else "")}
    _, cert = certify(product, rows, ask, target, delta, seed)
    report = cert.to_dict() | {"mode": "certified", "predicted_asked": predict_blocked(product.size, rows, target,
                                                                                        delta)}
    if cert.matched_above + cert.found_below == 0:
        report["why"] = "no asked pair matched"
    return report


def _candidates(product: VectorProduct, ask: Callable[[np.ndarray], np.ndarray], k: int, delta: float, rows: int,
                seed: int) -> dict:
    """Each left row's k best right rows, and a uniform sample of the other pairs (as many as
    FIRST_CUT pairs a row) that estimates the matches they hold."""
    right = product.rows[1]
    best = product.best(k)
    chosen = np.sort((np.arange(len(best))[:, None] * right + best).ravel())
    matched = int(ask(chosen).sum())
    others = product.size - len(chosen)
    n = min(others, math.ceil(FIRST_CUT * rows))
    sample = draw_below(product.size, lambda ids: ~np.isin(ids, chosen), n, np.random.default_rng(seed),
                        np.empty(0, np.int64)) if n else np.empty(0, np.int64)
    found = int(ask(sample).sum()) if len(sample) else 0
    estimate = found * others / n if n else 0.0
    bound = upper_bound(others, len(sample), found, delta)
    total = matched + found
    return {"mode": "candidates", "candidates": k, "pairs": product.size, "asked": len(chosen) + len(sample),
            "asked_above": len(chosen), "sampled_below": len(sample), "matched_above": matched, "found_below": found,
            "recall_estimate": total / (matched + max(estimate, found)) if total else 1.0,
            "recall_interval": [total / (matched + bound) if matched + bound else 1.0, 1.0], "delta": delta}


def _top_k(product: VectorProduct, ask: Callable[[np.ndarray], np.ndarray], p_of: dict[int, float], k: int,
           threshold: float, target: float, delta: float, seed: int) -> dict:
    """Each left row's top_k among its c best-scoring right rows, c as small as makes the share of
    left rows whose top k (the model's, over every right row) lies inside their candidates at least
    `target` with probability 1 - delta. A uniform sample of left rows is asked about every right
    row, so each one's top k is known, and the score rank it needs. The rows a c misses shrink as c
    grows, so one level serves every c: c is the smallest at which the sampled rows it misses bound
    the rows it misses to (1 - target) of them (should a smaller c have missed more, its sampled
    rows would have too). The sampled rows' answers are exact; c candidates are asked of the rest."""
    rows, m = product.rows
    allowed = (1 - target) * rows
    n = min(rows, sample_size(rows, allowed, TOP_K_SLACK, delta))
    sampled = np.sort(np.random.default_rng(seed).choice(rows, n, replace=False))
    ask((sampled[:, None] * m + np.arange(m)).ravel())
    need = np.zeros(n, np.int64)  # the candidates each sampled row needs: its top k's worst score rank
    for s, i in enumerate(sampled.tolist()):
        top = [j for j, _ in ranked([p_of[i * m + j] for j in range(m)], threshold, k)]
        order = np.argsort(-(product.left[i] @ product.right.T), kind="stable")
        rank = np.empty(m, np.int64)
        rank[order] = np.arange(1, m + 1)
        need[s] = max((int(rank[j]) for j in top), default=0)
    tolerated = 0  # the most sampled rows missed that still bound the rows missed to `allowed`
    while tolerated < n and upper_bound(rows, n, tolerated + 1, delta) <= allowed:
        tolerated += 1
    worst = np.sort(need)[::-1]
    c = min(m, max(k, int(worst[tolerated]) if tolerated < n else k))
    missed = int((need > c).sum())
    ask(np.sort((np.arange(rows)[:, None] * m + product.best(c)).ravel()))
    return {"mode": "top-k", "top_k": k, "candidates": c, "pairs": product.size, "sampled_rows": n,
            "rows_missed": missed, "recall_lower": 1 - upper_bound(rows, n, missed, delta) / rows,
            "target": target, "delta": delta}
