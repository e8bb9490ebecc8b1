"""A classify at run time: each label's probability per row, and the best label."""

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from quail.kinds import kind_of
from quail.kinds.classify import keys, render, top_columns
from quail.runtime.base import Inputs, KindRuntime, stored
from quail.runtime.outputs import scatter
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session


class ClassifyRuntime(KindRuntime):
    kind = kind_of("classify")

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        [(texts, rows)] = inputs
        labels = list(spec.labels)
        if spec.cascade is None:
            r, stats = session.classify(texts, labels, spec.questions[0], reuse, retain, truncate, progress, rows,
                                        spec.calibration, spec.descriptions)
        else:
            from quail.runtime.cascade import cascade_classify

            r, escalated, stats = cascade_classify(session, spec.cascade, texts, labels, spec.questions[0],
                                                   spec.descriptions, reuse, retain, truncate, progress, rows,
                                                   spec.calibration)
        columns = {"row": pa.array(rows, pa.int64()), "label": pa.array([labels[i] for i in r.labels], pa.string())}
        for k, label in enumerate(labels):
            columns[f"p_{label}"] = pa.array([p[k] for p in r.probabilities], pa.float64())
        if spec.cascade is not None:
            columns["escalated"] = pa.array(escalated, pa.bool_())  # the larger model labelled the row
        return pa.table(columns), stats

    def shape(self, spec: OperatorSpec, results: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        names = ["label"] + [f"p_{label}" for label in spec.labels] + (["escalated"] if spec.cascade else [])
        if spec.top_k is not None and spec.top_k > 1:
            results = _with_top(results, spec)
            names += top_columns(spec.top_k)
        return scatter(results, table.num_rows, names, source, table)

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        from quail.ops.classify import ClassifyAnswers  # here: the op loads torch, which parsing a DAG never does
        q, labels = render(session.layout, spec.questions[0], spec.labels, spec.descriptions)
        store = stored(session)
        known = store.known(keys(store.key, q, labels, docs, session.calibrating(spec.calibration)),
                            ClassifyAnswers(len(labels)), False)
        prompts = self.store_hits_all(session, spec, docs, partners)
        return {i: prompts[i] for i, p in enumerate(known) if p is not None}



def _with_top(results: pa.Table, spec: OperatorSpec) -> pa.Table:
    """The results with their K best labels (ties in label order) and those labels' probabilities."""
    probs = list(zip(*(results.column(f"p_{label}").to_pylist() for label in spec.labels)))
    order = [sorted(range(len(spec.labels)), key=lambda i: -p[i])[: spec.top_k] for p in probs]
    results = results.append_column("p_label", pa.array([p[o[0]] for p, o in zip(probs, order)], pa.float64()))
    for i in range(1, cast(int, spec.top_k)):
        results = results.append_column(f"label_{i + 1}", pa.array([spec.labels[o[i]] for o in order], pa.string()))
        results = results.append_column(f"p_label_{i + 1}", pa.array([p[o[i]] for p, o in zip(probs, order)],
                                                                     pa.float64()))
    return results
