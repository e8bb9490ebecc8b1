"""One operator's results, keyed by input row number: what the worker sends back. Shaping them into
the output table (outputs.py) needs the input tables and happens where they are."""

from collections.abc import Callable
from dataclasses import dataclass, replace

import pyarrow as pa

from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.kinds.base import OperatorTokens
from quail.planner.plan import OperatorPlan, Plan
from quail.planner.predict import Prediction, predict_calibration, predict_fresh, predict_operator
from quail.reuse import Retain, Reuse
from quail.runtime import runtime_of
from quail.session import Session
from quail.specs import OperatorSpec


def retain_for(op: OperatorPlan, scope: str = "") -> Retain:
    """`scope` namespaces the consumers (a DAG run), so runs never release each other's KV. The
    operator itself is the owner: what it takes from the pool is not kept for it again."""
    keep = op.retain
    if keep is None:
        return Retain(frozenset(), 0.0, 0.0, owner=scope + op.name)
    return Retain(frozenset(scope + c for c in keep.consumers), keep.passed, keep.failed, owner=scope + op.name)


def compute(session: Session, spec: OperatorSpec, op: OperatorPlan, reuse: Reuse,
            inputs: list[tuple[list[str], list[int]]], truncate: bool = False,
            progress: Callable[[int, int], None] | None = None, scope: str = "") -> tuple[pa.Table, Stats]:
    """inputs: per input, its texts and their row numbers. Returns the results and the accounting."""
    kind_of(spec.kind).check_room(session.layout, spec, session.context, f"operator {spec.name!r}")
    reuse = Reuse(op.rewind and reuse.rewind, op.sharing and reuse.sharing, reuse.retention,
                  reuse.borrowing, reuse.store)
    return runtime_of(spec.kind).compute(session, spec, inputs, reuse, retain_for(op, scope), truncate, progress)


@dataclass
class WindowResults:
    """What computing one window (or one part of it) gives: the results by input row, the accounting,
    and a cascade's larger model's share of it."""

    results: pa.Table
    stats: Stats
    escalated: Prediction


def compute_window(session: Session, plan: Plan, spec: OperatorSpec, op: OperatorPlan, reuse: Reuse,
                   inputs: list[tuple[list[str], list[int]]], truncate: bool = False,
                   progress: Callable[[int, int], None] | None = None, scope: str = "") -> WindowResults:
    """One window of an operator, as the CLI's runner and the worker both compute it."""
    results, stats = compute(session, spec, op, reuse, inputs, truncate, progress, scope)
    escalated = predict_escalated(session, plan, spec, results, inputs, truncate, stats)
    return WindowResults(results, stats, escalated)


def parts(session: Session, spec: OperatorSpec, docs: list[list[int]], use_store: bool = True) -> list[tuple[int, int]]:
    """These documents cut into parts (index ranges, in order) where the ones `spec` will compute
    fill half the retention pool: a part's KV is then still retained when its consumers run on
    it. The documents answered from the answer store (`use_store`: the run uses it) are not computed
    and take no room, so a rerun whose answers are stored runs in one part."""
    stored = runtime_of(spec.kind).store_hits(session, spec, docs, [], False) \
        if use_store and session.store is not None else {}
    room, page = session.engine.pool.capacity / 2, session.engine.settings.page_size
    cuts, lo, pages = [], 0, 0
    for i, doc in enumerate(docs):
        if i in stored:
            continue
        need = -(-len(doc) // page)
        if pages and pages + need > room:
            cuts.append((lo, i))
            lo, pages = i, 0
        pages += need
    return cuts + [(lo, len(docs))]


def _tokens(session: Session, spec: OperatorSpec, docs: list[list[int]], partners: list[str],
            truncate: bool) -> OperatorTokens:
    kind = kind_of(spec.kind)
    t = kind.tokens(session.layout, spec, docs, partners)
    if truncate:
        room = kind.document_room(t, session.context)
        t = replace(t, docs=[d[:room] for d in t.docs], partners=[min(p, room) for p in t.partners])
    return t


def _probes(session: Session, plan: Plan, spec: OperatorSpec, partners: list[str], truncate: bool,
            use_store: bool, probed: bool = False) -> Prediction:
    """Contextual calibration's content-free prompts, where the session's model calibrates: each
    call (window) asks them again, or finds them in the answer store. `probed`: an earlier window of
    the same run will have stored them."""
    if not session.calibrating(spec.calibration):
        return Prediction()
    probes = _tokens(session, spec, session.content_free(), partners, truncate)
    runtime = runtime_of(spec.kind)
    if use_store and probed:
        stored = runtime.store_hits_all(session, spec, probes.docs, partners)
    else:
        stored = runtime.store_hits(session, spec, probes.docs, partners, True) if use_store else {}
    return predict_calibration(plan[spec.name], spec.kind, probes, session.engine.settings.page_size, stored)


def predict(session: Session, plan: Plan, spec: OperatorSpec, docs: list[list[int]], partners: list[str],
            reached: bool = False, truncate: bool = False, use_store: bool = True, probed: bool = False) -> Prediction:
    """The plan's expected accounting of `spec` over these documents (`session.layout.documents`,
    and a join's partners); `reached`: they are the rows that reached it, not the rows of its
    source table; `truncate`: documents are cut to the context, as the run will cut them. A
    cascade's larger model is predicted once its rows are known (`predict_escalated`). `use_store`:
    the job uses the session's answer store, if it has one: what it holds is counted as reused."""
    use_store = use_store and session.store is not None
    t = _tokens(session, spec, docs, partners, truncate)
    stored = runtime_of(spec.kind).store_hits(session, spec, t.docs, partners, False) if use_store else {}
    p = predict_operator(plan, spec.name, t, session.engine.settings.page_size, reached, stored)
    p.add(_probes(session, plan, spec, partners, truncate, use_store, probed))
    p.add(runtime_of(spec.kind).reads(session, plan[spec.name], spec, docs, partners, truncate, use_store))
    return p


def predict_escalated(session: Session, plan: Plan, spec: OperatorSpec, results: pa.Table,
                      inputs: list[tuple[list[str], list[int]]], truncate: bool = False,
                      stats: Stats | None = None) -> Prediction:
    """A cascade's larger model's share of a window, from the results that say which of the window's
    rows (`inputs`: per input, texts and row numbers) it took: its prompts over them, with nothing
    retained for it (a join's: each left row with its right rows the larger model answered); and,
    where the window chose the band (`stats.guarantee`), what choosing it computed. Nothing for other
    operators."""
    if spec.cascade is None:
        return Prediction()
    p = Prediction.from_dict(stats.guarantee["accounting"]) if stats is not None and stats.guarantee \
        else Prediction()
    cascade_model = session.cascade_model(spec.cascade.model)
    escalated = results.column("escalated").to_pylist()
    if kind_of(spec.kind).arity == 1:
        asked: list[tuple[list[str], list[str]]] = [([t for t, c in zip(inputs[0][0], escalated) if c], [])]
    else:
        (left, left_rows), (right, right_rows) = inputs
        lefts, rights = dict(zip(left_rows, left)), dict(zip(right_rows, right))
        by_left: dict[int, list[str]] = {}
        for a, b, c in zip(results.column("left_row").to_pylist(), results.column("right_row").to_pylist(),
                           escalated):
            if c:
                by_left.setdefault(a, []).append(rights[b])
        asked = [([lefts[a]], partners) for a, partners in by_left.items()]
    for texts, partners in asked:
        if texts:
            t = _tokens(cascade_model, spec, cascade_model.layout.documents(texts), partners, truncate)
            p.add(predict_fresh(plan[spec.name], spec.kind, t, cascade_model.engine.settings.page_size))
            p.add(_probes(cascade_model, plan, spec, partners, truncate, False))
    return p
