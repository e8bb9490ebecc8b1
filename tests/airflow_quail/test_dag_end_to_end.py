"""The example DAG through a real Airflow (`airflow dags test`, SQLite metadata database): every
task is its own process, the hook starts a local worker on demand, and later tasks reuse the KV
that the filter task computed. A run with reuse switched off gives the same outputs."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quail.worker.client import WorkerClient

ROOT = Path(__file__).parents[2]
TASKS = ["sport", "kind", "by_sport", "by_venue"]


@pytest.fixture
def airflow_env(tmp_path):
    env = dict(os.environ,
               AIRFLOW_HOME=str(tmp_path / "airflow"), QUAIL_HOME=str(tmp_path / "quail"),
               AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps({"conn_type": "quail",
                                                      "extra": {"model": "smollm2-135m", "dtype": "float32"}}),
               QUAIL_DAG_THRESHOLD="0.1")  # smollm2 gives every row P(yes) 0.04-0.27
    airflow = str(Path(sys.executable).parent / "airflow")
    for cmd in (["db", "migrate"], ["dags", "reserialize"]):
        subprocess.run([airflow, *cmd], env=env, check=True, capture_output=True)
    yield env, airflow
    for pid in (tmp_path / "quail" / "worker").glob("*.pid"):
        try:
            os.kill(int(pid.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass


def _run(env, airflow, out: Path, reuse: bool) -> dict:
    env = dict(env, QUAIL_DAG_OUTPUT=str(out), QUAIL_DAG_REUSE="1" if reuse else "0")
    done = subprocess.run([airflow, "dags", "test", "quail_news"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "state=success" in done.stdout + done.stderr, done.stderr[-3000:]
    return {t: pq.read_table(out / f"{t}.parquet").to_pylist() for t in TASKS}


def test_the_news_dag_reuses_kv_across_task_processes(airflow_env, tmp_path):
    env, airflow = airflow_env
    reused = _run(env, airflow, tmp_path / "reused", reuse=True)
    scratch = _run(env, airflow, tmp_path / "scratch", reuse=False)
    assert 0 < len(reused["sport"]) < 12
    for task in TASKS:
        assert len(reused[task]) == len(scratch[task])
        for a, b in zip(reused[task], scratch[task]):
            assert a.keys() == b.keys()
            for k in a:
                assert abs(a[k] - b[k]) < 1e-4 if isinstance(a[k], float) else a[k] == b[k]
    [sock] = (tmp_path / "quail" / "worker").glob("*.sock")
    jobs = WorkerClient(f"grpc+unix://{sock}").status()
    first_run = sorted({j["identity"]["run_id"] for j in jobs})[0]
    stats = {j["operator"]: j["stats"] for j in jobs if j["identity"]["run_id"] == first_run}
    assert set(stats) == set(TASKS)
    for task in TASKS[1:]:
        assert stats[task]["tokens_reused"]["retention"] > 0, task  # KV the sport task computed
    for s in stats.values():
        assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
