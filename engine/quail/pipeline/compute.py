"""One operator's answers, keyed by input row number: what the worker sends back. Shaping them into
the output table (outputs.py) needs the input tables and happens where they are."""

from dataclasses import replace

import pyarrow as pa

from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.planner.plan import OperatorPlan, Plan
from quail.planner.predict import Prediction, predict_calibration, predict_fresh, predict_operator
from quail.planner.specs import OperatorSpec
from quail.reuse import Retain, Reuse
from quail.runtime import runtime_of
from quail.session import Session


def retain_for(op: OperatorPlan, scope: str = "") -> Retain:
    """`scope` namespaces the consumers (a DAG run), so runs never release each other's KV. The
    operator itself is the owner: what it takes from the pool is not kept for it again."""
    keep = op.retain
    if keep is None:
        return Retain(frozenset(), 0.0, 0.0, owner=scope + op.name)
    return Retain(frozenset(scope + c for c in keep.consumers), keep.passed, keep.failed, owner=scope + op.name)


def compute(session: Session, spec: OperatorSpec, op: OperatorPlan, reuse: Reuse,
            inputs: list[tuple[list[str], list[int]]], truncate: bool = False, progress=None,
            scope: str = "") -> tuple[pa.Table, Stats]:
    """inputs: per input, its texts and their row numbers. Returns the answers and the accounting."""
    kind_of(spec.kind).check_room(session.layout, spec, session.context, f"operator {spec.name!r}")
    reuse = Reuse(op.chain_mode and reuse.rewind, op.prefix_sharing and reuse.sharing, reuse.retention,
                  reuse.borrowing, reuse.answers)
    return runtime_of(spec.kind).compute(session, spec, inputs, reuse, retain_for(op, scope), truncate, progress)


def retained_rows(session: Session, docs: list[list[int]], most: int) -> int:
    """How many rows like `docs` fill half the retention pool (at least 1, at most `most`): a chain's
    window, so that its consumers find the window's documents still retained."""
    if not docs:
        return most
    page = session.engine.plan.page_size
    pages = sum(-(-len(d) // page) for d in docs) / len(docs)
    return max(1, min(most, int(session.engine.pool.capacity / 2 / pages)))


def _tokens(session: Session, spec: OperatorSpec, docs: list[list[int]], partners: list[str], truncate: bool):
    kind = kind_of(spec.kind)
    t = kind.tokens(session.layout, spec, docs, partners)
    if truncate:
        room = kind.document_room(t, session.context)
        t = replace(t, docs=[d[:room] for d in t.docs], partners=[min(p, room) for p in t.partners])
    return t


def _probes(session: Session, plan: Plan, spec: OperatorSpec, partners: list[str], truncate: bool,
            answers: bool, probed: bool = False) -> Prediction:
    """Contextual calibration's content-free prompts, where the session's model calibrates: each
    call (window) asks them again, or finds them in the answer store. `probed`: an earlier window of
    the same run will have stored them."""
    if not session.calibrating(spec.calibration):
        return Prediction()
    probes = _tokens(session, spec, session.content_free(), partners, truncate)
    runtime = runtime_of(spec.kind)
    if answers and probed:
        stored = runtime.stored_all(session, spec, probes.docs, partners)
    else:
        stored = runtime.stored(session, spec, probes.docs, partners, True) if answers else {}
    return predict_calibration(plan[spec.name], spec.kind, probes, session.engine.plan.page_size, stored)


def predict(session: Session, plan: Plan, spec: OperatorSpec, docs: list[list[int]], partners: list[str],
            reached: bool = False, truncate: bool = False, answers: bool = True, probed: bool = False) -> Prediction:
    """The plan's expected accounting of `spec` over these documents (`session.layout.documents`,
    and a join's partners); `reached`: they are the rows that reached it, not the rows of its
    source table; `truncate`: documents are cut to the context, as the run will cut them. A
    cascade's larger model is predicted once its rows are known (`predict_escalated`). `answers`:
    the job uses the session's answer store, if it has one: what it holds is counted as reused."""
    answers = answers and session.answers is not None
    t = _tokens(session, spec, docs, partners, truncate)
    stored = runtime_of(spec.kind).stored(session, spec, t.docs, partners, False) if answers else {}
    p = predict_operator(plan, spec.name, t, session.engine.plan.page_size, reached, stored)
    p.add(_probes(session, plan, spec, partners, truncate, answers, probed))
    return p


def predict_escalated(session: Session, plan: Plan, spec: OperatorSpec, answers: pa.Table, texts: list[str],
                      truncate: bool = False, stats: Stats | None = None) -> Prediction:
    """A cascade's larger model's share of a window, from the answers that say which of the window's
    `texts` it took: its prompts over them, with nothing retained for it; and, where the window
    chose the band (`stats.guarantee`), what choosing it computed. Nothing for other operators."""
    if spec.cascade is None:
        return Prediction()
    chose = Prediction.from_dict(stats.guarantee["accounting"]) if stats is not None and stats.guarantee \
        else Prediction()
    large = session.peer(spec.cascade.model)
    taken = [t for t, c in zip(texts, answers.column("cascaded").to_pylist()) if c]
    if not taken:
        return chose
    t = _tokens(large, spec, large.layout.documents(taken), [], truncate)
    p = predict_fresh(plan[spec.name], spec.kind, t, large.engine.plan.page_size)
    p.add(_probes(large, plan, spec, [], truncate, False))
    p.add(chose)
    return p
