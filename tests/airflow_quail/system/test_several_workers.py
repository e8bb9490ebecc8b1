"""Two Quail workers behind one connection, under real `airflow dags test` runs: every task of a
run goes to the run's worker, so a run's classify reuses its filter's KV there; when a run's
worker dies, the run goes to the other one and gives the same answers. `quail worker status --all`
lists both workers with their load."""

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quail.worker.client import WorkerClient
from quail.worker.routing import hash_order

DAG = "quail_routed"
DAG_FILE = Path(__file__).parent / "dags" / "quail_routed.py"


def _dag_test(env: dict, date: datetime) -> str:
    """`dag.test()` of the DAG in a process of its own, run after (and named for) `date`."""
    code = ("import datetime, importlib.util, sys; "
            "spec = importlib.util.spec_from_file_location('routed', sys.argv[1]); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            "date = datetime.datetime.fromisoformat(sys.argv[2]); "
            "print('run ended:', module.dag.test(run_after=date, logical_date=date).state)")
    done = subprocess.run([sys.executable, "-c", code, str(DAG_FILE), date.isoformat()], env=env, capture_output=True,
                          text=True)
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "run ended: success" in log, log[-3000:]
    return log


def _runs_by_worker(workers: list[str], token: str) -> dict[str, set[str]]:
    runs = {}
    for location in workers:
        for job in WorkerClient(location, token).status():
            runs.setdefault(job["identity"]["run_id"], set()).add(location)
    return runs


def _retention(location: str, token: str, run_id: str) -> dict[str, int]:
    return {j["operator"]: j["stats"]["tokens_reused"]["retention"] for j in WorkerClient(location, token).status()
            if j["identity"]["run_id"] == run_id}


@pytest.mark.test_dags
def test_each_run_stays_on_its_worker_and_a_dead_workers_run_moves(airflow_env, two_workers, tmp_path):
    env, _ = airflow_env
    procs, token_file = two_workers
    workers, token = list(procs), token_file.read_text()
    env = dict(env, QUAIL_TEST_OUTPUT=str(tmp_path / "out"), AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps(
        {"conn_type": "quail", "password": token,
                    # the run's KV on its worker is what routing keeps; stored answers, shared by the workers
                    # of one host, would hide a task sent to the wrong one
                    "extra": {"workers": workers, "answer_store": False}}))
    dates = [datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=d) for d in range(64)]
    run_id = lambda date: f"manual__{date.isoformat()}"  # what dag.test(run_after=date) names its run
    home = lambda date: hash_order(workers, f"{DAG}\x1f{run_id(date)}")[0]
    first = dates[0]
    second = next(d for d in dates if home(d) != home(first))  # runs on both workers
    third = next(d for d in dates if d not in (first, second))
    for date in (first, second, third):
        _dag_test(env, date)
    # every task of a run on the run's worker, and the classify reused the filter's KV there
    assert _runs_by_worker(workers, token) == {run_id(d): {home(d)} for d in (first, second, third)}
    for date in (first, second, third):
        assert _retention(home(date), token, run_id(date))["topic"] > 0, date

    dead = home(third)
    procs[dead].kill()
    procs[dead].wait()
    [alive] = [w for w in workers if w != dead]
    fourth = next(d for d in dates if home(d) == dead and d not in (first, second, third))
    log = _dag_test(env, fourth)
    assert f"does not answer: failing over to {alive}" in log
    retention = _retention(alive, token, run_id(fourth))
    assert set(retention) == {"kept", "topic"} and retention["topic"] > 0  # both tasks failed over together
    answers = [pq.read_table(tmp_path / "out" / run_id(d) / "topic.parquet").to_pylist() for d in (first, fourth)]
    assert [r["label"] for r in answers[0]] == [r["label"] for r in answers[1]]

    listing = subprocess.run([sys.executable, "-m", "quail.cli", "worker", "status", "--all", "--token-file",
                              str(token_file), "--worker", workers[0], "--worker", workers[1]], env=env,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(listing) == 2
    assert any(line.startswith(f"{dead}  does not answer") for line in listing)
    [line] = [line for line in listing if line.startswith(alive)]
    assert "smollm2-135m on cpu, 0 job(s), 0 queued tokens" in line and "pages free" in line
