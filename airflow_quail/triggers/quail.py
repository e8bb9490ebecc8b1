"""Polls a worker's job from the triggerer, so a deferred task holds no worker slot while it waits."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_quail.hooks.quail import QuailHook
from quail.worker.client import WorkerLost
from quail.worker.jobs import ENDED, LOST, job_ref


class QuailJobTrigger(BaseTrigger):
    """Fires when a job on the worker ends (done, failed or cancelled), with its status; or, state
    "lost", when the worker no longer answers or knows the job, and the task resubmits it.

    :param job_id: the job the operator submitted
    :param quail_conn_id: the `quail` connection naming the worker
    :param poll_interval: seconds between status calls
    :param location: the worker the task chose (one of the connection's); None: the connection's one
    """

    def __init__(self, job_id: str, quail_conn_id: str = QuailHook.default_conn_name, poll_interval: float = 2.0,
                 location: str | None = None):
        super().__init__()
        self.job_id = job_id
        self.quail_conn_id = quail_conn_id
        self.poll_interval = poll_interval
        self.location = location

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_quail.triggers.quail.QuailJobTrigger",
                {"job_id": self.job_id, "quail_conn_id": self.quail_conn_id, "poll_interval": self.poll_interval,
                 "location": self.location})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = QuailHook(self.quail_conn_id)
        client = await asyncio.to_thread(hook.client_at, self.location) if self.location else \
            await asyncio.to_thread(hook.get_conn)
        while True:
            try:
                status = await asyncio.to_thread(client.status, self.job_id)
            except WorkerLost as e:
                yield TriggerEvent({"job": self.job_id, "state": LOST, "documents": None, "stats": None,
                                    "predicted": None, "error": str(e), "worker": None})
                return
            self.log.info("Quail job %s: %s, %d/%d rows", job_ref(self.job_id), status["state"], status["rows_done"],
                          status["rows"])
            if status["state"] in ENDED:
                yield TriggerEvent({**status, "worker": client.location})
                return
            await asyncio.sleep(self.poll_interval)
