"""Dynamic task mapping: a filter mapped over three Parquet partitions and a classify mapped over
its outputs, under `airflow dags test`. Each index is its own job (its map index in the job's
origin), equal to a run of its partition alone; each classify index reuses its filter index's
KV; a killed try of one index retries into that index's job only."""

import multiprocessing
import os
import signal
import time
from types import SimpleNamespace

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from airflow_quail.hooks.quail import QuailHook
from airflow_quail.operators import LLMFilterOperator
from tests.airflow_quail.conftest import ROOT, dags_test, same_rows, worker_jobs

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # `airflow dags test`; the local worker loads smollm2

PREDICATE = "Is this article about sport?"


def _filter(source: str, target: str) -> LLMFilterOperator:
    return LLMFilterOperator(task_id="kept", source=source, text_column="text", predicates=[PREDICATE],
                             threshold=0.1, target=target)


def _context(run_id: str, map_index: int) -> dict:
    return {"ti": SimpleNamespace(dag_id="quail_mapped", task_id="kept", run_id=run_id, map_index=map_index,
                                  try_number=1)}


def _killed_try(source: str, target: str) -> None:
    _filter(source, target).execute(_context("retry", 1))


@pytest.mark.test_dags
def test_a_mapped_filter_and_classify_run_each_partition_as_its_own_job(airflow_env, tmp_path, monkeypatch):
    env, airflow = airflow_env
    news = pacsv.read_csv(ROOT / "examples" / "news.csv")
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(3):
        pq.write_table(news.slice(4 * i, 4), parts / f"part-{i}.parquet")
    out = tmp_path / "out"
    dags_test(env, airflow, "quail_mapped", QUAIL_TEST_PARTITIONS=str(parts), QUAIL_TEST_OUTPUT=str(out))

    jobs = worker_jobs(tmp_path)
    assert sorted((j["operator"], j["origin"]["map_index"]) for j in jobs) == \
        [("kept", 0), ("kept", 1), ("kept", 2), ("topic", 0), ("topic", 1), ("topic", 2)]
    for j in jobs:
        if j["operator"] == "topic":  # each index's answers were computed ahead in its own filter index's job
            assert j["stats"]["tokens_reused"]["store"] > 0, j["origin"]

    for key in ("QUAIL_HOME", "AIRFLOW_CONN_QUAIL_DEFAULT"):  # the same local worker, from this process
        monkeypatch.setenv(key, env[key])
    alone = tmp_path / "alone"
    for i in range(3):  # each partition on its own, outside any DAG: the same rows and answers
        _filter(str(parts / f"part-{i}.parquet"), str(alone / f"kept-{i}.parquet")).execute(_context("alone", i))
        same_rows(pq.read_table(out / f"kept-{i}.parquet").to_pylist(), pq.read_table(alone / f"kept-{i}.parquet").to_pylist())

    # one index's try is killed mid-job; its retry attaches to that index's job, and no other computes
    client = QuailHook().get_conn()
    retry = tmp_path / "retry"
    for i in (0, 2):
        _filter(str(parts / f"part-{i}.parquet"), str(retry / f"kept-{i}.parquet")).execute(_context("retry", i))
    before = {j["origin"]["map_index"]: j for j in client.status() if j["origin"]["run_id"] == "retry"}
    killed = multiprocessing.get_context("spawn").Process(
        target=_killed_try, args=(str(parts / "part-1.parquet"), str(retry / "kept-1.parquet")))
    killed.start()
    deadline = time.time() + 120
    while 1 not in {j["origin"]["map_index"] for j in client.status() if j["origin"]["run_id"] == "retry"}:
        assert time.time() < deadline and killed.is_alive()
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.join()
    manifest = _filter(str(parts / "part-1.parquet"), str(retry / "kept-1.parquet")).execute(_context("retry", 1))
    after = {j["origin"]["map_index"]: j for j in client.status() if j["origin"]["run_id"] == "retry"}
    assert sorted(after) == [0, 1, 2]  # the retry made no new job: it attached to index 1's
    assert {i: after[i]["ref"] for i in (0, 2)} == {i: before[i]["ref"] for i in (0, 2)}
    assert manifest["stats"] == after[1]["stats"]
    same_rows(pq.read_table(retry / "kept-1.parquet").to_pylist(), pq.read_table(out / "kept-1.parquet").to_pylist())
