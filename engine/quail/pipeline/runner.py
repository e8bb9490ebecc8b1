"""Runs a planned pipeline in one engine session, a window of rows at a time.

Operators run in chains: a consumer whose first input is an earlier operator's output, read on
the same text column, runs on each window right after its producer has done that window, while
the window's KV is in the arena (chains()). So retention between them does not depend on the
table's size, and memory follows one window for the whole chain; a chain's windows are cut where
the documents its head will compute fill half the retention pool (rows whose answers are stored
take no room). Each operator appends its window's output to
a temporary file that replaces its target at the end, and what no later operator claims is
released. A join's right input is read whole. Stats carry the prediction and the actual
accounting side by side."""

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from quail.atomic import INPUT, Publication, check_output, write_text_atomically
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.pipeline.config import Pipeline
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS, OutputSink, TableSource
from quail.pipeline.tables import text_column
from quail.pipeline.windows import Window, WindowDone, Windowed, check_budget, drive
from quail.planner.plan import Plan
from quail.planner.predict import Prediction
from quail.reuse import Reuse
from quail.runtime.compute import compute_window, parts, predict
from quail.runtime.observed import Observed
from quail.runtime.outputs import clashes
from quail.session import Session
from quail.specs import OperatorSpec


@dataclass
class OperatorRun:
    spec: OperatorSpec
    rows_out: int
    stats: Stats
    predicted: Prediction


class Runner:
    def __init__(self, pipeline: Pipeline, on_null: str = "fail", truncate: bool = False,
                 window_rows: int = DEFAULT_WINDOW_ROWS, max_tokens: int | None = None):
        self.pipeline = pipeline
        # each operator's budget: its own max_tokens, else the run's
        self.budgets = {s.name: pipeline.budgets.get(s.name, max_tokens) for s in pipeline.specs}
        self.on_null = on_null
        self.truncate = truncate
        self.window_rows = window_rows
        self.outputs: dict[str, str] = {}  # operator -> the Parquet file later operators read
        self.fitted: dict[str, OperatorSpec] = {}  # operator -> the head of its chain, where cut to the pool

    def source(self, name: str) -> TableSource:
        if name in self.pipeline.tables:
            return TableSource(self.pipeline.tables[name])
        return TableSource(self.outputs[name], f"operator {name!r}")

    def check_inputs(self) -> None:
        """Checks every table input's file and text column, and that an operator's added columns are
        not among its columns, before the model loads; the rows are checked as they stream, and an
        error names the row."""
        for spec in self.pipeline.specs:
            for name, column in zip(spec.inputs, spec.columns):
                if name in self.pipeline.tables:
                    source = self.source(name)
                    table = source.schema().empty_table()
                    text_column(table, column, source.name, self.on_null)
                    if clash := clashes(kind_of(spec.kind).columns_added(spec), table.column_names):
                        raise QuailError(f"operator {spec.name!r}: {source.name} already has the column(s) "
                                         f"{clash}, which its output adds; rename them")

    def check_outputs(self, output_word: str = "output", stats_word: str = "stats", review_word: str = "review_output",
                      kept: dict[str, str] | None = None) -> None:
        """Refuses, before the model loads, an output or stats file that could not be written, an
        output that is not Parquet, and any output or stats file that is one of the inputs, one of
        the other files the run reads (`kept`: path -> what it is, such as the model's files and the
        pipeline file), or that another output or stats file of the run also names."""
        claimed = {Path(p).resolve(): what for p, what in (kept or {}).items()}
        claimed |= {Path(p).resolve(): INPUT for p in self.pipeline.tables.values()}
        for spec in self.pipeline.specs:
            where = f"operator {spec.name!r}: " if len(self.pipeline.specs) > 1 else ""
            files = [(output_word, spec.output), (stats_word, self.pipeline.stats.get(spec.name)),
                     (review_word, self.pipeline.reviews.get(spec.name))]
            for word, path in ((output_word, spec.output), (review_word, self.pipeline.reviews.get(spec.name))):
                if path is not None and Path(path).suffix.lower() != ".parquet":
                    raise QuailError(f"{where}{word} {path}: outputs are .parquet files")
            for word, path in files:
                if path is None:
                    continue
                check_output(path, f"{where}{word}", claimed)
                claimed[Path(path).resolve()] = f"also {where}{word} {path}: one would overwrite the other"

    def _table_of(self, plan: Plan, name: str) -> str | None:
        """The table whose rows reach operator or table `name` through filters and classifies; none
        through a join."""
        specs = {s.name: s for s in plan.specs}
        while name in specs and kind_of(specs[name].kind).keeps_rows:
            name = specs[name].inputs[0]
        return name if name in self.pipeline.tables else None

    def _texts(self, name: str | None, column: str, rows: int = DEFAULT_WINDOW_ROWS) -> Iterator[list[str]]:
        if name is None:
            return
        source = self.source(name)
        for first, window in source.windows(rows):
            yield text_column(window, column, source.name, self.on_null, first)[0]

    def _partners(self, plan: Plan) -> dict[str, list[str]]:
        """Each join's right-side texts, from the table its rows come from."""
        return {s.name: [t for texts in self._texts(self._table_of(plan, s.inputs[1]), s.columns[1]) for t in texts]
                for s in plan.specs if kind_of(s.kind).arity > 1}

    def predict(self, session: Session, plan: Plan, specs: list[OperatorSpec] | None = None) -> dict[str, Prediction]:
        """Each operator's (of `specs`, by default all) predicted accounting over the rows of its
        source table, window by window (a join's output, not known before it runs, predicts
        nothing). Refuses first, before any operator runs, a question that leaves documents no room
        in the context."""
        for s in plan.specs:
            kind_of(s.kind).check_room(session.layout, s, session.context, f"operator {s.name!r}")
        chosen = list(plan.specs) if specs is None else specs
        partners = self._partners(plan)
        readers: dict[tuple, list[OperatorSpec]] = {}  # the operators reading one column of a table, by window
        for s in chosen:
            key = (self._table_of(plan, s.inputs[0]), s.columns[0], self.fitted.get(s.name))
            readers.setdefault(key, []).append(s)
        out = {s.name: Prediction() for s in chosen}
        for (table, column, head), group in readers.items():
            if head is None:
                windows = self._texts(table, column, self.window_rows)
            else:  # a chain's windows, cut as the run will cut them
                source = self.source(table)
                windows = (text_column(w, column, source.name, self.on_null, first)[0]
                           for first, w in self.windows(session, head))
            for k, texts in enumerate(windows):
                _predict_window(session, plan, group, texts, k, partners, self.truncate, out)
        return out

    def plan_windows(self, session: Session, plan: Plan, reuse: Reuse) -> list[list[OperatorSpec]]:
        """The chains. A chain over a table whose consumers reuse retained KV has its windows cut to
        the retention pool (`windows`)."""
        groups = window_groups(plan.specs, set(self.pipeline.tables))
        for group in groups:
            if len(group) > 1 and reuse.retention and group[0].inputs[0] in self.pipeline.tables:
                self.fitted.update((s.name, group[0]) for s in group)
        return groups

    def windows(self, session: Session, head: OperatorSpec) -> Iterator[tuple[int, pa.Table]]:
        """(first row, table) for the windows of a chain's head: --window-rows at a time, each cut,
        where the chain is fitted, into parts whose documents the head will compute fill half the
        retention pool (compute.parts), so that its consumers find them retained at any table size
        while memory follows one window; rows answered from the answer store take no room."""
        source = self.source(head.inputs[0])
        for first, table in source.windows(self.window_rows):
            if self.fitted.get(head.name) is not head:
                yield first, table
                continue
            texts, rows = text_column(table, head.columns[0], source.name, self.on_null, first)
            cuts = parts(session, head, session.layout.documents(texts))
            for lo, hi in cuts:
                start = 0 if lo == 0 else rows[lo] - first
                end = table.num_rows if hi == len(rows) else rows[hi] - first
                yield first + start, table.slice(start, end - start)

    def run(self, session: Session, plan: Plan, reuse: Reuse, progress: Callable) -> list[OperatorRun]:
        groups = self.plan_windows(session, plan, reuse)
        # Under a budget every operator is predicted before anything runs, so that one over it is
        # refused. Otherwise a chain over a table predicts each window just before computing it,
        # so that the window is read and tokenized once (a rerun's time is mostly that).
        budgeted = any(b is not None for b in self.budgets.values())
        as_run = set() if budgeted else {g[0].name for g in groups if g[0].inputs[0] in self.pipeline.tables}
        predicted = self.predict(session, plan, [s for g in groups if g[0].name not in as_run for s in g])
        for name, p in predicted.items():
            check_budget(name, p, self.budgets.get(name), None if name in self.pipeline.budgets else "max_tokens")
        partners = self._partners(plan) if as_run else {}
        runs, publication = [], Publication()
        with tempfile.TemporaryDirectory(prefix="quail-pipeline-") as scratch, _published(publication):
            for group in groups:
                targets = {s.name: s.output or os.path.join(scratch, f"{s.name}.parquet") for s in group}
                predict_window: Callable[[Window], None] | None = None
                if group[0].name in as_run:
                    predicted.update({s.name: Prediction() for s in group})

                    def predict_group(window: Window, group: list[OperatorSpec] = group) -> None:
                        _predict_window(session, plan, group, window.inputs[0][0], window.k, partners, self.truncate,
                                        predicted)
                    predict_window = predict_group
                done = self._pipeline_window(session, group, plan, reuse, progress, targets, publication,
                                             predict_window)
                for spec in group:
                    session.engine.consumed(spec.name)
                    rows_out, stats, escalated = done[spec.name]
                    predicted[spec.name].add(escalated)
                    run = OperatorRun(spec, rows_out, stats, predicted[spec.name])
                    if spec.name in self.pipeline.stats:
                        write_stats(self.pipeline.stats[spec.name], run, session, plan, publication)
                    runs.append(run)
        order = [s.name for s in plan.specs]
        return sorted(runs, key=lambda r: order.index(r.spec.name))

    def _pipeline_window(self, session: Session, group: list[OperatorSpec], plan: Plan, reuse: Reuse,
                         progress: Callable, targets: dict[str, str], publication: Publication,
                         predict_window: Callable[[Window], None] | None = None) \
            -> dict[str, tuple[int, Stats, Prediction]]:
        """Each operator's rows written, accounting, and predicted share of a cascade's larger model
        (known once each window's answers are). The head reads its table in windows; each consumer
        is fed its producer's output window as soon as it is written. `predict_window`, if given,
        sees each of the head's windows before it is computed. Outputs and reviews replace their
        targets when the run's publication is published; later chains read them where they lie."""
        head, consumers = group[0], group[1:]
        first, *others = (self.source(name) for name in head.inputs)
        fed = {c.name: Windowed(c, f"operator {c.inputs[0]!r}", [(s.read_all(), s.name) for s in
                                                                  map(self.source, c.inputs[1:])], self.on_null,
                                self.budgets.get(c.name))
               for c in consumers}
        bars = {s.name: progress(first.num_rows() if s is head else None, s.name) for s in group}
        observed = {s.name: Observed(s, session.loaded.tokenizer.encode_batch) for s in group}

        def run_window(spec: OperatorSpec, window: Window, sink: OutputSink) -> tuple[WindowDone, pa.Table]:
            done = compute_window(session, plan, window.spec, plan[spec.name], reuse, window.inputs, self.truncate,
                                  bars[spec.name])
            observed[spec.name].add(window.spec, done.results)
            source = first.name if spec is head else fed[spec.name].source
            table, counted = window.shaped(done.results, source)
            if spec.name in reviews:
                reviews[spec.name].write(window.review(done.results, source))
            return WindowDone(table.num_rows, counted, done.stats, done.escalated), sink.write(table)

        with ExitStack() as stack:
            sinks = {s.name: stack.enter_context(OutputSink(targets[s.name], publication if s.output else None))
                     for s in group}
            reviews = {s.name: stack.enter_context(OutputSink(self.pipeline.reviews[s.name], publication))
                       for s in group if s.name in self.pipeline.reviews}

            def step(window: Window) -> WindowDone:
                if predict_window is not None:
                    predict_window(window)
                done, written = run_window(head, window, sinks[head.name])
                outputs = {head.name: written}
                for c in consumers:
                    op, table = fed[c.name], outputs[c.inputs[0]]
                    # nothing to ask of an empty window, unless the consumer's output needs its schema yet
                    if op.satisfied or (table is None or not table.num_rows) and not (window.last and op.k == 0):
                        schema = sinks[c.name].schema
                        outputs[c.name] = schema.empty_table() if schema is not None else None
                        continue
                    w = op.window(table, window.last)
                    c_done, outputs[c.name] = run_window(c, w, sinks[c.name])
                    op.done(w, c_done)
                return done

            totals = {head.name: drive(head, self.windows(session, head),
                                       first.name, [(s.read_all(), s.name) for s in others], step, self.on_null,
                                       max_tokens=self.budgets.get(head.name))}
            totals |= {c.name: fed[c.name].finish() for c in consumers}
        for spec in group:
            self.outputs[spec.name] = str(sinks[spec.name].written)
            observed[spec.name].record()
        return {s.name: (sinks[s.name].rows, totals[s.name].stats, totals[s.name].predicted) for s in group}


def _predict_window(session: Session, plan: Plan, specs: list[OperatorSpec], texts: list[str], k: int,
                    partners: dict[str, list[str]], truncate: bool, out: dict[str, Prediction]) -> None:
    """Adds window `k`'s prediction for each of `specs`, the operators that read its `texts`."""
    docs = session.layout.documents(texts)  # once for all of them
    for s in specs:
        out[s.name].add(predict(session, plan, s, docs, partners.get(s.name, []), truncate=truncate, probed=k > 0))


def window_groups(specs: tuple[OperatorSpec, ...], tables: set[str]) -> list[list[OperatorSpec]]:
    """The operators grouped into chains, in order. An operator joins the chain of its first input
    when that input is an operator of the chain that keeps its rows (a filter or a classify, not a
    join), read on the same text column, and its other inputs (a join's right side) are tables or
    operators of chains that run before."""
    groups: list[list[OperatorSpec]] = []
    home: dict[str, int] = {}  # operator -> its chain
    by_name = {s.name: s for s in specs}
    for s in specs:
        producer = by_name.get(s.inputs[0])
        g = home.get(s.inputs[0])
        if (g is not None and producer is not None and kind_of(producer.kind).keeps_rows
                and producer.columns[0] == s.columns[0]
                and all(i in tables or home.get(i, g) < g for i in s.inputs[1:])):
            groups[g].append(s)
        else:
            g = len(groups)
            groups.append([s])
        home[s.name] = g
    return groups


def store_use(session: Session) -> dict | None:
    """Where the run kept its answers, and whether it could: a refused store is said, never silent."""
    store = session.store
    return None if store is None else {"path": str(store.path), "in_use": store.unused is None, "why_not": store.unused}


def write_stats(path: str, run: OperatorRun, session: Session, plan: Plan, publication: Publication) -> None:
    model = session.engine.model
    doc = {"operator": run.spec.name, "command": run.spec.kind, "model": session.loaded.name,
           "dtype": str(model.dtype).removeprefix("torch."), "dtype_why": session.loaded.dtype_why,
           "attention": model.attention_name, "attention_why": model.attention_why,
           "plan_hash": plan.hash, "rows_out": run.rows_out, "answer_store": store_use(session)} | run.stats.to_dict()
    doc["predicted"] = run.predicted.rounded()
    write_text_atomically(path, json.dumps(doc, indent=2), publication)


@contextmanager
def _published(publication: Publication) -> Iterator[None]:
    """A run's outputs, stats and reviews change together: all when it ends, none when it fails."""
    try:
        yield
    except BaseException:
        publication.discard()
        raise
    publication.publish()
