"""`make ui` and `make stop`: Airflow for the demo's home on 127.0.0.1, with one run of the jokes DAG
to look at.

`start` runs the api-server, scheduler, dag-processor and triggerer (LocalExecutor, the demo's SQLite
metadata), each in a session of its own with its pid and log under HOME/ui, and the simple auth
manager's `admin` user with a password kept in HOME/ui/passwords.json. It unpauses the digest DAG,
triggers quail_jokes through the REST API and waits for the run, so that the tasks' logs exist (a run
of `airflow dags test` leaves none), then prints the URL, the user and the password. `stop` stops
those processes and everything under them, and the local Quail workers of the QUAIL_HOME they used."""

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx

import procs

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG, DIGEST, USER = "quail_jokes", "quail_jokes_digest", "admin"
# the log servers would listen on every interface, and each task's log is read from its file here
SERVICES = {"api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}"],
            "scheduler": ["scheduler", "--skip-serve-logs"], "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer", "--skip-serve-logs"]}


def environment(home: Path, base: str) -> dict:
    env = dict(os.environ, AIRFLOW_HOME=str(home / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__EXECUTOR="LocalExecutor",
               AIRFLOW_CONN_QUAIL_DEMO_DB=json.dumps({"conn_type": "sqlite", "host": str(home / "quail_demo.db")}),
               AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager."
                                           "SimpleAuthManager",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "ui" / "passwords.json"),
               AIRFLOW__API__BASE_URL=base, AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{base}/execution/")
    env.setdefault("QUAIL_DAG_OUTPUT", str(home / "dags"))
    # the LocalExecutor keeps a process per slot (32 by default); the demo runs 4 tasks at once at most
    env.setdefault("AIRFLOW__CORE__PARALLELISM", "4")
    return env


def password(ui: Path) -> str:
    file = ui / "passwords.json"
    if not file.exists():
        with open(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            json.dump({USER: secrets.token_urlsafe(12)}, f)
    return json.loads(file.read_text())[USER]


def running(ui: Path) -> dict[str, int]:
    return {name: pid for name in SERVICES if (pid := procs.recorded(ui / f"{name}.pid"))}


def until(what: str, ui: Path, fn, timeout: float):
    """fn()'s first true value; gives up when a service has died or after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        try:
            if value := fn():
                return value
        except httpx.HTTPError:
            pass
        dead = set(SERVICES) - set(running(ui))
        if dead or time.time() > deadline:
            sys.exit(f"gave up waiting for {what}: " + (f"{', '.join(sorted(dead))} ended" if dead else "timed out")
                     + f" (logs in {ui}/*.log; `make stop` stops the rest)")
        time.sleep(2)


def ui_folder(home: Path) -> Path:
    """HOME/ui, created 0700: refused if another user owns it or may write it, since what it names
    (pid files, the QUAIL_HOME of the workers) is what `stop` signals and removes (quail/trust.py)."""
    from quail.trust import private_folder

    home.mkdir(parents=True, exist_ok=True)
    return private_folder(home / "ui")


def serve(home: Path, port: int) -> tuple[str, str]:
    """Starts the services (unless they run already); their URL and the user's password."""
    ui = ui_folder(home)
    if running(ui):
        base = (ui / "url").read_text().strip()
        print(f"Airflow already runs for {home} at {base} (`make stop` stops it)")
        return base, password(ui)
    base = f"http://127.0.0.1:{port}"
    env = environment(home, base)
    (ui / "url").write_text(base + "\n")
    from quail.paths import home as quail_home

    (ui / "quail_home").write_text(f"{quail_home()}\n")  # for `stop`, whatever its own environment
    with open(ui / "db-migrate.log", "w") as log:
        if subprocess.run([AIRFLOW, "db", "migrate"], env=env, stdout=log, stderr=subprocess.STDOUT).returncode:
            sys.exit(f"airflow db migrate failed: see {ui / 'db-migrate.log'}")
    pw = password(ui)
    for name, args in SERVICES.items():
        with open(ui / f"{name}.log", "w") as log:
            p = subprocess.Popen([AIRFLOW, *(a.format(port=port) for a in args)], env=env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.record(ui / f"{name}.pid", p.pid)
    print(f"started {', '.join(SERVICES)} (logs in {ui}); waiting for the api-server", flush=True)
    return base, pw


def demo_run(base: str, pw: str, ui: Path, rows: int | None, timeout: float) -> tuple[str, str]:
    """Unpauses both DAGs, triggers quail_jokes and waits for the run to end: its id and state."""
    token = until("the api-server", ui, lambda: httpx.post(f"{base}/auth/token", timeout=10, json={
        "username": USER, "password": pw}).json().get("access_token"), 300)
    api = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    for dag in (DIGEST, DAG):
        until(f"{dag} to be parsed", ui, lambda: api.get(f"/dags/{dag}").status_code == 200, 300)
        api.patch(f"/dags/{dag}", json={"is_paused": False}).raise_for_status()
    conf = {"rows": rows} if rows else {}
    answer = api.post(f"/dags/{DAG}/dagRuns", json={"logical_date": None, "conf": conf})
    answer.raise_for_status()
    run, states = answer.json()["dag_run_id"], {}
    print(f"triggered {DAG} run {run}" + (f" ({rows} jokes)" if rows else ""), flush=True)

    def ended():
        for t in api.get(f"/dags/{DAG}/dagRuns/{run}/taskInstances").json()["task_instances"]:
            if t["state"] and states.get(t["task_id"]) != t["state"]:
                states[t["task_id"]] = t["state"]
                print(f"  {t['task_id']}: {t['state']}", flush=True)
        state = api.get(f"/dags/{DAG}/dagRuns/{run}").json()["state"]
        return state if state in ("success", "failed") else None

    return run, until(f"run {run} to end", ui, ended, timeout)


def start(home: Path, port: int, rows: int | None, timeout: float) -> int:
    base, pw = serve(home, port)
    run, state = demo_run(base, pw, home / "ui", rows, timeout)
    print(f"\n{DAG} run {run}: {state}\n  {base}/dags/{DAG}/runs/{quote(run, safe='')}\n"
          f"URL: {base}\nuser: {USER}\npassword: {pw}\n`make stop` stops Airflow and the local Quail worker.")
    return 0 if state == "success" else 1


def stop(home: Path, timeout: float) -> int:
    if not (home / "ui").exists():
        print(f"nothing to stop for {home}")
        return 0
    ui = ui_folder(home)
    leaders = running(ui)
    stopped = procs.stop(list(leaders.values()), timeout * 2 / 3)
    for name in SERVICES:
        (ui / f"{name}.pid").unlink(missing_ok=True)
    workers = stop_workers(ui, timeout / 3)
    if not leaders and not workers:
        print(f"nothing to stop for {home}")
        return 0
    print(f"stopped {', '.join(f'{n} (pid {p})' for n, p in leaders.items()) or 'no Airflow process'}"
          f" and {len(stopped) - len(leaders)} processes under them; "
          f"{len(workers)} local Quail worker(s)" + (f" (pid {', '.join(map(str, workers))})" if workers else ""))
    return 0


def stop_workers(ui: Path, timeout: float) -> list[int]:
    """`quail worker stop` for the QUAIL_HOME the services had; waits for the workers to end."""
    from quail.trust import owned_file, private_folder
    from quail.worker.local import stop_local_workers

    if not owned_file(ui / "quail_home"):
        return []
    quail_home = Path((ui / "quail_home").read_text().strip())
    if not (quail_home / "worker").is_dir():
        return []
    private_folder(quail_home)  # a home another user could write names workers and pid files that are not ours
    pids = stop_local_workers(private_folder(quail_home / "worker"))
    procs.stop([p for p in pids if procs.started(p)], timeout)  # SIGTERM again, then SIGKILL if need be
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--home", type=Path, default=ROOT / "out", help="the demo's folder (out/)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--rows", type=int, help="jokes the run loads (the DAG's default: all 180)")
    parser.add_argument("--timeout", type=float, help="seconds to wait (start: for the run, 3600; stop: 60)")
    args = parser.parse_args()
    home = args.home.resolve()
    from quail.errors import QuailError

    try:
        if args.action == "start":
            return start(home, args.port, args.rows, args.timeout or 3600)
        return stop(home, args.timeout or 60)
    except QuailError as e:
        print(f"quail: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
