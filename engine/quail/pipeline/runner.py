"""Runs a planned pipeline in one engine session: each operator reads its inputs (tables or earlier
operators' outputs), runs with its plan entry, releases what no later operator claims, and writes
its output atomically with its stats, predicted and actual side by side."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from quail.cost.observed import SelectivityStore
from quail.executor.engine import Reuse
from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.pipeline.compute import compute
from quail.pipeline.config import Pipeline
from quail.pipeline.outputs import shape
from quail.pipeline.tables import read_table, text_column, write_table
from quail.planner.plan import Plan
from quail.planner.predict import OperatorTokens, Prediction, predict
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
            while name in specs and kind_of(specs[name].kind).arity == 1:
                name = specs[name].inputs[0]
            return self.input(name, column).texts if name in self.pipeline.tables else []

        out = {}
        for s in plan.specs:
            docs = [session.layout.document(t) for t in source(s.inputs[0], s.columns[0])]
            partners = source(s.inputs[1], s.columns[1]) if len(s.inputs) > 1 else []
            out[s.name] = kind_of(s.kind).tokens(session.layout, s, docs, partners)
        return out

    def run(self, session: Session, plan: Plan, reuse: Reuse, progress: Callable) -> list[OperatorRun]:
        predicted = predict(plan, self.tokens(session, plan), session.engine.plan.page_size)
        store = SelectivityStore()
        runs = []
        for spec in plan.specs:
            inputs = [self.input(n, c) for n, c in zip(spec.inputs, spec.columns)]
            answers, stats = compute(session, spec, plan[spec.name], reuse, [(x.texts, x.rows) for x in inputs],
                                     self.truncate, progress(len(inputs[0].texts), spec.name))
            session.engine.consumed(spec.name)
            stats.rows_skipped = sum(x.table.num_rows - len(x.texts) for x in inputs)
            table = shape(spec, answers, [x.table for x in inputs], inputs[0].source)
            self.tables[spec.name] = table
            if (seen := kind_of(spec.kind).observed(spec, answers)) is not None:
                store.record(spec.fingerprint(), *seen)
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
