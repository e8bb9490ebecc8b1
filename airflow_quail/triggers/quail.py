"""Polls a worker's job from the triggerer, so a deferred task holds no worker slot while it waits."""

import asyncio

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_quail.hooks.quail import QuailHook
from quail.worker.jobs import ENDED


class QuailJobTrigger(BaseTrigger):
    """Fires when a job on the worker ends (done, failed or cancelled), with its status.

    :param job_id: the job the operator submitted
    :param quail_conn_id: the `quail` connection naming the worker
    :param poll_interval: seconds between status calls
    """

    def __init__(self, job_id: str, quail_conn_id: str = QuailHook.default_conn_name, poll_interval: float = 2.0):
        super().__init__()
        self.job_id = job_id
        self.quail_conn_id = quail_conn_id
        self.poll_interval = poll_interval

    def serialize(self):
        return ("airflow_quail.triggers.quail.QuailJobTrigger",
                {"job_id": self.job_id, "quail_conn_id": self.quail_conn_id, "poll_interval": self.poll_interval})

    async def run(self):
        client = await asyncio.to_thread(QuailHook(self.quail_conn_id).get_conn)
        while True:
            status = await asyncio.to_thread(client.status, self.job_id)
            self.log.info("Quail job %s: %s, %d/%d rows", self.job_id, status["state"], status["rows_done"],
                          status["rows"])
            if status["state"] in ENDED:
                yield TriggerEvent(status)
                return
            await asyncio.sleep(self.poll_interval)
