"""Runs a planned pipeline in one engine session: each operator reads its inputs (tables or earlier
operators' outputs), runs with its plan entry, releases what no later operator claims, and writes
its output atomically with its stats, predicted and actual side by side."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from quail.pipeline.tables import read_table, text_column, write_table
from quail.cost.observed import SelectivityStore
from quail.errors import QuailError
from quail.executor.engine import Reuse
from quail.executor.retention_pool import Retain
from quail.executor.stats import Stats
from quail.pipeline.config import Pipeline
from quail.planner.plan import OperatorPlan, Plan
from quail.planner.predict import OperatorTokens, Prediction, predict
from quail.planner.prefix_tree import stem
from quail.planner.specs import OperatorSpec
from quail.session import Session


@dataclass
class Input:
    table: pa.Table
    texts: list[str]
    rows: list[int]  # the table rows the texts came from (rows skipped under on_null=skip)
    source: str


@dataclass
class OperatorRun:
    spec: OperatorSpec
    table: pa.Table
    stats: Stats
    predicted: Prediction


class Runner:
    def __init__(self, pipeline: Pipeline, on_null: str = "fail", truncate: bool = False):
        self.pipeline = pipeline
        self.on_null = on_null
        self.truncate = truncate
        self.tables: dict[str, pa.Table] = {}

    def table(self, name: str) -> pa.Table:
        if name not in self.tables:
            self.tables[name] = read_table(self.pipeline.tables[name])
        return self.tables[name]

    def input(self, name: str, column: str) -> Input:
        source = self.pipeline.tables.get(name, f"operator {name!r}")
        texts, rows = text_column(self.table(name), column, source, self.on_null)
        return Input(self.table(name), texts, rows, source)

    def check_inputs(self) -> None:
        """Reads and checks every table input before the model loads."""
        for spec in self.pipeline.specs:
            for name, column in zip(spec.inputs, spec.columns):
                if name in self.pipeline.tables:
                    self.input(name, column)

    def tokens(self, session: Session, plan: Plan) -> dict[str, OperatorTokens]:
        """Each operator's documents as the rows of its source table (for the prediction)."""
        specs = {s.name: s for s in plan.specs}

        def source(name: str, column: str) -> list[str]:
            while name in specs and specs[name].kind != "join":
                name = specs[name].inputs[0]
            return self.input(name, column).texts if name in self.pipeline.tables else []

        layout, out = session.layout, {}
        for s in plan.specs:
            docs = [layout.document(t) for t in source(s.inputs[0], s.columns[0])]
            if s.kind == "filter":
                questions = [layout.yes_no_question(q) for q in s.questions]
                out[s.name] = OperatorTokens(docs, [len(q) for q in questions], stem=stem(questions))
            elif s.kind == "classify":
                q = layout.label_question(s.questions[0], list(s.labels))
                out[s.name] = OperatorTokens(docs, [len(q)], [len(layout.label(x)) for x in s.labels])
            else:
                condition = layout.pair_question(s.questions[0])
                partners = [layout.partner(t) + condition for t in source(s.inputs[1], s.columns[1])]
                out[s.name] = OperatorTokens(docs, [len(condition)], partners=[len(p) - len(condition) for p in partners],
                                             stem=stem(partners))
        return out

    def run(self, session: Session, plan: Plan, reuse: Reuse, progress: Callable) -> list[OperatorRun]:
        predicted = predict(plan, self.tokens(session, plan), session.engine.plan.page_size)
        store = SelectivityStore()
        runs = []
        for spec in plan.specs:
            op = plan[spec.name]
            inputs = [self.input(n, c) for n, c in zip(spec.inputs, spec.columns)]
            op_reuse = Reuse(op.chain_mode, op.prefix_sharing and reuse.sharing, reuse.retention, reuse.borrowing)
            table, stats, passed = RUNNERS[spec.kind](session, spec, op, inputs, op_reuse, self.truncate,
                                                      progress(len(inputs[0].texts), spec.name))
            session.engine.pool.consumed(spec.name)
            self.tables[spec.name] = table
            if spec.kind == "filter" and spec.limit is None:
                store.record(spec.fingerprint(), len(inputs[0].texts), passed)
            if spec.output:
                write_table(table, spec.output)
            run = OperatorRun(spec, table, stats, predicted[spec.name])
            if spec.name in self.pipeline.stats:
                write_stats(self.pipeline.stats[spec.name], run, session, plan)
            runs.append(run)
        return runs


def write_stats(path: str, run: OperatorRun, session: Session, plan: Plan) -> None:
    doc = {"operator": run.spec.name, "command": run.spec.kind, "model": session.loaded.name,
           "plan_hash": plan.hash, "rows_out": run.table.num_rows} | run.stats.to_dict()
    doc["predicted"] = run.predicted.rounded()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2))


def _retain(op: OperatorPlan) -> Retain | None:
    keep = op.retain
    return None if keep is None else Retain(frozenset(keep.consumers), keep.passed, keep.failed)


def _add_columns(table: pa.Table, columns: dict, source: str) -> pa.Table:
    for name, values in columns.items():
        if name in table.column_names:
            raise QuailError(f"{source}: already has a column {name!r}, which the output adds")
        table = table.append_column(name, values)
    return table


def _scatter(values: list, rows: list[int], n: int) -> list:
    out = [None] * n
    for r, v in zip(rows, values):
        out[r] = v
    return out


def _filter(session, spec, op, inputs, reuse, truncate, progress):
    [x] = inputs
    result, stats = session.filter(x.texts, list(spec.questions), spec.threshold, spec.limit, reuse, _retain(op),
                                   truncate, progress, x.rows)
    stats.rows_skipped = x.table.num_rows - len(x.texts)
    done = x.rows[: len(result.passed)]
    passing = [r for r, ok in zip(done, result.passed) if ok][: spec.limit]
    if not spec.keep_all:
        return x.table.take(pa.array(passing, pa.int64())), stats, sum(result.passed)
    n = x.table.num_rows
    extra = {"passed": pa.array(_scatter(result.passed, x.rows, n), pa.bool_())}
    for k in range(len(spec.questions)):
        extra[f"p_yes_{k + 1}"] = pa.array(_scatter([p[k] for p in result.p_yes], x.rows, n), pa.float64())
    table = _add_columns(x.table, extra, x.source)
    if spec.limit is not None and len(passing) == spec.limit:
        table = table.slice(0, passing[-1] + 1)  # the rows up to the N-th passing one
    return table, stats, sum(result.passed)


def _classify(session, spec, op, inputs, reuse, truncate, progress):
    [x] = inputs
    labels = list(spec.labels)
    result, stats = session.classify(x.texts, labels, spec.questions[0], reuse, _retain(op), truncate, progress,
                                     x.rows)
    stats.rows_skipped = x.table.num_rows - len(x.texts)
    n = x.table.num_rows
    extra = {"label": pa.array(_scatter([labels[i] for i in result.labels], x.rows, n), pa.string())}
    for k, label in enumerate(labels):
        extra[f"p_{label}"] = pa.array(_scatter([p[k] for p in result.probabilities], x.rows, n), pa.float64())
    return _add_columns(x.table, extra, x.source), stats, None


def _join(session, spec, op, inputs, reuse, truncate, progress):
    left, right = inputs
    result, stats = session.join(left.texts, right.texts, spec.questions[0], reuse, _retain(op), truncate, progress,
                                 left.rows, right.rows)
    stats.rows_skipped = (left.table.num_rows - len(left.texts)) + (right.table.num_rows - len(right.texts))
    pairs = [(left.rows[i], right.rows[j], p) for i, ps in enumerate(result.p_yes) for j, p in enumerate(ps)
             if p >= spec.threshold]
    lt = left.table.take(pa.array([a for a, _, _ in pairs], pa.int64()))
    rt = right.table.take(pa.array([b for _, b, _ in pairs], pa.int64()))
    columns = {f"left_{n}": lt.column(n) for n in lt.column_names}
    columns |= {f"right_{n}": rt.column(n) for n in rt.column_names}
    columns["p_yes"] = pa.array([p for _, _, p in pairs], pa.float64())
    return pa.table(columns), stats, None


RUNNERS = {"filter": _filter, "classify": _classify, "join": _join}
