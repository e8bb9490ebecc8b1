"""LLM filter, classify and join operators. Each reads its first input a window of rows at a time,
sends each window's documents and its plan entry to the worker as one job, stages the window's
output on disk, and once every window is in writes its output atomically from the staged windows;
a retry after a crash resumes from the first window not staged. XCom gets only a small manifest:
where the output is, row counts and the token accounting."""

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from airflow.configuration import conf
from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator

from airflow_quail.hooks.quail import QuailHook
from airflow_quail.io import check_target, iter_source, read_source, source_rows, write_target
from airflow_quail.lineage import operator_lineage
from airflow_quail.staging import WindowStage
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.kinds import kind_of
from quail.kinds.base import cascade_setting
from quail.ops.prompts import DEFAULT_QUESTION
from quail.pipeline.explain import describe_run
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS
from quail.pipeline.tables import text_column
from quail.planner.plan import OperatorPlan, Plan, plan
from quail.planner.predict import Prediction
from quail.planner.specs import OperatorSpec
from quail.reuse import Reuse
from quail.worker.client import WorkerClient
from quail.worker.jobs import Identity, Submission, Window
from quail.worker.protocol import documents_digest, submission_digest


@dataclass
class _TaskRun:
    """What one try of a task works with."""

    identity: Identity
    stage: WindowStage
    client: WorkerClient
    plan: Plan  # the DAG's plan (or the operator's alone), for the predicted accounting
    op: OperatorPlan
    reuse: Reuse
    total_rows: int | None  # None: not known before reading it all


class _LLMOperator(BaseOperator):
    """What the three operators share.

    :param target: where the output goes: a .parquet path or URI, or sql://CONN_ID/TABLE (templated)
    :param quail_conn_id: the `quail` connection naming the worker; with no host, or no
        quail_default connection, a local worker started on demand
    :param reuse: KV reuse on (rewind, prefix sharing, retention, borrowing); off computes every
        prompt from scratch, for checks. Answers do not depend on it.
    :param deferrable: wait for each window's job in the triggerer instead of a worker slot; by
        default `[operators] default_deferrable`
    :param quail_plan: the operator's plan entry, set by the provider's planning policy (templated)
    :param window_rows: rows of the first input read, computed and staged at a time
    :param calibration: "contextual" divides out each question's answer on content-free documents
        (Zhao et al., 2021); "none" keeps the model's raw probabilities; "auto", the default, is the
        one measured best for the worker's model (contextual for qwen2.5-coder-1.5b)

    The target is an outlet Asset and the inputs inlets (airflow_quail.lineage.asset_uri) unless
    `outlets`/`inlets` are given.
    """

    ui_color = "#f2e6c9"

    def __init__(self, *, target: str, quail_conn_id: str = QuailHook.default_conn_name, reuse: bool = True,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 quail_plan: str = "", window_rows: int = DEFAULT_WINDOW_ROWS, calibration: str = "auto",
                 **kwargs):
        super().__init__(**kwargs)
        self.target = target
        self.deferrable = deferrable
        self.quail_conn_id = quail_conn_id
        self.reuse = reuse
        self.quail_plan = quail_plan  # set by airflow_quail.planning.plan_quail_dag (the policy); shown in the UI
        self.window_rows = window_rows
        self.calibration = calibration

    def inputs(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def sources(self) -> list[str]:
        return [source for source, _ in self.inputs()]

    def _declare_assets(self, given: dict) -> None:
        """The target as an outlet Asset and the inputs as inlets, named as OpenLineage names them,
        unless the DAG passes its own `outlets`/`inlets`; a templated path (known only at run time)
        or a SQL query has none."""
        from airflow.sdk import Asset

        from airflow_quail.lineage import asset_uri

        if "outlets" not in given and (uri := asset_uri(self.target)):
            self.outlets = [Asset(uri)]
        if "inlets" not in given:
            self.inlets = [Asset(uri) for uri in map(asset_uri, self.sources()) if uri]

    def spec(self) -> OperatorSpec:
        raise NotImplementedError

    def plan_entry(self) -> tuple[Plan, OperatorPlan]:
        """The DAG's plan (or the operator's alone, outside a DAG) and the operator's entry: the one
        the policy (or plan_quail_dag) stored, else the plan's."""
        whole = None
        if self.has_dag():
            from airflow_quail.planning import dag_plan

            whole = dag_plan(self.dag)
        if whole is None or self.task_id not in {s.name for s in whole.specs}:
            whole = plan([self.spec()])  # outside a DAG, or mapped over something it cannot plan with
        if self.quail_plan:
            return whole, OperatorPlan.from_dict(json.loads(self.quail_plan)["operator"])
        return whole, whole[self.task_id]

    def _windows(self):
        """Per window of the first input: (number, its first row, the input tables, the documents,
        whether it is the last). The other inputs (a join's right side) are read whole."""
        if self.window_rows < 1:
            raise QuailError(f"window_rows must be at least 1, got {self.window_rows}")
        (source, column), *others = self.inputs()
        whole = [read_source(s) for s, _ in others]
        fixed = [text_column(t, c, s, "fail") for t, (s, c) in zip(whole, others)]
        windows = iter_source(source, self.window_rows)
        ahead, k = next(windows), 0
        while ahead is not None:
            (offset, table), ahead = ahead, next(windows, None)
            yield k, offset, [table] + whole, [text_column(table, column, source, "fail", offset)] + fixed, ahead is None
            k += 1

    def execute(self, context):
        return self._run(context, None)

    def execute_complete(self, context, event: dict, window: int = 0):
        """Resumes after the trigger saw window `window`'s job end: stages it and goes on."""
        return self._run(context, (window, event))

    def _run(self, context, ended: tuple[int, dict] | None) -> dict:
        """Computes the windows not staged yet, one job each, then writes the output from the staged
        windows. `ended`: a window whose job a trigger saw end, with its status."""
        try:
            where = check_target(self.target, self.sources())  # before any work
            ti = context["ti"]
            identity = Identity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)
            hook = QuailHook(self.quail_conn_id)
            # a window a trigger saw end is fetched from the worker that ran it; else the run's worker
            client = hook.client_at(ended[1]["worker"]) if ended and ended[1].get("worker") else \
                hook.get_conn(run=f"{ti.dag_id}\x1f{ti.run_id}")
            run = _TaskRun(identity, WindowStage(self.target, where if isinstance(where, Path) else None, identity),
                           client, *self.plan_entry(),
                           Reuse() if self.reuse else Reuse.none(), source_rows(self.sources()[0]))
            spec, started, done, records = self.spec(), time.monotonic(), [], []
            for k, offset, tables, docs, last in self._windows():
                counted = sum(r["counted"] for r in records)
                part = spec if spec.limit is None else replace(spec, limit=spec.limit - counted)
                documents = documents_digest(docs)
                digest = submission_digest(Submission(identity, part, run.op, run.reuse, plan=run.plan), documents)
                record = run.stage.done(k, digest)
                if record is not None:
                    self.log.info("window %d (rows from %d) was staged by an earlier try", k, offset)
                elif ended is not None and ended[0] == k:
                    if ended[1]["documents"] != documents:
                        raise QuailError(f"the input of {self.task_id} changed while its job ran; clear the task "
                                         f"to compute the new input")
                    record = self._stage(run, ended[1], k, digest, part, offset, tables)
                else:
                    status = self._compute(run, k, part, docs, Window(offset, run.total_rows, last))
                    record = self._stage(run, status, k, digest, part, offset, tables)
                done.append((k, digest))
                records.append(record)
                self._log_window(records, run.total_rows, started)
                if spec.limit is not None and counted + record["counted"] >= spec.limit:
                    break
            write_target(run.stage.tables(done), self.target)
            run.stage.clear()
        except QuailError as e:
            raise AirflowException(str(e)) from None
        stats, predicted = Stats.from_dict(records[0]["stats"]), Prediction()
        for r in records[1:]:
            stats.merge(Stats.from_dict(r["stats"]))
        for r in records:
            predicted.add(Prediction.from_dict(r["predicted"]))
        self.rows_out, rows_in = sum(r["rows"] for r in records), sum(r["rows_in"] for r in records)
        # the CLI's closing summary, in the task log where Airflow users look
        self.log.info("%s", describe_run(self.task_id, stats, predicted, self.rows_out, rows_in, self.target))
        return {"target": self.target, "rows_in": rows_in, "rows_out": self.rows_out,
                "windows": len(records), "worker": run.client.location, "stats": stats.to_dict(), "predicted": predicted.rounded(),
                # plain JSON (tuples as lists), so that XCom stores no serialized Python types
                "plan": json.loads(json.dumps({"plan_hash": run.plan.hash, "operator": asdict(run.op)}))}

    def _compute(self, run: "_TaskRun", k: int, part: OperatorSpec, docs, window: Window) -> dict:
        """Window k's job, submitted (or re-attached to) and waited for here or, deferrable, by the triggerer."""
        job, attached = run.client.submit(replace(run.identity, window=k), part, run.op, run.reuse, docs, window,
                                          run.plan)
        self.job_id, self.worker_location = job, run.client.location
        self.log.info("Quail job %s %s for window %d (rows from %d)", job, "re-attached" if attached else "submitted",
                      k, window.first_row)
        if self.deferrable:
            from airflow_quail.triggers.quail import QuailJobTrigger

            self.defer(trigger=QuailJobTrigger(job, self.quail_conn_id, location=run.client.location),
                       method_name="execute_complete",
                       kwargs={"window": k})
        return run.client.wait(job, on_progress=self._progress_log())

    def _stage(self, run: "_TaskRun", status: dict, k: int, digest: str, part: OperatorSpec, offset: int,
               tables: list) -> dict:
        if status["state"] != "done":
            raise AirflowException(f"Quail job {status['job']} {status['state']}: {status['error']}")
        kind = kind_of(part.kind)
        answers = run.client.fetch(status["job"])
        table = kind.shape(part, kind.in_window(answers, offset), tables, self.sources()[0])
        record = {"rows": table.num_rows, "rows_in": tables[0].num_rows, "counted": kind.counted_rows(answers),
                  "stats": status["stats"], "predicted": status["predicted"]}
        run.stage.put(k, digest, table, record)
        return record

    def _log_window(self, records: list[dict], total: int | None, started: float) -> None:
        done = sum(r["rows_in"] for r in records)
        if total:
            elapsed = time.monotonic() - started
            eta = elapsed / done * (total - done) if done else 0.0
            self.log.info("%d of %d rows (%.0f%%), %d window(s); about %.0f s left", done, total,
                          100 * done / total, len(records), eta)
        else:
            self.log.info("%d rows, %d window(s)", done, len(records))

    def _progress_log(self, every: float = 5.0):
        """Logs a job's progress when its state changes, and otherwise at most every `every` seconds."""
        last = {"state": None, "at": 0.0}

        def log(s: dict) -> None:
            now = time.monotonic()
            if s["state"] != last["state"] or now - last["at"] >= every:
                self.log.info("%s: %d/%d rows, %.0f tok/s", s["state"], s["rows_done"], s["rows"],
                              s["tokens_per_second"])
                last.update(state=s["state"], at=now)

        return log

    def get_openlineage_facets_on_start(self):
        return operator_lineage(self.sources(), self.target)

    def get_openlineage_facets_on_complete(self, task_instance):
        return operator_lineage(self.sources(), self.target, getattr(self, "rows_out", None))

    def on_kill(self) -> None:
        """Cancels the job (Airflow stopped the task: a timeout, or marked failed or success). A
        running job stops after its rows in flight; a retry then computes it anew. A task process
        that dies without this call leaves its job to finish, and the retry re-attaches to it."""
        job = getattr(self, "job_id", None)
        if job:
            QuailHook(self.quail_conn_id).client_at(self.worker_location).cancel(job)


class LLMFilterOperator(_LLMOperator):
    """Keeps the rows of `source` for which every predicate holds (chain mode asks a predicate only
    of the rows that passed the ones before it).

    :param source: a .parquet or .csv path or URI, sql://CONN_ID/TABLE or sql://CONN_ID?query=SELECT ...
        (templated)
    :param text_column: the column whose text the predicates are asked of
    :param predicates: yes/no questions (templated)
    :param limit: the first N passing rows, in input order; computing stops after them
    :param threshold: P(yes) at or above which a predicate holds
    :param cascade: ``{"model": NAME, "band": [LOW, HIGH]}``: the rows whose P(yes) lies inside the band
        are answered again by this larger model, in the same worker (``quail band`` chooses the band)
    """

    template_fields: Sequence[str] = ("source", "target", "predicates", "quail_plan")
    template_fields_renderers = {"quail_plan": "json", "predicates": "json"}

    def __init__(self, *, source: str, text_column: str, predicates: list[str], limit: int | None = None,
                 threshold: float = 0.5, cascade: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.source, self.text_column, self.predicates = source, text_column, predicates
        self.limit, self.threshold = limit, threshold
        try:
            self.cascade = cascade_setting({"cascade": cascade}, f"task {self.task_id!r}")
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self._declare_assets(kwargs)

    def inputs(self):
        return [(self.source, self.text_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "filter", (self.source,), (self.text_column,), tuple(self.predicates),
                            threshold=self.threshold, limit=self.limit, calibration=self.calibration,
                            cascade=self.cascade, output=self.target)


class LLMClassifyOperator(_LLMOperator):
    """Labels each row of `source` with one of `labels`, adding `label` and `p_<label>` columns.

    :param source: as for LLMFilterOperator (templated)
    :param text_column: the column whose text is classified
    :param labels: the labels, at least two (templated)
    :param question: the question the labels answer (templated)
    """

    template_fields: Sequence[str] = ("source", "target", "labels", "question", "quail_plan")
    template_fields_renderers = {"quail_plan": "json", "labels": "json"}

    def __init__(self, *, source: str, text_column: str, labels: list[str], question: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.source, self.text_column, self.labels, self.question = source, text_column, labels, question
        self._declare_assets(kwargs)

    def inputs(self):
        return [(self.source, self.text_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "classify", (self.source,), (self.text_column,),
                            (self.question or DEFAULT_QUESTION,), tuple(self.labels), calibration=self.calibration,
                            output=self.target)


class LLMJoinOperator(_LLMOperator):
    """The pairs of `left` and `right` rows that satisfy `condition`, with `p_yes`; columns are
    prefixed left_ and right_. Chain mode reads each left row once and rewinds past each right row.

    :param left: the anchors, read a window at a time (templated)
    :param right: the partners, read whole (templated)
    :param left_column: the left rows' text column
    :param right_column: the right rows' text column
    :param right_name: what the prompt calls a right row ("headline"); by default the right column's
        name in words. The left row is always "the document", so that its KV is shared with the
        filters and classifications of the same table.
    :param condition: what a matching pair satisfies, in those terms: "The headline is the title of
        the document." (templated)
    :param threshold: P(yes) at or above which a pair matches
    :param top_k: each left row's K right rows of highest P(yes) (at least the threshold); every
        pair gets its `rank` within its left row
    """

    template_fields: Sequence[str] = ("left", "right", "target", "condition", "quail_plan")
    template_fields_renderers = {"quail_plan": "json"}

    def __init__(self, *, left: str, right: str, left_column: str, right_column: str, condition: str,
                 right_name: str | None = None, threshold: float = 0.5, top_k: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.left, self.right, self.left_column, self.right_column = left, right, left_column, right_column
        self.condition, self.right_name, self.threshold, self.top_k = condition, right_name, threshold, top_k
        self._declare_assets(kwargs)

    def inputs(self):
        return [(self.left, self.left_column), (self.right, self.right_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "join", (self.left, self.right), (self.left_column, self.right_column),
                            (self.condition,), threshold=self.threshold, top_k=self.top_k,
                            right_name=self.right_name, calibration=self.calibration, output=self.target)

