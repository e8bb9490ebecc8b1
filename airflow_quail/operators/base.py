"""The base of the LLM operators. Each reads its first input a window of rows at a time
(quail.pipeline.windows drives the windows), sends each window's documents and its plan entry to
the worker as one job, stages the window's output on disk, and once every window is in writes its
output atomically from the staged windows; a retry after a crash resumes from the first window not
staged. XCom gets only a small manifest: where the output is, row counts and the token accounting."""

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator, Context

from airflow_quail.hooks.quail import FanOut, QuailHook
from airflow_quail.io import SqlLocation, check_target, iter_source, read_source, source_rows, write_target
from airflow_quail.lineage import operator_lineage
from airflow_quail.planning import dag_plan
from airflow_quail.staging import WindowStage
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.kinds.settings import Settings
from quail.pipeline.config import check_review
from quail.pipeline.explain import describe_run
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS
from quail.pipeline.windows import (
    OperatorDone,
    Window,
    WindowDone,
    check_budget,
    check_count,
    check_window_rows,
    drive,
)
from quail.planner.plan import OperatorPlan, Plan, plan
from quail.planner.predict import Prediction
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.client import WorkerClient, WorkerLost, backoff
from quail.worker.jobs import LOST, Identity, JobState, Span, Submission, job_ref
from quail.worker.protocol import content_digest, documents_digest

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.types import TaskInstance

EVENT_KEYS = frozenset({"job", "state", "documents", "stats", "predicted", "error"})  # a job's status


@dataclass
class _TaskRun:
    """What one try of a task works with."""

    identity: Identity
    stage: WindowStage
    hook: QuailHook
    route: tuple[str, int]  # the task's routing key, its DAG and partition (QuailHook.get_conn)
    client: WorkerClient
    plan: Plan  # the DAG's plan (or the operator's alone), for the predicted accounting
    op: OperatorPlan
    reuse: Reuse
    total_rows: int | None  # None: not known before reading it all
    model: str | None = None  # the identity of the worker's model, the same for every window of the try

    def model_of(self, client: WorkerClient) -> str:
        """The try's model: its first worker's. A window computed by another model (a worker
        restarted on changed weights) fails the try, whose retry computes every window anew."""
        if self.model is None:
            self.model = client.info()["identity"]
        return self.model


class BaseLLMOperator(BaseOperator):
    """What the three operators share: a window driver over the first input, each window a job on
    the worker, staged on disk until the output is written.

    :param target: where the output goes: a .parquet path or URI, or sql://CONN_ID/TABLE (templated)
    :param quail_conn_id: the `quail` connection naming the worker; with no host, or no
        quail_default connection, a local worker started on demand
    :param reuse: KV reuse on (rewind, prefix sharing, retention, borrowing); off computes every
        prompt from scratch, for checks. Answers do not depend on it.
    :param deferrable: wait for each window's job in the triggerer instead of a worker slot; by
        default `[operators] default_deferrable`
    :param quail_plan: the operator's plan entry, set by the provider's planning policy (templated)
    :param window_rows: rows of the first input read, computed and staged at a time
    :param ahead: whether the worker may compute this operator's answers ahead, in the jobs of the
        operator whose output it reads (docs/design.md#the-answer-store): by default when it surely runs
        after it (trigger rule all_success, no branch above it); True or False to say so
    :param max_tokens: the tokens the task may compute; by default the connection's extra `max_tokens`,
        else none. A plan that predicts more is refused before anything is submitted (the task first
        sends its windows for prediction only: a tokenizing pass), and a run that computes more
        stops at the window where it does, with no output.
    :param calibration: "contextual" divides out each question's answer on content-free documents
        (Zhao et al., 2021); "none" keeps the model's raw probabilities; "auto", the default, is the
        one measured best for the worker's model (contextual for qwen2.5-coder-1.5b)
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
        whole = dag_plan(self.dag) if self.has_dag() else None
        if whole is None or self.task_id not in {s.name for s in whole.specs}:
            whole = plan([self.spec()])  # outside a DAG, or mapped over something it cannot plan with
        if self.quail_plan:
            return whole, OperatorPlan.from_dict(json.loads(self.quail_plan)["operator"])
        return whole, whole[self.task_id]

    def execute(self, context: Context) -> dict:
        return self._run(context, None)

    def execute_complete(self, context: Context, event: dict, window: int = 0) -> dict:
        """Resumes after the trigger saw window `window`'s job end: stages it and goes on."""
        if not (isinstance(event, dict) and EVENT_KEYS <= set(event) and isinstance(window, int)):
            raise AirflowException(f"task {self.task_id!r}: the trigger's event is not a Quail job's end: {event!r}")
        return self._run(context, (window, event))

    def _run(self, context: Context, ended: tuple[int, dict] | None) -> dict:
        """Computes the windows not staged yet, one job each, then writes the output from the staged
        windows. `ended`: a window whose job a trigger saw end, with its status."""
        try:
            check_window_rows(self.window_rows, "window_rows")
            where, spec = check_target(self.target, self.sources()), self.spec()  # before any work
            if self.review_output is not None:
                check_target(self.review_output, [*self.sources(), self.target])
            run = self._task_run(context, where, ended)
            (source, _), *others = self.inputs()
            others = [(read_source(s), s) for s, _ in others]
            budget = self._budget(run)
            if budget is not None and ended is None:
                check_budget(self.task_id, self._predicted(run, spec, source, others), budget)
            started, staged = time.monotonic(), []
            ahead: dict[str, dict[str, int]] = {}
            workers: dict[str, int] = {}  # where the windows ran, with how many each
            pool = self._fan_out(run, ended)
            kept = threading.Lock()  # windows may end at once, on several workers

            def step(window: Window) -> WindowDone:
                on = run if len(pool) == 1 else replace(run, client=pool.for_window(window.k))
                record = self._window(on, window, ended, pool)
                with kept:
                    staged.append((window.k, record["digest"]))
                    where = record.get("worker", on.client.location)
                    workers[where] = workers.get(where, 0) + 1
                    for consumer, seen in record.get("ahead", {}).items():
                        total = ahead.setdefault(consumer, dict.fromkeys(seen, 0))
                        for k, v in seen.items():
                            total[k] = total.get(k, 0) + v
                return WindowDone(record["rows"], record["counted"], Stats.from_dict(record["stats"]),
                                  Prediction.from_dict(record["predicted"]))

            done = drive(spec, iter_source(source, self.window_rows), source, others, step,
                         after=lambda w, d, total: self._log_window(total, run.total_rows, started), max_tokens=budget,
                         parallel=len(pool))
            staged.sort()  # in window order, however they ended
            write_target(run.stage.tables(staged), self.target)
            if self.review_output is not None:
                write_target(run.stage.tables(staged, review=True), self.review_output)
            run.stage.clear()
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self.rows_out = done.rows_out
        self.log.info("its %d window(s) ran on %s", done.windows,
                      ", ".join(f"{w} ({n})" for w, n in workers.items()) or "no worker (none had rows)")
        # the CLI's closing summary, in the task log where Airflow users look
        self.log.info("%s", describe_run(self.task_id, done.stats, done.predicted, done.rows_out, done.rows_in,
                                         self.target))
        for consumer, seen in ahead.items():
            self.log.info("computed the answers of %s ahead for %d rows, into the answer store: %d tokens computed, "
                          "%d reused from retention", consumer, seen["rows"], seen["tokens_computed"],
                          seen["retention"])
        if done.stats.tokens_reused.get("answers"):
            self.log.info("found %d tokens' worth of answers in the answer store", done.stats.tokens_reused["answers"])
        return {"target": self.target, "rows_in": done.rows_in, "rows_out": done.rows_out, "windows": done.windows,
                "worker": run.client.location, "workers": workers, "stats": done.stats.to_dict(),
                "predicted": done.predicted.rounded(),
                "computed_ahead": ahead,
                # plain JSON (tuples as lists), so that XCom stores no serialized Python types
                "plan": json.loads(json.dumps({"plan_hash": run.plan.hash, "operator": asdict(run.op)}))}

    def _fan_out(self, run: "_TaskRun", ended: tuple[int, dict] | None) -> FanOut:
        """The workers this try's windows run on at once: the task's own alone when it defers (the
        triggerer waits for one job at a time) or resumes a deferred window; else its home and the
        connection's other workers, up to `max_workers`."""
        if self.deferrable or ended is not None:
            return FanOut([run.client])
        pool = run.hook.fan_out(run.client, *run.route, self.max_workers)
        if len(pool) > 1:
            run.model_of(run.client)  # every window is checked against the home's model
            self.log.info("its windows run on %d workers at once: %s", len(pool),
                          ", ".join(c.location for c in pool.clients))
        return pool

    def _budget(self, run: "_TaskRun") -> int | None:
        own = check_count(self.max_tokens, f"task {self.task_id!r}: max_tokens")
        return own if own is not None else run.hook.max_tokens

    def _predicted(self, run: "_TaskRun", spec: OperatorSpec, source: str, others: list) -> Prediction:
        """The plan's accounting of the whole task, predicted by the worker window by window, with
        nothing computed."""
        def step(window: Window) -> WindowDone:
            job, _ = run.client.submit(replace(run.identity, window=window.k), window.spec, run.op, run.reuse,
                                       window.inputs, Span(window.offset, run.total_rows, window.last), run.plan,
                                       predict_only=True)
            status = run.client.wait(job)
            if status["state"] != JobState.DONE:
                raise QuailError(f"predicting window {window.k}: {status['state']}: {status['error']}")
            return WindowDone(0, 0, Stats(), Prediction.from_dict(status["predicted"]))

        predicted = drive(spec, iter_source(source, self.window_rows), source, others, step).predicted
        self.log.info("the plan predicts %s computed tokens of %s; the budget is %s",
                      f"{round(predicted.tokens_computed):,}", f"{round(predicted.tokens_naive):,}",
                      f"{self._budget(run):,}")
        return predicted

    def _task_run(self, context: Context, where: "SqlLocation | Path | ObjectStoragePath | None",
                  ended: tuple[int, dict] | None) -> "_TaskRun":
        ti = context["ti"]
        identity = Identity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)
        hook, route = QuailHook(self.quail_conn_id), (identity.dag_id, identity.map_index)
        # a window a trigger saw end is fetched from the worker that ran it; else the partition's worker,
        # waited for while the whole pool does not answer (a rolling update), as for a lost one
        try:
            client = hook.client_at(ended[1]["worker"]) if ended and ended[1].get("worker") else \
                hook.get_conn(*route)
        except WorkerLost:
            client = self._reconnect(hook, route)
        reuse = Reuse(store=hook.answer_store) if self.reuse else Reuse.none()
        return _TaskRun(identity, WindowStage(self.target, where if isinstance(where, Path) else None, identity),
                        hook, route, client, *self.plan_entry(), reuse, source_rows(self.sources()[0]))

    def _window(self, run: "_TaskRun", window: Window, ended: tuple[int, dict] | None,
                pool: FanOut | None = None) -> dict:
        """Window k's record: staged by an earlier try, or the job a trigger saw end, or computed now.
        A worker that dies (or is restarted) meanwhile costs no try: the window is resubmitted to
        another of the task's `pool` that answers, else to the partition's worker once one answers
        again, within the connection's `worker_lost_timeout`."""
        documents = documents_digest(window.inputs)
        submission = Submission(run.identity, window.spec, run.op, run.reuse, plan=run.plan)
        status = None
        if ended is not None and ended[0] == window.k and ended[1]["state"] != LOST:
            if ended[1]["documents"] != documents:
                raise QuailError(f"the input of {self.task_id} changed while its job ran; clear the task "
                                 f"to compute the new input")
            status = ended[1]
        while True:
            try:
                # staged windows are keyed by the model too: a retry on other weights finds none
                digest = content_digest(submission, run.model_of(run.client), documents)
                if (record := run.stage.done(window.k, digest)) is not None:
                    self.log.info("window %d (rows from %d) was staged by an earlier try", window.k, window.offset)
                    return record | {"digest": digest}
                return self._stage(run, status or self._compute(run, window), window, digest) | {"digest": digest}
            except WorkerLost as e:
                self.log.warning("window %d: %s", window.k, e)
                moved = pool.instead_of(run.client, window.k) if pool is not None and len(pool) > 1 else None
                if moved is not None:
                    self.log.info("window %d moves to %s, another of the task's workers", window.k, moved.location)
                run.client, status = moved or self._reconnect(run.hook, run.route), None

    def _reconnect(self, hook: QuailHook, route: tuple[str, int]) -> WorkerClient:
        """The partition's worker, once one answers again: a lost local worker is started again, a
        remote one waited for with a bounded backoff, for at most the connection's `worker_lost_timeout`."""
        bound = hook.worker_lost_timeout
        waits = backoff(bound)
        while True:
            try:
                client = hook.get_conn(*route)
                client.info()
                self.log.info("the Quail worker %s answers; resubmitting", client.location)
                return client
            except WorkerLost as e:
                if (wait := next(waits, None)) is None:
                    raise QuailError(f"no Quail worker answered for {bound:.0f} s (the connection's extra "
                                     f"`worker_lost_timeout`): {e}") from None
                self.log.warning("%s; trying again in %.0f s", e, wait)
                time.sleep(wait)

    def _compute(self, run: "_TaskRun", window: Window) -> dict:
        """The window's job, submitted (or re-attached to) and waited for here or, deferrable, by the triggerer."""
        job, attached = run.client.submit(replace(run.identity, window=window.k), window.spec, run.op, run.reuse,
                                          window.inputs, Span(window.offset, run.total_rows, window.last),
                                          run.plan, replaces=run.stage.job(window.k))
        run.stage.put_job(window.k, job)
        self.job_id, self.worker_location = job, run.client.location
        self.log.info("Quail job %s %s for window %d (rows from %d)", job_ref(job),
                      "re-attached" if attached else "submitted", window.k, window.offset)
        if self.deferrable:
            from airflow_quail.triggers.quail import QuailJobTrigger

            self.defer(trigger=QuailJobTrigger(job, self.quail_conn_id, location=run.client.location),
                       method_name="execute_complete",
                       kwargs={"window": window.k})
        return run.client.wait(job, on_progress=self._progress_log())

    def _stage(self, run: "_TaskRun", status: dict, window: Window, digest: str) -> dict:
        if status["state"] == JobState.CANCELLED and not getattr(self, "killed", False):  # the worker is stopping
            raise WorkerLost(f"Quail job {job_ref(status['job'])} was cancelled on the worker (it is stopping)")
        if status["state"] != JobState.DONE:
            raise AirflowException(f"Quail job {job_ref(status['job'])} {status['state']}: {status['error']}")
        if status.get("model") != run.model:
            raise AirflowException(f"window {window.k} was computed by another model ({status.get('model')}) than "
                                   f"the task's earlier windows ({run.model}): the worker's model changed; a retry "
                                   f"computes every window with the new one")
        answers = run.client.fetch(status["job"])
        table, counted = window.shaped(answers, self.sources()[0])
        record = {"rows": table.num_rows, "counted": counted, "stats": status["stats"],
                  "predicted": status["predicted"], "ahead": status.get("ahead") or {}, "worker": run.client.location}
        review = window.review(answers, self.sources()[0]) if self.review_output is not None else None
        run.stage.put(window.k, digest, table, record, review)
        return record

    def _log_window(self, total: OperatorDone, rows: int | None, started: float) -> None:
        if rows:
            elapsed = time.monotonic() - started
            eta = elapsed / total.rows_in * (rows - total.rows_in) if total.rows_in else 0.0
            self.log.info("%d of %d rows (%.0f%%), %d window(s); about %.0f s left", total.rows_in, rows,
                          100 * total.rows_in / rows, total.windows, eta)
        else:
            self.log.info("%d rows, %d window(s)", total.rows_in, total.windows)

    def _progress_log(self, every: float = 5.0) -> Callable[[dict], None]:
        """Logs a job's progress when its state changes, and otherwise at most every `every` seconds."""
        last: dict[str, Any] = {"state": None, "at": 0.0}

        def log(s: dict) -> None:
            now = time.monotonic()
            if s["state"] != last["state"] or now - last["at"] >= every:
                self.log.info("%s: %d/%d rows, %.0f tok/s", s["state"], s["rows_done"], s["rows"],
                              s["tokens_per_second"])
                last.update(state=s["state"], at=now)

        return log

    def get_openlineage_facets_on_start(self) -> "OperatorLineage":
        return operator_lineage(self.sources(), self.target)

    def get_openlineage_facets_on_complete(self, task_instance: "TaskInstance") -> "OperatorLineage":
        return operator_lineage(self.sources(), self.target, getattr(self, "rows_out", None))

    def on_kill(self) -> None:
        """Cancels the job (Airflow stopped the task: a timeout, or marked failed or success). A
        running job stops after its rows in flight; a retry then computes it anew. A task process
        that dies without this call leaves its job to finish, and the retry re-attaches to it."""
        self.killed = True
        job = getattr(self, "job_id", None)
        if job:
            QuailHook(self.quail_conn_id).client_at(self.worker_location).cancel(job)
