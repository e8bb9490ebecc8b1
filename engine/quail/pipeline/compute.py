"""One operator's answers, keyed by input row number: what the worker sends back. Shaping them into
the output table (outputs.py) needs the input tables and happens where they are."""

import pyarrow as pa

from quail.executor.engine import Reuse
from quail.executor.retention_pool import Retain
from quail.executor.stats import Stats
from quail.planner.plan import OperatorPlan
from quail.planner.specs import OperatorSpec
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
    retain = retain_for(op, scope)
    if spec.kind == "filter":
        [(texts, rows)] = inputs
        r, stats = session.filter(texts, list(spec.questions), spec.threshold, spec.limit, reuse, retain,
                                  truncate, progress, rows)
        columns = {"row": pa.array(rows[: len(r.passed)], pa.int64()), "passed": pa.array(r.passed, pa.bool_())}
        for k in range(len(spec.questions)):
            columns[f"p_yes_{k + 1}"] = pa.array([p[k] for p in r.p_yes], pa.float64())
    elif spec.kind == "classify":
        [(texts, rows)] = inputs
        labels = list(spec.labels)
        r, stats = session.classify(texts, labels, spec.questions[0], reuse, retain, truncate, progress, rows)
        columns = {"row": pa.array(rows, pa.int64()),
                   "label": pa.array([labels[i] for i in r.labels], pa.string())}
        for k, label in enumerate(labels):
            columns[f"p_{label}"] = pa.array([p[k] for p in r.probabilities], pa.float64())
    else:
        (ltexts, lrows), (rtexts, rrows) = inputs
        r, stats = session.join(ltexts, rtexts, spec.questions[0], reuse, retain, truncate, progress, lrows, rrows)
        pairs = [(lrows[i], rrows[j], p) for i, ps in enumerate(r.p_yes) for j, p in enumerate(ps)
                 if p >= spec.threshold]
        columns = {"left_row": pa.array([a for a, _, _ in pairs], pa.int64()),
                   "right_row": pa.array([b for _, b, _ in pairs], pa.int64()),
                   "p_yes": pa.array([p for _, _, p in pairs], pa.float64())}
    return pa.table(columns), stats
