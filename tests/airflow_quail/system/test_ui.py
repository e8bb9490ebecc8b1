"""`make ui` and `make stop` (scripts/ui.py) on a home of the test's own: Airflow comes up on loopback
with one run of the jokes DAG, the user it prints logs in through the REST API, a task's log, read
from the api-server, ends with the Quail summary, and `stop` leaves no process behind."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.airflow_quail.conftest import JOKES, ROOT, free_port

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # `make ui`: Airflow; its local worker loads smollm2


def _started(pid: int) -> str | None:
    """When a running process started (with its pid, it names that process), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19] if fields[0] not in "ZX" else None


def _under(pids: set[int]) -> dict[int, str]:
    """The running processes under `pids`, with their start times."""
    parent = {}
    for p in Path("/proc").iterdir():
        try:
            stat = (p / "stat").read_text() if p.name.isdigit() else ""
        except OSError:
            continue
        if stat:
            parent[int(p.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, more = set(), set(pids)
    while more:
        found |= more
        more = {p for p, pp in parent.items() if pp in more} - found
    return {p: start for p in found - pids if (start := _started(p))}


def _naming(home: Path) -> dict[int, str]:
    """Running processes whose command line or environment names `home`, with their start times."""
    found = set()
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and str(home).encode() in (p / "cmdline").read_bytes() + (p / "environ").read_bytes():
                found.add(int(p.name))
        except OSError:
            continue
    return {p: start for p in found if (start := _started(p))}


def _the_task_log_ends_with_the_quail_summary(printed: dict, run: str) -> None:
    base = printed["URL"]
    token = httpx.post(f"{base}/auth/token", json={"username": printed["user"], "password": printed["password"]})
    api = httpx.Client(base_url=f"{base}/api/v2", timeout=30, headers={
        "Authorization": f"Bearer {token.json()['access_token']}", "Accept": "application/json"})
    events = api.get(f"/dags/quail_jokes/dagRuns/{run}/taskInstances/audience/logs/1").json()["content"]
    assert not any("Could not read served logs" in e["event"] for e in events)
    operator = [e["event"] for e in events if e.get("logger", "").startswith("airflow.task.operators.")]
    summary = operator[-1].splitlines()
    assert summary[0].startswith("audience: rows out ") and summary[1].startswith("  actual:    "), operator[-3:]
    assert summary[2].startswith("  predicted: ") and summary[3].startswith("  forward passes "), summary
    assert api.get("/dags/quail_jokes_digest").json()["is_paused"] is False


@pytest.mark.heavy
def test_make_ui_serves_a_run_with_its_task_logs_and_make_stop_leaves_no_process(tmp_path):
    env = dict(os.environ, QUAIL_HOME=str(tmp_path / "quail"), QUAIL_DAG_OUTPUT=str(tmp_path / "dags"),
               AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps({"conn_type": "quail",
                                                      "extra": {"model": "smollm2-135m", "dtype": "float32"}}),
               QUAIL_DAG_THRESHOLD="0.1")  # smollm2 gives every row a low P(yes)
    ui, ours = [sys.executable, str(ROOT / "scripts" / "ui.py")], {}
    try:
        done = subprocess.run([*ui, "start", "--home", str(tmp_path), "--port", str(free_port()), "--rows", str(JOKES),
                               "--timeout", "900"], env=env, capture_output=True, text=True, timeout=1500)
        leaders = {int(f.read_text().split()[0]) for f in (tmp_path / "ui").glob("*.pid")}
        ours = {p: start for p in leaders if (start := _started(p))} | _under(leaders) | _naming(tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert len(list((tmp_path / "ui").glob("*.pid"))) == 4
        printed = dict(re.findall(r"^(URL|user|password): (\S+)$", done.stdout, re.M))
        [run] = re.findall(r"^quail_jokes run (\S+): success$", done.stdout, re.M)
        _the_task_log_ends_with_the_quail_summary(printed, run)
        ours |= _under(set(ours)) | _naming(tmp_path)
    finally:
        stopped = subprocess.run([*ui, "stop", "--home", str(tmp_path)], env=env, capture_output=True, text=True,
                                 timeout=120)
        left = {p for p, start in ours.items() if _started(p) == start} | set(_naming(tmp_path))
        for pid in left:  # so that a failure here leaves nothing behind either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert stopped.returncode == 0 and "1 local Quail worker(s)" in stopped.stdout, stopped.stdout + stopped.stderr
    assert not left, (stopped.stdout, left)
    again = subprocess.run([*ui, "stop", "--home", str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to stop" in again.stdout
