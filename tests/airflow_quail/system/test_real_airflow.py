"""One real Airflow: api-server, scheduler, dag-processor and triggerer on 127.0.0.1 with the
LocalExecutor and SQLite; the jokes DAG is triggered through the REST API v2 with a token, its
tasks run in processes of their own, and the later ones reuse the KV the first one computed."""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.airflow_quail.conftest import JOKES, worker_jobs


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


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _the_quail_page(base: str, token: str, run: str, tmp_path: Path) -> None:
    """The plugin is mounted on the real api-server: a user sees the run's Quail tasks, an anonymous
    request is refused; headless Chromium, where installed, takes a screenshot of the page."""
    import shutil

    assert httpx.get(f"{base}/quail/runs/quail_jokes/{run}").status_code in (401, 403)
    page = httpx.get(f"{base}/quail/runs/quail_jokes/{run}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and all(t in page.text for t in ("tech", "theme", "by_technology", "audience"))
    chromium = shutil.which("chromium")
    if chromium is None:
        return
    # the page is self-contained (inline SVG, no script or asset), so its saved HTML renders as served
    (tmp_path / "quail.html").write_text(page.text)
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,780",
                    f"--screenshot={tmp_path / 'quail-page.png'}", f"file://{tmp_path / 'quail.html'}"],
                   check=True, capture_output=True, timeout=120)
    assert (tmp_path / "quail-page.png").stat().st_size > 10_000


def test_jokes_dag_under_a_real_airflow(airflow_env, tmp_path):
    env, airflow = airflow_env
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    (tmp_path / "passwords.json").write_text(json.dumps({"ci": "ci-password"}))
    env = dict(env, AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="ci:admin",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "passwords.json"),
               AIRFLOW__API__BASE_URL=base, AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{base}/execution/",
               QUAIL_DAG_OUTPUT=str(tmp_path / "out"),
               AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(tmp_path / "ol"),
                                                            "append": True}))
    commands = [["api-server", "--host", "127.0.0.1", "--port", str(port)], ["scheduler", "--skip-serve-logs"],
                ["dag-processor"], ["triggerer", "--skip-serve-logs"]]
    logs = [open(tmp_path / f"{c[0]}.log", "w") for c in commands]
    procs = [subprocess.Popen([airflow, *c], env=env, stdout=log, stderr=log, start_new_session=True)
             for c, log in zip(commands, logs)]
    try:
        token = _until("the api-server", lambda: httpx.post(f"{base}/auth/token", json={
            "username": "ci", "password": "ci-password"}).json().get("access_token"), 120)
        api = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        _until("the DAG to be parsed", lambda: api.get("/dags/quail_jokes").status_code == 200, 120)
        api.patch("/dags/quail_jokes", json={"is_paused": False}).raise_for_status()
        run = api.post("/dags/quail_jokes/dagRuns", json={"logical_date": None, "conf": {"rows": JOKES}}).json()["dag_run_id"]
        state = _until("the run to end", lambda: (s := api.get(f"/dags/quail_jokes/dagRuns/{run}").json()["state"])
                       in ("success", "failed") and s, 300)
        tasks = {t["task_id"]: t["state"] for t in api.get(f"/dags/quail_jokes/dagRuns/{run}/taskInstances")
                 .json()["task_instances"]}
        assert state == "success", (tasks, (tmp_path / "scheduler.log").read_text()[-3000:])
        _the_quail_page(base, token, run, tmp_path)
    finally:
        # each process stops its own children: signalling the whole group races the LocalExecutor's
        # shutdown, whose pool then waits forever for workers that died first
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    # seen once in CI: the scheduler's LocalExecutor kept "waiting for running tasks
                    # to finish" after the run had ended; its log says to signal again not to wait
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
            finally:
                _kill_group(p.pid)  # anything it left behind
    stats = {j["operator"]: j["stats"] for j in worker_jobs(tmp_path)}
    for task in ("theme", "by_technology", "audience"):
        assert stats[task]["tokens_reused"]["retention"] > 0, task  # across task processes
    assert (Path(tmp_path) / "out" / "report.txt").exists()
    events = [json.loads(line) for line in (tmp_path / "ol").read_text().splitlines()]
    [tech] = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "quail_jokes.tech"]
    assert [d["name"] for d in tech["inputs"]] == ["jokes"] and [d["name"] for d in tech["outputs"]] == ["tech_jokes"]
