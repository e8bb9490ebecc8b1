"""Runs a planned pipeline in one engine session, a window of rows at a time: each operator reads
its first input (a table, or an earlier operator's output) in windows, computes each window with its
plan entry, appends the window's output to a temporary file that replaces its target at the end,
and releases what no later operator claims. Memory follows the window; a join's right input is read
whole. Stats carry the prediction and the actual accounting side by side."""

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quail.atomic import check_writable, same_file, write_text_atomically
from quail.cost.observed import SelectivityStore
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.pipeline.compute import compute, predict, predict_escalated
from quail.pipeline.config import Pipeline
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS, OutputSink, TableSource
from quail.pipeline.windows import Window, WindowDone, drive
from quail.pipeline.tables import text_column
from quail.planner.plan import Plan
from quail.planner.predict import Prediction
from quail.planner.specs import OperatorSpec
from quail.reuse import Reuse
from quail.runtime import runtime_of
from quail.session import Session


@dataclass
class OperatorRun:
    spec: OperatorSpec
    rows_out: int
    stats: Stats
    predicted: Prediction


class Runner:
    def __init__(self, pipeline: Pipeline, on_null: str = "fail", truncate: bool = False,
                 window_rows: int = DEFAULT_WINDOW_ROWS):
        self.pipeline = pipeline
        self.on_null = on_null
        self.truncate = truncate
        self.window_rows = window_rows
        self.outputs: dict[str, str] = {}  # operator -> the Parquet file later operators read

    def source(self, name: str) -> TableSource:
        if name in self.pipeline.tables:
            return TableSource(self.pipeline.tables[name])
        return TableSource(self.outputs[name], f"operator {name!r}")

    def check_inputs(self) -> None:
        """Checks every table input's file and text column before the model loads; the rows are
        checked as they stream, and an error names the row."""
        for spec in self.pipeline.specs:
            for name, column in zip(spec.inputs, spec.columns):
                if name in self.pipeline.tables:
                    source = self.source(name)
                    text_column(source.schema().empty_table(), column, source.name, self.on_null)

    def check_outputs(self, output_word: str = "output", stats_word: str = "stats") -> None:
        """Refuses, before the model loads, an output or stats file that could not be written, an
        output that is not Parquet, and any output or stats file that is one of the inputs or that
        another output or stats file of the run also names."""
        claimed = {Path(p).resolve(): None for p in self.pipeline.tables.values()}  # None: an input
        for spec in self.pipeline.specs:
            where = f"operator {spec.name!r}: " if len(self.pipeline.specs) > 1 else ""
            files = [(output_word, spec.output), (stats_word, self.pipeline.stats.get(spec.name))]
            if spec.output is not None and Path(spec.output).suffix.lower() != ".parquet":
                raise QuailError(f"{where}{output_word} {spec.output}: outputs are .parquet files")
            for word, path in files:
                if path is None:
                    continue
                for p, what in claimed.items():
                    if same_file(path, p):
                        raise QuailError(f"{where}{word} {path} is one of the inputs: it would be overwritten while "
                                         f"it is read" if what is None else
                                         f"{where}{word} {path} is also {what}: one would overwrite the other")
                check_writable(path, f"{where}{word}")
                claimed[Path(path).resolve()] = f"{where}{word} {path}"

    def predict(self, session: Session, plan: Plan) -> dict[str, Prediction]:
        """Each operator's predicted accounting over the rows of its source table, window by window
        (a join's output, not known before it runs, predicts nothing)."""
        specs = {s.name: s for s in plan.specs}

        def table_of(name: str) -> str | None:
            while name in specs and kind_of(specs[name].kind).keeps_rows:
                name = specs[name].inputs[0]
            return name if name in self.pipeline.tables else None

        def texts(name: str | None, column: str):
            if name is None:
                return
            source = self.source(name)
            for first, window in source.windows(self.window_rows):
                yield text_column(window, column, source.name, self.on_null, first)[0]

        out = {}
        for s in plan.specs:
            many = kind_of(s.kind).arity > 1
            partners = [t for part in texts(table_of(s.inputs[1]), s.columns[1]) for t in part] if many else []
            total = Prediction()
            for part in texts(table_of(s.inputs[0]), s.columns[0]):
                total.add(predict(session, plan, s, session.layout.documents(part), partners, truncate=self.truncate))
            out[s.name] = total
        return out

    def run(self, session: Session, plan: Plan, reuse: Reuse, progress: Callable) -> list[OperatorRun]:
        predicted = self.predict(session, plan)
        runs = []
        with tempfile.TemporaryDirectory(prefix="quail-pipeline-") as scratch:
            for spec in plan.specs:
                target = spec.output or os.path.join(scratch, f"{spec.name}.parquet")
                rows_out, stats, escalated = self._operator(session, spec, plan, reuse, progress, target)
                self.outputs[spec.name] = target
                session.engine.consumed(spec.name)
                predicted[spec.name].add(escalated)
                run = OperatorRun(spec, rows_out, stats, predicted[spec.name])
                if spec.name in self.pipeline.stats:
                    write_stats(self.pipeline.stats[spec.name], run, session, plan)
                runs.append(run)
        return runs

    def _operator(self, session: Session, spec: OperatorSpec, plan: Plan, reuse: Reuse, progress: Callable,
                  target: str) -> tuple[int, Stats, Prediction]:
        """The rows written, the accounting, and the predicted share of a cascade's larger model,
        known once each window's answers are."""
        first, *others = (self.source(name) for name in spec.inputs)
        bar = progress(first.num_rows(), spec.name)
        seen = [0, 0]  # rows asked, rows passed: a filter's observed selectivity

        def step(window: Window) -> WindowDone:
            answers, stats = compute(session, window.spec, plan[spec.name], reuse, window.inputs, self.truncate, bar)
            escalated = predict_escalated(session, plan, window.spec, answers, window.inputs[0][0], self.truncate)
            if (observed := runtime_of(spec.kind).observed(window.spec, answers)) is not None:
                seen[0], seen[1] = seen[0] + observed[0], seen[1] + observed[1]
            table, counted = window.shaped(answers, first.name)
            sink.write(table)
            return WindowDone(table.num_rows, counted, stats, escalated)

        with OutputSink(target) as sink:
            done = drive(spec, first.windows(self.window_rows), first.name,
                         [(s.read_all(), s.name) for s in others], step, self.on_null)
        if seen[0]:
            SelectivityStore().record(spec.fingerprint(), *seen)
        return sink.rows, done.stats, done.predicted


def write_stats(path: str, run: OperatorRun, session: Session, plan: Plan) -> None:
    doc = {"operator": run.spec.name, "command": run.spec.kind, "model": session.loaded.name,
           "plan_hash": plan.hash, "rows_out": run.rows_out} | run.stats.to_dict()
    doc["predicted"] = run.predicted.rounded()
    write_text_atomically(path, json.dumps(doc, indent=2))
