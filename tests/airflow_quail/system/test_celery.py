"""A CeleryExecutor deployment on loopback: Redis as the broker and result backend, api-server,
scheduler, dag-processor, triggerer and two Celery workers, with two Quail workers behind one
connection. Each task of the DAG is on a Celery queue that only one Celery worker consumes, so
every run's tasks run on different Celery workers, and still each run's Quail jobs land on one
Quail worker, where the classify reuses the filter's KV."""

import json
import shutil
import subprocess

import pytest

from quail.worker.client import WorkerClient
from tests.airflow_quail.conftest import free_port
from tests.airflow_quail.system.deployment import ended, login, served, services, start, stop, trigger

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # Airflow under Celery; two workers load smollm2

DAG = "quail_routed"
QUEUES = {"kept": "quail_filter", "topic": "quail_classify"}  # as the DAG puts them


@pytest.fixture
def redis(tmp_path):
    """Debian's redis-server on a free loopback port, nothing saved to disk; its URL."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's)")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.heavy
@pytest.mark.test_dags
def test_two_runs_under_the_celery_executor_keep_each_run_on_one_quail_worker(airflow_env, two_workers, redis,
                                                                               tmp_path):
    env, airflow = airflow_env
    procs, token_file = two_workers
    workers, token = list(procs), token_file.read_text()
    env, base = served(env, tmp_path)
    env = dict(env, AIRFLOW__CORE__EXECUTOR="CeleryExecutor", AIRFLOW__CELERY__BROKER_URL=f"{redis}/0",
               AIRFLOW__CELERY__RESULT_BACKEND=f"{redis}/1", AIRFLOW__CELERY__WORKER_CONCURRENCY="1",
               QUAIL_TEST_OUTPUT=str(tmp_path / "out"), AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps(
                   {"conn_type": "quail", "password": token,
                    # the run's KV on its worker is what routing keeps; stored answers, shared by the workers
                    # of one host, would hide a task sent to the wrong one
                    "extra": {"workers": workers, "answer_store": False}}))
    celery = {f"celery-{task}": ["celery", "worker", "--queues", queue, "--celery-hostname", f"{task}@quail-test",
                                 "--concurrency", "1", "--skip-serve-logs"] for task, queue in QUEUES.items()}
    airflow_procs = start(airflow, services(env) | celery, env, tmp_path)
    try:
        _, api = login(base)
        runs = [trigger(api, DAG) for _ in range(2)]
        for run in runs:
            state = ended(api, DAG, run, timeout=600)
            tasks = api.get(f"/dags/{DAG}/dagRuns/{run}/taskInstances").json()["task_instances"]
            assert state == "success", ([(t["task_id"], t["state"]) for t in tasks],
                                        (tmp_path / "scheduler.log").read_text()[-3000:])
            assert {t["task_id"]: t["queue"] for t in tasks} == QUEUES
    finally:
        stop(airflow_procs)
    for task in QUEUES:  # each Celery worker ran its queue's task of both runs, and nothing else
        log = (tmp_path / f"celery-{task}.log").read_text()
        assert all(f"{run}" in log for run in runs), task
    jobs = {loc: [j for j in WorkerClient(loc, token).status() if j["origin"]["run_id"] in runs] for loc in workers}
    for run in runs:
        [home] = [loc for loc, js in jobs.items() if any(j["origin"]["run_id"] == run for j in js)]
        stats = {j["operator"]: j["stats"] for j in jobs[home] if j["origin"]["run_id"] == run}
        assert set(stats) == set(QUEUES) and stats["topic"]["tokens_reused"]["retention"] > 0, run
