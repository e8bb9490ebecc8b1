"""One try of a Quail task, what its operator's `execute` and `execute_complete` run. It reads the
task's first input a window of rows at a time (quail.pipeline.windows drives the windows), sends
each window's documents and its plan entry to a worker as one job (airflow_quail.window_jobs),
stages the window's output on disk, and once every window is in writes its output atomically from
the staged windows; a retry after a crash resumes from the first window not staged. XCom gets only
a small manifest: where the output is, row counts and the token accounting."""

import json
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.exceptions import AirflowException

from airflow_quail.hooks.quail import FanOut, QuailHook
from airflow_quail.io import SqlLocation, check_target, iter_source, read_source, source_rows, write_target
from airflow_quail.metrics import emit
from airflow_quail.staging import WindowStage
from airflow_quail.window_jobs import QuailTask, TaskTry, WindowJobs
from quail.errors import QuailError
from quail.executor.stats import Stats
from quail.pipeline.explain import describe_run
from quail.pipeline.windows import (
    OperatorDone,
    Window,
    WindowDone,
    check_budget,
    check_count,
    check_window_rows,
    drive,
)
from quail.planner.predict import Prediction
from quail.reuse import Reuse
from quail.specs import OperatorSpec
from quail.worker.client import WorkerClient, WorkerLost
from quail.worker.jobs import Origin
from quail.worker.routing import DIRECT

if TYPE_CHECKING:
    from airflow.sdk import Context, ObjectStoragePath


class TaskRun:
    """Runs one task's tries: each computes the windows not staged yet, one job each, then writes
    the output from the staged windows.

    :param task: the operator, for its settings, inputs, spec, plan entry and log
    :param hook: the hook of its `quail` connection
    """

    def __init__(self, task: QuailTask, hook: QuailHook):
        self.task, self.hook = task, hook
        self.jobs = WindowJobs(task)
        self.rows_out: int | None = None  # once a try wrote its output, for OpenLineage

    def cancel(self) -> None:
        """Cancels the job in flight (Airflow stopped the task); a retry then computes it anew."""
        self.jobs.cancel(self.hook)

    def execute(self, context: "Context", ended: tuple[int, dict] | None = None) -> dict:
        """The try's manifest. `ended`: a window whose job a trigger saw end, with its status."""
        task = self.task
        try:
            check_window_rows(task.window_rows)
            where, spec = check_target(task.target, task.sources()), task.spec()  # before any work
            if task.review_output is not None:
                check_target(task.review_output, [*task.sources(), task.target])
            run = self._try(context, where, ended)
            (source, _), *others = task.inputs()
            others = [(read_source(s), s) for s, _ in others]
            budget = self._budget()
            if budget is not None and ended is None:
                check_budget(task.task_id, self._predicted(run, spec, source, others), budget)
            started, staged, queued = time.monotonic(), [], 0.0
            ahead: dict[str, dict[str, int]] = {}
            workers: dict[str, int] = {}  # where the windows ran, with how many each
            pool = self._fan_out(run, ended)
            kept = threading.Lock()  # windows may end at once, on several workers

            def step(window: Window) -> WindowDone:
                nonlocal queued
                on = run if len(pool) == 1 else replace(run, client=pool.for_window(window.k))
                record = self.jobs.record(on, window, ended, pool)
                with kept:
                    staged.append((window.k, record["digest"]))
                    where = record.get("worker", on.client.location)
                    workers[where] = workers.get(where, 0) + 1
                    queued += record.get("queued_seconds", 0.0)  # a window staged by an older Quail: none
                    for consumer, seen in record.get("ahead", {}).items():
                        total = ahead.setdefault(consumer, dict.fromkeys(seen, 0))
                        for k, v in seen.items():
                            total[k] = total.get(k, 0) + v
                return WindowDone(record["rows"], record["counted"], Stats.from_dict(record["stats"]),
                                  Prediction.from_dict(record["predicted"]))

            done = drive(spec, iter_source(source, task.window_rows), source, others, step,
                         after=lambda w, d, total: self._log_window(total, run.total_rows, started), max_tokens=budget,
                         parallel=len(pool))
            staged.sort()  # in window order, however they ended
            write_target(run.stage.tables(staged), task.target)
            if task.review_output is not None:
                write_target(run.stage.tables(staged, review=True), task.review_output)
            run.stage.clear()
        except QuailError as e:
            raise AirflowException(str(e)) from None
        self.rows_out = done.rows_out
        self._log_done(done, workers, ahead)
        manifest = {"target": task.target, "rows_in": done.rows_in, "rows_out": done.rows_out, "windows": done.windows,
                    "worker": run.client.location, "workers": workers, "stats": done.stats.to_dict(),
                    "predicted": done.predicted.rounded(), "computed_ahead": ahead,
                    "routing": _routing(run.client), "waited_seconds": round(self.jobs.waited + queued, 3),
                    # plain JSON (tuples as lists), so that XCom stores no serialized Python types
                    "plan": json.loads(json.dumps({"plan_hash": run.plan.hash, "operator": asdict(run.op)}))}
        emit(run.origin.dag_id, run.origin.task_id, manifest)
        return manifest

    def _try(self, context: "Context", where: "SqlLocation | Path | ObjectStoragePath | None",
             ended: tuple[int, dict] | None) -> TaskTry:
        ti, task, hook = context["ti"], self.task, self.hook
        origin = Origin(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)
        route = (origin.dag_id, origin.map_index)
        # a window a trigger saw end is fetched from the worker that ran it; else the partition's worker,
        # waited for while the whole pool does not answer (a rolling update), as for a lost one
        try:
            client = hook.client_at(ended[1]["worker"]) if ended and ended[1].get("worker") else \
                hook.get_conn(*route)
        except WorkerLost:
            client = self.jobs.reconnect(hook, route)
        reuse = Reuse(store=hook.answer_store) if task.reuse else Reuse.none()
        return TaskTry(origin, WindowStage(task.target, where if isinstance(where, Path) else None, origin),
                       hook, route, client, *task.plan_entry(), reuse, source_rows(task.sources()[0]))

    def _fan_out(self, run: TaskTry, ended: tuple[int, dict] | None) -> FanOut:
        """The workers this try's windows run on at once: the task's own alone when it defers (the
        triggerer waits for one job at a time) or resumes a deferred window; else its home and the
        connection's other workers, up to `max_workers`."""
        if self.task.deferrable or ended is not None:
            return FanOut([run.client])
        pool = run.hook.fan_out(run.client, *run.route, self.task.max_workers)
        if len(pool) > 1:
            run.model_of(run.client)  # every window is checked against the home's model
            self.task.log.info("its windows run on %d workers at once: %s", len(pool),
                               ", ".join(c.location for c in pool.clients))
        return pool

    def _budget(self) -> int | None:
        own = check_count(self.task.max_tokens, f"task {self.task.task_id!r}: max_tokens")
        return own if own is not None else self.hook.max_tokens

    def _predicted(self, run: TaskTry, spec: OperatorSpec, source: str, others: list) -> Prediction:
        """The plan's accounting of the whole task, predicted by the worker window by window, with
        nothing computed."""
        def step(window: Window) -> WindowDone:
            return WindowDone(0, 0, Stats(), Prediction.from_dict(self.jobs.predicted(run, window)))

        predicted = drive(spec, iter_source(source, self.task.window_rows), source, others, step).predicted
        self.task.log.info("the plan predicts %s computed tokens of %s; the budget is %s",
                           f"{round(predicted.tokens_computed):,}", f"{round(predicted.tokens_naive):,}",
                           f"{self._budget():,}")
        return predicted

    def _log_window(self, total: OperatorDone, rows: int | None, started: float) -> None:
        if rows:
            elapsed = time.monotonic() - started
            eta = elapsed / total.rows_in * (rows - total.rows_in) if total.rows_in else 0.0
            self.task.log.info("%d of %d rows (%.0f%%), %d window(s); about %.0f s left", total.rows_in, rows,
                               100 * total.rows_in / rows, total.windows, eta)
        else:
            self.task.log.info("%d rows, %d window(s)", total.rows_in, total.windows)

    def _log_done(self, done: OperatorDone, workers: dict[str, int], ahead: dict[str, dict[str, int]]) -> None:
        """Where the windows ran, and the CLI's closing summary, in the task log where Airflow users look."""
        log = self.task.log
        log.info("its %d window(s) ran on %s", done.windows,
                 ", ".join(f"{w} ({n})" for w, n in workers.items()) or "no worker (none had rows)")
        log.info("%s", describe_run(self.task.task_id, done.stats, done.predicted, done.rows_out, done.rows_in,
                                    self.task.target))
        for consumer, seen in ahead.items():
            log.info("computed the answers of %s ahead for %d rows, into the answer store: %d tokens computed, "
                     "%d reused from retention", consumer, seen["rows"], seen["tokens_computed"], seen["retention"])
        if done.stats.tokens_reused.get("store"):
            log.info("found %d tokens' worth of answers in the answer store", done.stats.tokens_reused["store"])


def _routing(client: WorkerClient) -> dict:
    """Whether the task's worker is its partition's home, or it spilled or failed over there, and
    why; DIRECT where its connection names one worker (or none: a local one)."""
    route = client.route
    if route is None:
        return {"routed": DIRECT, "worker": client.location, "home": client.location,
                "why": "the only worker its connection names (or a local one)"}
    return {"routed": route.routed, "worker": route.worker, "home": route.home, "why": route.why}
