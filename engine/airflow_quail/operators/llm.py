"""LLM filter, classify and join operators. Each reads its input, sends the documents and its plan
entry to the worker, waits for the answers, and writes its output atomically. XCom gets only a
small manifest: where the output is, row counts and the token accounting."""

import json
import time
from collections.abc import Sequence
from dataclasses import asdict

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator

from airflow_quail.hooks.quail import QuailHook
from airflow_quail.io import read_source, target_location, write_target
from airflow_quail.lineage import operator_lineage
from quail.errors import QuailError
from quail.executor.engine import Reuse
from quail.ops.prompts import DEFAULT_QUESTION
from quail.pipeline.outputs import shape
from quail.pipeline.tables import text_column
from quail.planner.plan import OperatorPlan, plan
from quail.planner.specs import OperatorSpec
from quail.worker.jobs import Identity
from quail.worker.protocol import documents_digest


class _LLMOperator(BaseOperator):
    ui_color = "#f2e6c9"

    def __init__(self, *, target: str, quail_conn_id: str = QuailHook.default_conn_name, reuse: bool = True,
                 deferrable: bool = False, quail_plan: str = "", **kwargs):
        super().__init__(**kwargs)
        self.target = target
        self.deferrable = deferrable
        self.quail_conn_id = quail_conn_id
        self.reuse = reuse
        self.quail_plan = quail_plan  # set by airflow_quail.planning.plan_quail_dag; shown in the UI

    def inputs(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def spec(self) -> OperatorSpec:
        raise NotImplementedError

    def plan_entry(self) -> OperatorPlan:
        if self.quail_plan:
            return OperatorPlan.from_dict(json.loads(self.quail_plan)["operator"])
        return plan([self.spec()])[self.task_id]

    def _read(self) -> tuple[list, list]:
        tables, docs = [], []
        for source, column in self.inputs():
            table = read_source(source)
            tables.append(table)
            docs.append(text_column(table, column, source, "fail"))
        return tables, docs

    def execute(self, context):
        try:
            target_location(self.target)
            tables, docs = self._read()
            ti = context["ti"]
            identity = Identity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)
            client = QuailHook(self.quail_conn_id).get_conn()
            reuse = Reuse() if self.reuse else Reuse.none()
            job, attached = client.submit(identity, self.spec(), self.plan_entry(), reuse, docs)
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self.job_id = job
        self.log.info("Quail job %s %s", job, "re-attached" if attached else "submitted")
        if self.deferrable:
            from airflow_quail.triggers.quail import QuailJobTrigger

            self.defer(trigger=QuailJobTrigger(job, self.quail_conn_id), method_name="execute_complete")
        status = client.wait(job, on_progress=self._progress_log())
        return self._finish(client, status, tables)

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

    def execute_complete(self, context, event: dict):
        """Resumes after the trigger saw the job end: fetch the answers and write the output, if the
        input still holds the documents the job computed on."""
        try:
            tables, docs = self._read()
            if documents_digest(docs) != event["documents"]:
                raise QuailError(f"the input of {self.task_id} changed while its job ran; clear the task to "
                                 f"compute the new input")
            return self._finish(QuailHook(self.quail_conn_id).get_conn(), event, tables)
        except QuailError as e:
            raise AirflowException(str(e)) from None

    def _finish(self, client, status: dict, tables: list) -> dict:
        if status["state"] != "done":
            raise AirflowException(f"Quail job {status['job']} {status['state']}: {status['error']}")
        try:
            table = shape(self.spec(), client.fetch(status["job"]), tables, self.inputs()[0][0])
            write_target(table, self.target)
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self.rows_out = table.num_rows
        return {"target": self.target, "rows_in": tables[0].num_rows, "rows_out": table.num_rows,
                "stats": status["stats"]}

    def get_openlineage_facets_on_start(self):
        return operator_lineage([source for source, _ in self.inputs()], self.target)

    def get_openlineage_facets_on_complete(self, task_instance):
        return operator_lineage([source for source, _ in self.inputs()], self.target, getattr(self, "rows_out", None))

    def on_kill(self) -> None:
        """Cancels the job (Airflow stopped the task: a timeout, or marked failed or success). A
        running job stops after its rows in flight; a retry then computes it anew. A task process
        that dies without this call leaves its job to finish, and the retry re-attaches to it."""
        job = getattr(self, "job_id", None)
        if job:
            QuailHook(self.quail_conn_id).get_conn().cancel(job)


class LLMFilterOperator(_LLMOperator):
    template_fields: Sequence[str] = ("source", "target", "predicates", "quail_plan")

    def __init__(self, *, source: str, text_column: str, predicates: list[str], limit: int | None = None,
                 threshold: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.source, self.text_column, self.predicates = source, text_column, predicates
        self.limit, self.threshold = limit, threshold

    def inputs(self):
        return [(self.source, self.text_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "filter", (self.source,), (self.text_column,), tuple(self.predicates),
                            threshold=self.threshold, limit=self.limit, output=self.target)


class LLMClassifyOperator(_LLMOperator):
    template_fields: Sequence[str] = ("source", "target", "labels", "question", "quail_plan")

    def __init__(self, *, source: str, text_column: str, labels: list[str], question: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.source, self.text_column, self.labels, self.question = source, text_column, labels, question

    def inputs(self):
        return [(self.source, self.text_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "classify", (self.source,), (self.text_column,),
                            (self.question or DEFAULT_QUESTION,), tuple(self.labels), output=self.target)


class LLMJoinOperator(_LLMOperator):
    template_fields: Sequence[str] = ("left", "right", "target", "condition", "quail_plan")

    def __init__(self, *, left: str, right: str, left_column: str, right_column: str, condition: str,
                 threshold: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.left, self.right, self.left_column, self.right_column = left, right, left_column, right_column
        self.condition, self.threshold = condition, threshold

    def inputs(self):
        return [(self.left, self.left_column), (self.right, self.right_column)]

    def spec(self):
        return OperatorSpec(self.task_id, "join", (self.left, self.right), (self.left_column, self.right_column),
                            (self.condition,), threshold=self.threshold, output=self.target)


def plan_document(plan_hash: str, entry: OperatorPlan) -> str:
    return json.dumps({"plan_hash": plan_hash, "operator": asdict(entry)}, sort_keys=True)
