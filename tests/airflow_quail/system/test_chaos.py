"""Chaos: a real Airflow (LocalExecutor) runs a 4-task Quail DAG, with one retry a task, while the
local Quail worker under it is killed with -9 at seeded random moments, at least twice a run. Both
runs succeed without spending a retry, their outputs equal an undisturbed run's, and no worker,
staging folder or temporary file is left over."""

import json
import os
import random
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quail.worker.liveness import holder
from quail.worker.local import stop_local_workers
from tests.airflow_quail.conftest import same_rows
from tests.airflow_quail.system.deployment import ended, login, served, services, start, stop, trigger, until

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # Airflow's processes; the local worker loads smollm2

DAG = "quail_chaos"
TASKS = ("sport_kept", "sport_topic", "money_kept", "money_topic")
KILLS = 2  # a run


def _live_worker(folder: Path) -> int | None:
    return next((pid for f in folder.glob("*.pid") if (pid := holder(f))), None)


def _kill_while_running(api, run: str, folder: Path, rng: random.Random) -> list[tuple[float, int]]:
    """Kills the live worker KILLS times while the run goes on, each a random 1-8 s after a worker
    is seen (so also while one is loading its model); returns (seconds after the run began, pid)."""
    began, kills = time.monotonic(), []
    while len(kills) < KILLS and api.get(f"/dags/{DAG}/dagRuns/{run}").json()["state"] in ("queued", "running"):
        if (pid := _live_worker(folder)) is None:
            time.sleep(0.2)
            continue
        time.sleep(rng.uniform(1.0, 8.0))
        if _live_worker(folder) == pid:
            os.kill(pid, signal.SIGKILL)
            kills.append((round(time.monotonic() - began, 1), pid))
            until(f"worker {pid} to release its pid file", lambda: _live_worker(folder) != pid, 30)
    return kills


def _processes_naming(path: Path) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(path).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


@pytest.mark.heavy
@pytest.mark.test_dags
def test_runs_survive_a_worker_killed_at_random_moments(airflow_env, tmp_path):
    env, airflow = airflow_env
    env, base = served(env, tmp_path)
    home, out = Path(env["QUAIL_HOME"]), tmp_path / "out"
    texts = [f"{line.strip()} (item {i})" for i in range(5) for line in
             (Path(__file__).parents[3] / "examples" / "news.csv").read_text().splitlines()[1:]]
    out.mkdir()
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), tmp_path / "source.parquet")
    env = dict(env, AIRFLOW__CORE__EXECUTOR="LocalExecutor", QUAIL_TEST_OUTPUT=str(out),
               QUAIL_TEST_SOURCE=str(tmp_path / "source.parquet"), AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps(
                   # stored answers would let a later run skip the work the kills interrupt
                   {"conn_type": "quail", "extra": {"model": "smollm2-135m", "dtype": "float32", "arena_pages": 1024,
                                                    "answer_store": False, "worker_lost_timeout": 300}}))
    procs = start(airflow, services(env), env, tmp_path)
    rng, runs = random.Random(24), {}
    try:
        _, api = login(base)
        for chaos in (True, True, False):  # the last run is the undisturbed one
            run = trigger(api, DAG)
            kills = _kill_while_running(api, run, home / "worker", rng) if chaos else []
            state = ended(api, DAG, run, timeout=900)
            tries = {t["task_id"]: (t["state"], t["try_number"]) for t in
                     api.get(f"/dags/{DAG}/dagRuns/{run}/taskInstances").json()["task_instances"]}
            print(f"run {run}: {state}, kills (s, pid) {kills}, tries {tries}")
            assert state == "success", (tries, (tmp_path / "scheduler.log").read_text()[-3000:])
            assert tries == {t: ("success", 1) for t in TASKS}  # no try failed for a worker's death
            runs[run] = kills
    finally:
        stop(procs)
    *chaotic, calm = runs
    assert all(len(runs[run]) == KILLS for run in chaotic)
    for run in chaotic:
        for task in TASKS:
            name = f"{task}.parquet"
            same_rows(pq.read_table(out / run / name).to_pylist(), pq.read_table(out / calm / name).to_pylist())
    stop_local_workers(home / "worker")
    until("the local workers to exit", lambda: not _processes_naming(home), 60)
    left = [p for p in out.rglob("*") if p.name.startswith(".")] + list(home.rglob("*.tmp"))
    assert left == [] and not (home / "staging").exists() and not list((home / "worker").glob("*.pid"))
