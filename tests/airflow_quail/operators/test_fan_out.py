"""One big table over a pool: with two workers on the connection, one task's windows run on both at
once, each window computed once, the output assembled in order and equal to one worker's;
`max_workers` caps it. (A lost worker's windows moving to the others: test_window_jobs.py.)"""

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_quail.operators import LLMClassifyOperator

pytestmark = pytest.mark.slow  # the pool's workers load a model

TEXTS = [f"{w} report {i}: the {w} rose again" for i, w in
         enumerate(["match", "rates", "keeper", "budget", "league", "market", "striker", "vote"] * 2)]


def _classify(tmp_path, conn: str, name: str, **kwargs) -> LLMClassifyOperator:
    source = tmp_path / "news.parquet"
    if not source.exists():
        pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), source)
    return LLMClassifyOperator(task_id=name, source=str(source), text_column="text", labels=["sport", "money"],
                               target=str(tmp_path / f"{name}.parquet"), window_rows=4, quail_conn_id=conn, **kwargs)


def _context(task: str) -> dict:
    return {"ti": SimpleNamespace(dag_id="news", task_id=task, run_id="r1", map_index=-1, try_number=1)}


def test_a_tasks_windows_run_on_every_worker_once_and_in_order(pool, tmp_path):
    locations, servers = pool
    spread = _classify(tmp_path, "quail_pool", "spread").execute(_context("spread"))
    alone = _classify(tmp_path, "quail_one", "alone").execute(_context("alone"))
    assert spread["windows"] == alone["windows"] == 4
    assert spread["workers"] == dict.fromkeys(locations, 2)  # 4 windows over 2 workers
    assert alone["workers"] == {locations[0]: 4}
    jobs = [j for s in servers for j in s.jobs.values() if j.submission.origin.task_id == "spread"]
    assert sorted(j.submission.origin.window for j in jobs) == [0, 1, 2, 3]  # each window once
    a, b = pq.read_table(tmp_path / "spread.parquet"), pq.read_table(tmp_path / "alone.parquet")
    assert a.column("id").to_pylist() == list(range(len(TEXTS))) and a.column("label") == b.column("label")
    assert all(abs(x - y) < 1e-4 for x, y in zip(a.column("p_sport").to_pylist(), b.column("p_sport").to_pylist()))
    assert spread["stats"]["tokens_naive"] == alone["stats"]["tokens_naive"]
    # how each came to its first worker: the pool's partition home, the one worker of quail_one
    assert spread["routing"]["routed"] == "home" and spread["routing"]["worker"] == spread["worker"]
    assert alone["routing"] == {"routed": "direct", "worker": locations[0], "home": locations[0],
                                "why": "the only worker its connection names (or a local one)"}


def test_max_workers_caps_the_fan_out(pool, tmp_path):
    locations, _ = pool
    capped = _classify(tmp_path, "quail_pool", "capped", max_workers=1).execute(_context("capped"))
    assert list(capped["workers"]) == [capped["worker"]] and capped["workers"][capped["worker"]] == 4
    with pytest.raises(Exception, match="max_workers must be a whole number above 0"):
        _classify(tmp_path, "quail_pool", "bad", max_workers=0)
