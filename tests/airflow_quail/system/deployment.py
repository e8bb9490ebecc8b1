"""Airflow's own processes on 127.0.0.1 for the deployment tests: started with a user for the REST
API, each stopped by its pid."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.airflow_quail.conftest import free_port

USER, PASSWORD = "ci", "ci-password"


def until(what: str, fn, timeout: float):
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


def served(env: dict, tmp_path: Path) -> tuple[dict, str]:
    """The environment of an api-server on a free loopback port with one admin user, and its URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    (tmp_path / "passwords.json").write_text(json.dumps({USER: PASSWORD}))
    return dict(env, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
                AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "passwords.json"),
                AIRFLOW__API__BASE_URL=base, AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{base}/execution/",
                QUAIL_TEST_API_PORT=str(port)), base


def start(airflow: str, commands: dict[str, list[str]], env: dict, tmp_path: Path) -> list[subprocess.Popen]:
    """One `airflow` process per named command, each in a session of its own, logging to
    tmp_path/<name>.log."""
    procs = []
    for name, command in commands.items():
        log = open(tmp_path / f"{name}.log", "w")
        procs.append(subprocess.Popen([airflow, *command], env=env, stdout=log, stderr=log, start_new_session=True))
    return procs


def services(env: dict) -> dict[str, list[str]]:
    """Airflow's services but its workers: the api-server on the environment's port."""
    return {"api-server": ["api-server", "--host", "127.0.0.1", "--port", env["QUAIL_TEST_API_PORT"]],
            "scheduler": ["scheduler", "--skip-serve-logs"], "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer", "--skip-serve-logs"]}


def login(base: str) -> tuple[str, httpx.Client]:
    """A token for the user, once the api-server answers, and a REST API v2 client carrying it."""
    token = until("the api-server", lambda: httpx.post(f"{base}/auth/token", json={
        "username": USER, "password": PASSWORD}).json().get("access_token"), 180)
    return token, httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def trigger(api: httpx.Client, dag_id: str, conf: dict | None = None) -> str:
    until(f"{dag_id} to be parsed", lambda: api.get(f"/dags/{dag_id}").status_code == 200, 180)
    api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
    return api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}}).json()["dag_run_id"]


def ended(api: httpx.Client, dag_id: str, run: str, timeout: float = 300) -> str:
    return until(f"run {run} to end", lambda: (s := api.get(f"/dags/{dag_id}/dagRuns/{run}").json()["state"])
                 in ("success", "failed") and s, timeout)


def stop(procs: list[subprocess.Popen]) -> None:
    """Each process stops its own children: signalling the whole group races the LocalExecutor's
    shutdown, whose pool then waits forever for workers that died first."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                # the scheduler's LocalExecutor may keep "waiting for running tasks to finish" after
                # the run has ended; its log says to signal again not to wait, and on a loaded
                # machine even that can hang: what is still there then is killed below
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # anything it left behind
            except ProcessLookupError:
                pass
