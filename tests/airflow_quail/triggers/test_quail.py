"""QuailJobTrigger: what the triggerer stores and rebuilds; run against a real worker, it fires once
with the job's end, which the deferred task resumes from, window after window; a job the worker
does not know, or a worker that does not answer, fires "lost"."""

import asyncio
import importlib
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_quail.operators import LLMClassifyOperator
from airflow_quail.operators.base import EVENT_KEYS
from airflow_quail.triggers.quail import QuailJobTrigger
from quail.worker.jobs import LOST


def _rebuilt(trigger: QuailJobTrigger, **changed) -> QuailJobTrigger:
    """The trigger as the triggerer rebuilds it from what it stored."""
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**kwargs | changed)


def _events(trigger: QuailJobTrigger) -> list[dict]:
    async def run() -> list[dict]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(run())


def test_the_trigger_serializes_to_itself():
    trigger = QuailJobTrigger("job-1", "quail_gpu", 1.5)
    again = _rebuilt(trigger)
    assert again.serialize() == trigger.serialize() and again.job_id == "job-1"


@pytest.mark.slow  # the pool's workers load a model
def test_a_deferred_task_resumes_from_each_event_the_trigger_fires(pool, tmp_path):
    """Two windows: the task defers on each window's job; the trigger, run as the triggerer runs it,
    fires once when the job ends, and a new instance of the task resumes from that event."""
    locations, servers = pool
    source, target = tmp_path / "news.parquet", tmp_path / "out.parquet"
    texts = [f"Match report {i}: the home side won." for i in range(8)]
    pq.write_table(pa.table({"id": list(range(8)), "text": texts}), source)
    context = {"ti": SimpleNamespace(dag_id="news", task_id="kind", run_id="r1", map_index=-1)}

    def resumed(event: dict | None, kwargs: dict) -> dict:  # on an operator of its own each time, as in Airflow
        op = LLMClassifyOperator(task_id="kind", source=str(source), text_column="text", labels=["sport", "money"],
                                 target=str(target), window_rows=4, quail_conn_id="quail_one", deferrable=True)
        return op.execute(context) if event is None else op.execute_complete(context, event, **kwargs)

    events: list[dict] = []
    event, kwargs = None, {}
    while True:
        try:
            manifest = resumed(event, kwargs)
            break
        except TaskDeferred as deferred:
            assert deferred.method_name == "execute_complete" and len(events) < 2
            [event] = _events(_rebuilt(deferred.trigger, poll_interval=0.05))
            events.append(event)
            kwargs = deferred.kwargs or {}
    jobs = sorted(servers[0].jobs.values(), key=lambda j: j.submission.origin.window)
    assert [e["job"] for e in events] == [j.id for j in jobs] and len(jobs) == 2  # each window's job, once
    for event in events:
        assert EVENT_KEYS <= set(event) and event["state"] == "done" and event["worker"] == locations[0]
    assert manifest["windows"] == 2 and manifest["rows_in"] == 8 and manifest["workers"] == {locations[0]: 2}
    assert pq.read_table(target).column("id").to_pylist() == list(range(8))


@pytest.mark.slow  # the pool's workers load a model
def test_a_job_the_worker_does_not_know_or_a_worker_that_does_not_answer_fires_lost(pool, tmp_path):
    locations, _ = pool
    for location in (locations[0], None, f"grpc+unix://{tmp_path}/gone.sock"):
        [event] = _events(QuailJobTrigger("no-such-job", "quail_one", 0.05, location))
        assert EVENT_KEYS <= set(event) and event["state"] == LOST and event["worker"] is None
        assert event["job"] == "no-such-job" and event["error"]
