"""One real Airflow: api-server, scheduler, dag-processor and triggerer on 127.0.0.1 with the
LocalExecutor and SQLite; the news DAG is triggered through the REST API v2 with a token, its
tasks run in processes of their own, and the later ones reuse the KV the first one computed."""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.airflow_quail.conftest import worker_jobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(what: str, fn, timeout: float):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = fn()
            if value:
                return value
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_news_dag_under_a_real_airflow(airflow_env, tmp_path):
    env, airflow = airflow_env
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    (tmp_path / "passwords.json").write_text(json.dumps({"ci": "ci-password"}))
    env = dict(env, AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="ci:admin",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "passwords.json"),
               AIRFLOW__API__BASE_URL=base, AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{base}/execution/",
               QUAIL_DAG_OUTPUT=str(tmp_path / "out"))
    commands = [["api-server", "--host", "127.0.0.1", "--port", str(port)], ["scheduler", "--skip-serve-logs"],
                ["dag-processor"], ["triggerer", "--skip-serve-logs"]]
    logs = [open(tmp_path / f"{c[0]}.log", "w") for c in commands]
    procs = [subprocess.Popen([airflow, *c], env=env, stdout=log, stderr=log, start_new_session=True)
             for c, log in zip(commands, logs)]
    try:
        token = _until("the api-server", lambda: httpx.post(f"{base}/auth/token", json={
            "username": "ci", "password": "ci-password"}).json().get("access_token"), 120)
        api = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        _until("the DAG to be parsed", lambda: api.get("/dags/quail_news").status_code == 200, 120)
        api.patch("/dags/quail_news", json={"is_paused": False}).raise_for_status()
        run = api.post("/dags/quail_news/dagRuns", json={"logical_date": None}).json()["dag_run_id"]
        state = _until("the run to end", lambda: (s := api.get(f"/dags/quail_news/dagRuns/{run}").json()["state"])
                       in ("success", "failed") and s, 300)
        tasks = {t["task_id"]: t["state"] for t in api.get(f"/dags/quail_news/dagRuns/{run}/taskInstances")
                 .json()["task_instances"]}
        assert state == "success", (tasks, (tmp_path / "scheduler.log").read_text()[-3000:])
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    stats = {j["operator"]: j["stats"] for j in worker_jobs(tmp_path)}
    for task in ("kind", "by_sport", "by_venue"):
        assert stats[task]["tokens_reused"]["retention"] > 0, task  # across task processes
    assert (Path(tmp_path) / "out" / "report.txt").exists()
