"""A join at run time: each pair's P(yes), the pairs at or above the threshold (each left row's
best `top_k` of them, if given), ranked within their left row."""

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from quail.kinds import kind_of
from quail.kinds.join import keys, pair_room, partner, ranked, reads_vectors, render
from quail.planner.plan import OperatorPlan
from quail.planner.predict import Prediction
from quail.prefix_tree import PrefixTree
from quail.runtime.base import Inputs, KindRuntime, stored
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session


class JoinRuntime(KindRuntime):
    kind = kind_of("join")

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        (ltexts, lrows), (rtexts, rrows) = inputs
        asked: list[list[int]] | None = None  # per left row, the right rows asked (None: every one)
        if spec.recall_target is not None or spec.candidates is not None:
            from quail.runtime.blocking import blocked_join

            r, asked, escalated, stats = blocked_join(session, spec, ltexts, rtexts, reuse, retain, truncate, lrows,
                                                      rrows)
        elif spec.cascade is None:
            r, stats = session.join(ltexts, rtexts, spec.questions[0], reuse, retain, truncate, progress, lrows,
                                    rrows, spec.calibration, partner(spec), condition_first=spec.condition_first)
        else:
            from quail.runtime.cascade import cascade_join

            r, escalated, stats = cascade_join(session, spec.cascade, ltexts, rtexts, spec.questions[0],
                                               spec.threshold, reuse, retain, truncate, progress, lrows, rrows,
                                               spec.calibration, partner(spec), spec.condition_first)
        pairs: list[tuple[int, int, float, int | None]] = [
            (i, j, p, rank) for i, ps in enumerate(r.p_yes)
            for rank, (j, p) in enumerate(ranked(ps, spec.threshold, spec.top_k, asked[i] if asked else None), 1)]
        columns = {}
        if spec.cascade is not None:  # the pairs the larger model answered that did not match, unranked: for review
            matched = {(i, j) for i, j, _, _ in pairs}
            p_of = {(i, j): p for i, ps in enumerate(r.p_yes)
                    for j, p in zip(asked[i] if asked else range(len(ps)), ps)}
            pairs += [(i, j, p_of[i, j], None) for i, j in sorted(escalated - matched)]
            columns["escalated"] = pa.array([(i, j) in escalated for i, j, _, _ in pairs], pa.bool_())
        return pa.table({"left_row": pa.array([lrows[i] for i, _, _, _ in pairs], pa.int64()),
                         "right_row": pa.array([rrows[j] for _, j, _, _ in pairs], pa.int64()),
                         "p_yes": pa.array([p for _, _, p, _ in pairs], pa.float64()),
                         "rank": pa.array([k for _, _, _, k in pairs], pa.int32())} | columns), stats

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        from quail.ops.join import JoinAnswers  # here: the op loads torch, which parsing a DAG never does
        if not partners:
            return {}
        name = partner(spec)
        cond = render(session.layout, spec.questions[0], name, spec.condition_first)
        room = pair_room(session.context, len(cond))
        rights = [r[:room] for r in session.layout.partners(partners, name)]  # cut as the run cuts them
        store = stored(session)
        known = store.known(keys(store.key, cond, docs, rights, session.calibrating(spec.calibration)), JoinAnswers(),
                            False)
        prompts = self.store_hits_all(session, spec, docs, partners)
        return {i: prompts[i] for i, row in enumerate(known) if None not in row}

    def reads(self, session: "Session", op: OperatorPlan, spec: OperatorSpec, docs: list[list[int]],
              partners: list[str], truncate: bool, use_store: bool) -> Prediction:
        """A blocked join scored by the model's own vectors reads each row once as a plain document
        (runtime/blocking.py). A left row's read computes the document its pairs then find retained:
        it adds its tokens to the naive count and to retention. A right row's is computed for its
        vector alone, all but the preamble that prefix sharing gives it (a vector is read from its
        text's start). A row whose vector the answer store holds is not read."""
        p = Prediction()
        if not docs or not partners or not reads_vectors(spec):
            return p
        from quail.ops.vectors import VectorAnswers, vector_keys

        rights = session.layout.documents(partners)
        if truncate:  # as Session.vectors cuts them
            docs, rights = ([d[:session.context] for d in side] for side in (docs, rights))
        start = len(session.layout.preamble)
        held: set[int] = set()
        if use_store:
            store = stored(session)
            found = store.known(vector_keys(store.key, docs + rights, start, session.engine.model.vector_layer),
                                VectorAnswers(), False)
            held = {i for i, v in enumerate(found) if v is not None}
        for i, d in enumerate(docs + rights):
            p.tokens_naive += len(d)
            if i in held:
                p.tokens_reused["store"] += len(d)
            elif i < len(docs):
                p.tokens_reused["retention"] += len(d)
            else:
                p.tokens_computed += len(d)
        read = [d for j, d in enumerate(rights) if len(docs) + j not in held]
        if op.sharing and read:
            shared = sum(min(s, start) for s in PrefixTree.build(read, session.engine.settings.page_size).shared)
            p.tokens_computed -= shared
            p.tokens_reused["sharing"] += shared
        return p

    def shape(self, spec: OperatorSpec, results: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        left, right = tables
        if "escalated" in results.column_names and not spec.keep_all:  # the output: the pairs that matched
            results = results.filter(pc.is_valid(results.column("rank")))
        lt, rt = left.take(results.column("left_row")), right.take(results.column("right_row"))
        columns = {f"left_{n}": lt.column(n) for n in lt.column_names}
        columns |= {f"right_{n}": rt.column(n) for n in rt.column_names}
        columns["p_yes"] = results.column("p_yes")
        columns["rank"] = results.column("rank")
        if "escalated" in results.column_names:
            columns["escalated"] = results.column("escalated")
        return pa.table(columns)
