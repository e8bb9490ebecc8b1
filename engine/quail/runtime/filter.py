"""A filter at run time: every predicate's P(yes) per row, and the rows that passed (or all of them,
with `passed` and `p_yes_k`, under keep_all)."""

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from quail.kinds import kind_of
from quail.kinds.filter import keys, render, stored_prompts
from quail.ops.calibration import column_means
from quail.ops.rewind import decided
from quail.runtime.base import Inputs, KindRuntime, stored
from quail.runtime.outputs import scatter
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session


class FilterRuntime(KindRuntime):
    kind = kind_of("filter")

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        [(texts, rows)] = inputs
        if spec.cascade is None:
            r, stats = session.filter(texts, list(spec.questions), spec.threshold, spec.limit, reuse, retain,
                                      truncate, progress, rows, spec.calibration)
            calibrated = session.calibrating(spec.calibration)
        else:  # every row of the window is answered: the output keeps the first `limit` that passed
            from quail.runtime.cascade import cascade_filter

            r, escalated, stats = cascade_filter(session, spec.cascade, texts, list(spec.questions), spec.threshold,
                                                 reuse, retain, truncate, progress, rows, spec.calibration)
            cascade_model = session.cascade_model(spec.cascade.model)
            calibrated = any(s.calibrating(spec.calibration) for s in (session, cascade_model))
        columns = {"row": pa.array(rows[: len(r.passed)], pa.int64()), "passed": pa.array(r.passed, pa.bool_())}
        # p_yes_k per predicate, and p_yes_raw_k, before calibration, where it was on
        for k in range(len(spec.questions)):
            columns[f"p_yes_{k + 1}"] = pa.array([p[k] for p in r.p_yes], pa.float64())
        if spec.cascade is not None:
            columns["escalated"] = pa.array(escalated, pa.bool_())  # the larger model answered the row
        if calibrated:
            for k in range(len(spec.questions)):
                columns[f"p_yes_raw_{k + 1}"] = pa.array([p[k] for p in r.raw_p_yes], pa.float64())
        return pa.table(columns), stats

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        from quail.ops.filter import FilterAnswers  # here: the op loads torch, which parsing a DAG never does
        if spec.limit is not None:  # a row limit computes every row in order
            return {}
        questions = render(session.layout, spec.questions)
        threshold = 0.0 if probes else spec.threshold
        bias: list[float] | None = None
        calibrated, store = session.calibrating(spec.calibration), stored(session)
        if not probes and calibrated:  # the bias, from the stored probes
            asked = store.known(keys(store.key, questions, session.content_free(), calibrated), FilterAnswers(), False)
            if any(p is None for row in asked for p in row):
                return {}
            bias = column_means(asked)
        known = store.known(keys(store.key, questions, docs, calibrated), FilterAnswers(), False)
        return {i: sum(t for t, _ in stored_prompts(doc, questions, len(raw))) for i, (doc, row) in
                enumerate(zip(docs, known)) if (raw := decided(row, questions, threshold, bias)) is not None}

    def shape(self, spec: OperatorSpec, results: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        passed = pc.filter(results.column("row"), results.column("passed")).to_pylist()[: spec.limit]
        if not spec.keep_all:
            return table.take(pa.array(passed, pa.int64()))
        names = [n for n in results.column_names if n != "row"]  # as computed: the worker resolved "auto"
        out = scatter(results, table.num_rows, names, source, table)
        if spec.limit is not None and len(passed) == spec.limit:
            out = out.slice(0, passed[-1] + 1)  # the rows up to the N-th passing one
        return out

    def output_rows(self, spec: OperatorSpec, results: pa.Table) -> list[int]:
        if spec.keep_all:
            return results.column("row").to_pylist()
        return pc.filter(results.column("row"), results.column("passed")).to_pylist()[: spec.limit]

    def counted_rows(self, results: pa.Table) -> int:
        return int(pc.sum(results.column("passed")).as_py() or 0)

    def observed(self, spec: OperatorSpec, results: pa.Table) -> tuple[int, int] | None:
        if spec.limit is not None:  # a limit stops early: what it saw is no sample of the table
            return None
        return results.num_rows, self.counted_rows(results)
