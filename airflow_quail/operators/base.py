"""The base of the LLM operators: their shared settings and docs. What a task's try does (a window
of rows at a time, each a job on a worker, staged until the output is written) is airflow_quail.runs'."""

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator, Context

from airflow_quail.hooks.quail import QuailHook
from airflow_quail.lineage import operator_lineage
from airflow_quail.planning import plan_of_dag
from airflow_quail.runs import TaskRun
from quail.errors import QuailError
from quail.kinds.settings import Settings
from quail.pipeline.config import check_review
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS
from quail.pipeline.windows import check_count
from quail.planner.plan import OperatorPlan, Plan, plan
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk.types import TaskInstance

EVENT_KEYS = frozenset({"job", "state", "documents", "stats", "predicted", "error"})  # a job's status


class BaseLLMOperator(BaseOperator):
    """What the LLM operators share: a window driver over the first input, each window a job on the
    worker, staged on disk until the output is written (airflow_quail.runs).

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
    :param ahead: whether the worker may compute this operator's answers ahead, in the jobs of the
        operator whose output it reads (docs/design.md#the-answer-store): by default when it surely runs
        after it (trigger rule all_success, no branch above it); True or False to say so
    :param max_tokens: the tokens the task may compute; by default the connection's extra `max_tokens`,
        else none. A plan that predicts more is refused before anything is submitted (the task first
        sends its windows for prediction only: a tokenizing pass), and a run that computes more
        stops at the window where it does, with no output.
    :param cascade: ``{"model": NAME, "band": [LOW, HIGH]}``: the rows (a join's pairs) whose
        probability lies inside the band are answered again by this larger model, in the same worker;
        or ``{"model": NAME, "target": {"precision": 0.95}, "delta": 0.05}``: the band is chosen in the
        run, on the first window, for that target (docs/design.md#a-cascade-with-a-guarantee)
    :param review_output: with a cascade, where the rows inside its band go, with every column and
        probability, for a person to review: a path or URI, or sql://CONN_ID/TABLE (templated)
    :param max_workers: with several workers on the connection, how many may compute this task's
        windows at once (by default the connection's extra `max_workers`, else all that answer);
        results are assembled in order, and a retry resumes window by window as ever

    The target is an outlet Asset and the inputs inlets (airflow_quail.lineage.asset_uri) unless
    `outlets`/`inlets` are given.
    """

    ui_color = "#f2e6c9"
    settings: type[Settings]  # the kind's settings, which check what the operator is given
    # the inputs, each as the names of its path's and its text column's attributes; the first is read
    # a window at a time
    input_fields: tuple[tuple[str, str], ...] = (("source", "text_column"),)

    def __init__(self, *, target: str, quail_conn_id: str = QuailHook.default_conn_name, reuse: bool = True,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 quail_plan: str = "", window_rows: int = DEFAULT_WINDOW_ROWS, calibration: str = "auto",
                 ahead: bool | None = None, max_tokens: int | None = None, cascade: dict | None = None,
                 review_output: str | None = None, max_workers: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        try:
            if "cascade" not in self.settings.model_fields and cascade is not None:
                raise QuailError(f"task {self.task_id!r}: an {self.settings.kind} takes no cascade")
            self.cascade = self.settings.check_one("cascade", cascade, f"task {self.task_id!r}") \
                if "cascade" in self.settings.model_fields else None
            check_review(review_output, self.cascade, f"task {self.task_id!r}")
            self.max_workers = check_count(max_workers, f"task {self.task_id!r}: max_workers")
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self.review_output = review_output
        self.target = target
        self.deferrable = deferrable
        self.quail_conn_id = quail_conn_id
        self.reuse = reuse
        self.quail_plan = quail_plan  # set by airflow_quail.planning.plan_quail_dag (the policy); shown in the UI
        self.window_rows = window_rows
        self.calibration = calibration
        self.ahead = ahead
        self.max_tokens = max_tokens

    def inputs(self) -> list[tuple[str, str]]:
        return [(getattr(self, path), getattr(self, column)) for path, column in self.input_fields]

    def sources(self) -> list[str]:
        return [source for source, _ in self.inputs()]

    def settings_body(self) -> dict:
        """The kind's settings as the operator was given them, but calibration and cascade."""
        raise NotImplementedError

    def spec(self) -> OperatorSpec:
        body = self.settings_body() | {k: getattr(self, k) for k in ("calibration", "cascade")
                                       if k in self.settings.model_fields}
        return self.settings.parse(body, f"task {self.task_id!r}").spec(self.task_id, self.target)

    def plan_entry(self) -> tuple[Plan, OperatorPlan]:
        """The DAG's plan (or the operator's alone, outside a DAG) and the operator's entry: the one
        the policy (or plan_quail_dag) stored, else the plan's."""
        whole = plan_of_dag(self.dag) if self.has_dag() else None
        if whole is None or self.task_id not in {s.name for s in whole.specs}:
            whole = plan([self.spec()])  # outside a DAG, or mapped over something it cannot plan with
        if self.quail_plan:
            return whole, OperatorPlan.from_dict(json.loads(self.quail_plan)["operator"])
        return whole, whole[self.task_id]

    @cached_property
    def hook(self) -> QuailHook:
        return QuailHook(self.quail_conn_id)

    @cached_property
    def task_run(self) -> TaskRun:
        return TaskRun(self, self.hook)

    def execute(self, context: Context) -> dict:
        return self.task_run.execute(context)

    def execute_complete(self, context: Context, event: dict, window: int = 0) -> dict:
        """Resumes after the trigger saw window `window`'s job end: stages it and goes on."""
        if not (isinstance(event, dict) and EVENT_KEYS <= set(event) and isinstance(window, int)):
            raise AirflowException(f"task {self.task_id!r}: the trigger's event is not a Quail job's end: {event!r}")
        return self.task_run.execute(context, (window, event))

    def on_kill(self) -> None:
        """Cancels the job (Airflow stopped the task: a timeout, or marked failed or success). A
        running job stops after its rows in flight; a retry then computes it anew. A task process
        that dies without this call leaves its job to finish, and the retry re-attaches to it."""
        self.task_run.cancel()

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

    def get_openlineage_facets_on_start(self) -> "OperatorLineage":
        return operator_lineage(self.sources(), self.target)

    def get_openlineage_facets_on_complete(self, task_instance: "TaskInstance") -> "OperatorLineage":
        return operator_lineage(self.sources(), self.target, self.task_run.rows_out)
