"""A task's windows as jobs: a worker of the task's fan-out that stops answering has its windows
moved to the fan-out's others, each computed once, with no wait for the partition's worker. (A
worker that dies and is started again, a retry re-attaching, a deferred window: operators/test_llm.py.)"""

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_quail import window_jobs
from airflow_quail.hooks.quail import FanOut, QuailHook
from airflow_quail.operators import LLMClassifyOperator
from quail.worker.client import WorkerClient

pytestmark = pytest.mark.slow  # the pool's workers load a model

TEXTS = [f"{w} report {i}: the {w} rose again" for i, w in
         enumerate(["match", "rates", "keeper", "budget", "league", "market", "striker", "vote"] * 2)]


def test_a_lost_workers_windows_move_to_the_others_not_home(pool, tmp_path, monkeypatch):
    locations, servers = pool
    dead = WorkerClient(f"grpc+unix://{tmp_path}/gone.sock", "tok")  # listed, but nothing listens
    real = QuailHook.fan_out

    def with_dead(self, home, dag, partition, cap):
        return FanOut([*real(self, home, dag, partition, cap).clients, dead])

    def no_wait(hook, route, log):
        raise AssertionError("a window waited for the partition's worker although others answer")

    monkeypatch.setattr(QuailHook, "fan_out", with_dead)
    monkeypatch.setattr(window_jobs, "reconnect", no_wait)
    source = tmp_path / "news.parquet"
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), source)
    op = LLMClassifyOperator(task_id="moved", source=str(source), text_column="text", labels=["sport", "money"],
                             target=str(tmp_path / "moved.parquet"), window_rows=4, quail_conn_id="quail_pool")
    moved = op.execute({"ti": SimpleNamespace(dag_id="news", task_id="moved", run_id="r1", map_index=-1)})
    assert moved["windows"] == 4 and set(moved["workers"]) == set(locations)  # none on the dead one
    assert sum(moved["workers"].values()) == 4
    jobs = [j for s in servers for j in s.jobs.values() if j.submission.origin.task_id == "moved"]
    assert sorted(j.submission.origin.window for j in jobs) == list(range(4))  # each window computed once
    assert pq.read_table(tmp_path / "moved.parquet").column("id").to_pylist() == list(range(len(TEXTS)))
