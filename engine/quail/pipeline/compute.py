"""One operator's answers, keyed by input row number: what the worker sends back. Shaping them into
the output table (outputs.py) needs the input tables and happens where they are."""

from dataclasses import replace

import pyarrow as pa

from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.planner.plan import OperatorPlan, Plan
from quail.planner.predict import Prediction, predict_calibration, predict_operator
from quail.planner.specs import OperatorSpec
from quail.reuse import Retain, Reuse
from quail.session import Session


def retain_for(op: OperatorPlan, scope: str = "") -> Retain | None:
    """`scope` namespaces the consumers (a DAG run), so runs never release each other's KV."""
    keep = op.retain
    if keep is None:
        return None
    return Retain(frozenset(scope + c for c in keep.consumers), keep.passed, keep.failed)


def compute(session: Session, spec: OperatorSpec, op: OperatorPlan, reuse: Reuse,
            inputs: list[tuple[list[str], list[int]]], truncate: bool = False, progress=None,
            scope: str = "") -> tuple[pa.Table, Stats]:
    """inputs: per input, its texts and their row numbers. Returns the answers and the accounting."""
    reuse = Reuse(op.chain_mode and reuse.rewind, op.prefix_sharing and reuse.sharing, reuse.retention,
                  reuse.borrowing)
    return kind_of(spec.kind).compute(session, spec, inputs, reuse, retain_for(op, scope), truncate, progress)


def predict(session: Session, plan: Plan, spec: OperatorSpec, docs: list[list[int]], partners: list[str],
            reached: bool = False, truncate: bool = False) -> Prediction:
    """The plan's expected accounting of `spec` over these documents (`session.layout.documents`,
    and a join's partners); `reached`: they are the rows that reached it, not the rows of its
    source table; `truncate`: documents are cut to the context, as the run will cut them."""
    kind, page = kind_of(spec.kind), session.engine.plan.page_size

    def tokens(docs):
        t = kind.tokens(session.layout, spec, docs, partners)
        if truncate:
            room = kind.document_room(t, session.context)
            t = replace(t, docs=[d[:room] for d in t.docs], partners=[min(p, room) for p in t.partners])
        return t

    p = predict_operator(plan, spec.name, tokens(docs), page, reached)
    if session.calibrating(spec.calibration):  # each call (window) asks the content-free documents again
        p.add(predict_calibration(plan[spec.name], spec.kind, tokens(session.content_free()), page))
    return p
