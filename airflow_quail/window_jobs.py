"""A Quail task's windows as jobs on its workers (airflow_quail.runs drives them), each one
fault-tolerant: found staged by an earlier try; re-attached to by its origin, which has no try
number, after the task process died; waited for here or, deferrable, by the triggerer; moved to
another of the task's workers, or resubmitted once the partition's worker answers again, when its
worker is lost; and staged on disk when it ends."""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NoReturn, Protocol

from airflow.exceptions import AirflowException

from airflow_quail.hooks.quail import FanOut, QuailHook
from airflow_quail.staging import WindowStage
from quail.errors import QuailError
from quail.pipeline.windows import Window
from quail.planner.plan import OperatorPlan, Plan
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.client import WorkerClient, WorkerLost, backoff
from quail.worker.jobs import LOST, JobState, Origin, Span, Submission, job_ref
from quail.worker.protocol import content_digest, documents_digest


class QuailTask(Protocol):
    """What a run reads of its operator (airflow_quail.operators.base.BaseLLMOperator, which
    imports this module: named here by its shape)."""

    task_id: str
    target: str
    review_output: str | None
    quail_conn_id: str
    deferrable: bool
    reuse: bool
    window_rows: int
    max_tokens: int | None
    max_workers: int | None

    @property
    def log(self) -> Any: ...

    def inputs(self) -> list[tuple[str, str]]: ...

    def sources(self) -> list[str]: ...

    def spec(self) -> OperatorSpec: ...

    def plan_entry(self) -> tuple[Plan, OperatorPlan]: ...

    def defer(self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = None) -> NoReturn: ...


@dataclass
class TaskTry:
    """What one try of a task works with."""

    origin: Origin
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


class WindowJobs:
    """The jobs of one task's windows, and the one in flight, which `cancel` cancels."""

    def __init__(self, task: QuailTask):
        self.task = task
        self.job: str | None = None  # the job last submitted (or re-attached to), and its worker
        self.location: str | None = None
        self.killed = False  # Airflow stopped the task: a cancelled job is no stopping worker's
        self.waited = 0.0  # seconds this try waited for a lost worker to answer again

    def record(self, run: TaskTry, window: Window, ended: tuple[int, dict] | None, pool: FanOut | None = None) -> dict:
        """Window k's record: staged by an earlier try, or the job a trigger saw end, or computed now.
        A worker that dies (or is restarted) meanwhile costs no try: the window is resubmitted to
        another of the task's `pool` that answers, else to the partition's worker once one answers
        again, within the connection's `worker_lost_timeout`."""
        log = self.task.log
        documents = documents_digest(window.inputs)
        submission = Submission(run.origin, window.spec, run.op, run.reuse, plan=run.plan)
        status = None
        if ended is not None and ended[0] == window.k and ended[1]["state"] != LOST:
            if ended[1]["documents"] != documents:
                raise QuailError(f"the input of {self.task.task_id} changed while its job ran; clear the task "
                                 f"to compute the new input")
            status = ended[1]
        while True:
            try:
                # staged windows are keyed by the model too: a retry on other weights finds none
                digest = content_digest(submission, run.model_of(run.client), documents)
                if (record := run.stage.done(window.k, digest)) is not None:
                    log.info("window %d (rows from %d) was staged by an earlier try", window.k, window.offset)
                    return record | {"digest": digest}
                return self._stage(run, status or self._compute(run, window), window, digest) | {"digest": digest}
            except WorkerLost as e:
                log.warning("window %d: %s", window.k, e)
                moved = pool.instead_of(run.client, window.k) if pool is not None and len(pool) > 1 else None
                if moved is not None:
                    log.info("window %d moves to %s, another of the task's workers", window.k, moved.location)
                run.client, status = moved or self.reconnect(run.hook, run.route), None

    def reconnect(self, hook: QuailHook, route: tuple[str, int]) -> WorkerClient:
        started = time.monotonic()
        try:
            return reconnect(hook, route, self.task.log)
        finally:
            self.waited += time.monotonic() - started

    def predicted(self, run: TaskTry, window: Window) -> dict:
        """The window's accounting, predicted by the worker with nothing computed (a tokenizing pass)."""
        job, _ = run.client.submit(replace(run.origin, window=window.k), window.spec, run.op, run.reuse,
                                   window.inputs, Span(window.offset, run.total_rows, window.last), run.plan,
                                   predict_only=True)
        status = run.client.wait(job)
        if status["state"] != JobState.DONE:
            raise QuailError(f"predicting window {window.k}: {status['state']}: {status['error']}")
        return status["predicted"]

    def cancel(self, hook: QuailHook) -> None:
        """Cancels the job in flight, if any: a running job stops after its rows in flight."""
        self.killed = True
        if self.job and self.location:
            hook.client_at(self.location).cancel(self.job)

    def _compute(self, run: TaskTry, window: Window) -> dict:
        """The window's job, submitted (or re-attached to) and waited for here or, deferrable, by the triggerer."""
        job, attached = run.client.submit(replace(run.origin, window=window.k), window.spec, run.op, run.reuse,
                                          window.inputs, Span(window.offset, run.total_rows, window.last),
                                          run.plan, replaces=run.stage.job(window.k))
        run.stage.put_job(window.k, job)
        self.job, self.location = job, run.client.location
        self.task.log.info("Quail job %s %s for window %d (rows from %d)", job_ref(job),
                           "re-attached" if attached else "submitted", window.k, window.offset)
        if self.task.deferrable:
            from airflow_quail.triggers.quail import QuailJobTrigger

            self.task.defer(trigger=QuailJobTrigger(job, self.task.quail_conn_id, location=run.client.location),
                            method_name="execute_complete", kwargs={"window": window.k})
        return run.client.wait(job, on_progress=progress_log(self.task.log))

    def _stage(self, run: TaskTry, status: dict, window: Window, digest: str) -> dict:
        if status["state"] == JobState.CANCELLED and not self.killed:  # the worker is stopping
            raise WorkerLost(f"Quail job {job_ref(status['job'])} was cancelled on the worker (it is stopping)")
        if status["state"] != JobState.DONE:
            raise AirflowException(f"Quail job {job_ref(status['job'])} {status['state']}: {status['error']}")
        if status.get("model") != run.model:
            raise AirflowException(f"window {window.k} was computed by another model ({status.get('model')}) than "
                                   f"the task's earlier windows ({run.model}): the worker's model changed; a retry "
                                   f"computes every window with the new one")
        results = run.client.fetch(status["job"])
        source = self.task.sources()[0]
        table, counted = window.shaped(results, source)
        record = {"rows": table.num_rows, "counted": counted, "stats": status["stats"],
                  "predicted": status["predicted"], "ahead": status.get("ahead") or {}, "worker": run.client.location,
                  "queued_seconds": status.get("queued_seconds", 0.0)}
        review = window.review(results, source) if self.task.review_output is not None else None
        run.stage.put(window.k, digest, table, record, review)
        return record


def reconnect(hook: QuailHook, route: tuple[str, int], log: Any) -> WorkerClient:
    """The partition's worker, once one answers again: a lost local worker is started again, a
    remote one waited for with a bounded backoff, for at most the connection's `worker_lost_timeout`."""
    bound = hook.worker_lost_timeout
    waits = backoff(bound)
    while True:
        try:
            client = hook.get_conn(*route)
            client.info()
            log.info("the Quail worker %s answers; resubmitting", client.location)
            return client
        except WorkerLost as e:
            if (wait := next(waits, None)) is None:
                raise QuailError(f"no Quail worker answered for {bound:.0f} s (the connection's extra "
                                 f"`worker_lost_timeout`): {e}") from None
            log.warning("%s; trying again in %.0f s", e, wait)
            time.sleep(wait)


def progress_log(log: Any, every: float = 5.0) -> Callable[[dict], None]:
    """Logs a job's progress when its state changes, and otherwise at most every `every` seconds."""
    last: dict[str, Any] = {"state": None, "at": 0.0}

    def said(s: dict) -> None:
        now = time.monotonic()
        if s["state"] != last["state"] or now - last["at"] >= every:
            log.info("%s: %d/%d rows, %.0f tok/s", s["state"], s["rows_done"], s["rows"], s["tokens_per_second"])
            last.update(state=s["state"], at=now)

    return said
