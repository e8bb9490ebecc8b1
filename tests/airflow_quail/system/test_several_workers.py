"""Two Quail workers behind one connection, each with its own QUAIL_HOME, sharing one answer store
on a real PostgreSQL, under real `airflow dags test` runs: every run of the DAG goes to its home
worker, so a run's classify reuses its filter's KV there and the next day's run lands there too;
when that worker is killed with -9, the next run goes to the other one, computes none of the stored
answers and gives the same ones. `quail worker status --all` lists both workers with their load and
store, never the store's password."""

import json
import socket
import subprocess
import sys
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quail.worker.client import WorkerClient
from quail.worker.routing import placement
from tests.airflow_quail.conftest import same_rows, serving
from tests.postgres import throwaway_cluster

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # Airflow's processes; `quail worker serve` loads smollm2

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


@contextmanager
def _statsd(env: dict):
    """Airflow's StatsD metrics on, sent to a UDP socket here: the env, and the datagrams' lines."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        lines: list[str] = []
        yield dict(env, AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
                   AIRFLOW__METRICS__STATSD_PORT=str(udp.getsockname()[1])), lines
        while True:
            try:
                lines += udp.recv(65536).decode().splitlines()
            except BlockingIOError:
                break


def _sent(lines: list[str], name: str) -> list[int]:
    """The values of the counter `airflow.<name>` in StatsD lines (`name:value|c`)."""
    return [int(line.split(":")[1].split("|")[0]) for line in lines if line.startswith(f"airflow.{name}:")]


def _runs_by_worker(workers: list[str], token: str) -> dict[str, set[str]]:
    runs = {}
    for location in workers:
        for job in WorkerClient(location, token).status():
            runs.setdefault(job["origin"]["run_id"], set()).add(location)
    return runs


def _jobs(location: str, token: str, run_id: str) -> dict[str, dict]:
    """The stats of each task of the run that the worker computed."""
    return {j["operator"]: j["stats"] for j in WorkerClient(location, token).status()
            if j["origin"]["run_id"] == run_id}


def _private(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


@pytest.mark.test_dags
def test_a_dags_runs_stay_on_its_worker_and_a_dead_workers_answers_are_shared(airflow_env, tmp_path):
    env, _ = airflow_env
    with throwaway_cluster() as cluster, serving(tmp_path, "--answer-store-file",  # a password on a command
                                                 _private(tmp_path / "store-url", cluster.url("s3cret-pw")),
                                                 homes=True) as (procs, token_file):  # line is refused
        workers, token = list(procs), token_file.read_text()
        env = dict(env, QUAIL_TEST_OUTPUT=str(tmp_path / "out"), AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps(
            {"conn_type": "quail", "password": token, "extra": {"workers": workers}}))
        run_id = lambda date: f"manual__{date.isoformat()}"  # what dag.test(run_after=date) names its run
        first, second, third = (datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=d) for d in range(3))
        home = placement(workers, DAG, None)[0]
        [other] = [w for w in workers if w != home]
        for date in (first, second):
            _dag_test(env, date)
        # both days' runs on the DAG's worker: the route is the DAG's, never the run's
        assert _runs_by_worker(workers, token) == {run_id(first): {home}, run_id(second): {home}}
        day1 = _jobs(home, token, run_id(first))
        assert day1["kept"]["tokens_computed"] > 0
        assert day1["topic"]["tokens_reused"]["retention"] + day1["topic"]["tokens_reused"]["store"] > 0
        assert all(s["tokens_computed"] == 0 for s in _jobs(home, token, run_id(second)).values())

        procs[home].kill()  # kill -9: its QUAIL_HOME and memory are gone with it, the store is not
        procs[home].wait()
        with _statsd(env) as (statsd_env, lines):  # each task's metrics, through Airflow's own Stats
            log = _dag_test(statsd_env, third)
        assert f"{home} did not answer: it failed over to {other}" in log and f"window(s) ran on {other} (1)" in log
        moved = _jobs(other, token, run_id(third))
        assert set(moved) == {"kept", "topic"}
        assert all(s["tokens_computed"] == 0 and s["tokens_reused"]["store"] == s["tokens_naive"] > 0
                   for s in moved.values()), moved
        assert _sent(lines, "quail.routed.failover") == [1, 1]  # both tasks, failed over from the dead home
        assert _sent(lines, "quail.tokens_computed") == [0, 0]
        assert sorted(_sent(lines, "quail.tokens_reused.store")) == sorted(s["tokens_naive"] for s in moved.values())
        for task in ("kept", "topic"):
            same_rows(*(pq.read_table(tmp_path / "out" / run_id(d) / f"{task}.parquet").to_pylist()
                        for d in (first, third)))

        listing = subprocess.run([sys.executable, "-m", "quail.cli", "worker", "status", "--all", "--token-file",
                                  str(token_file), "--worker", workers[0], "--worker", workers[1]], env=env,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(listing) == 2
        assert any(line.startswith(f"{home}  does not answer") for line in listing)
        [line] = [line for line in listing if line.startswith(other)]
        assert "smollm2-135m on cpu, 0 job(s), 0 queued tokens" in line and "pages free" in line
        assert f"answers in postgresql://127.0.0.1:{cluster.port}/postgres" in line
        shown = log + "\n".join(listing) + "".join(p.read_text() for p in tmp_path.glob("quail-worker-*.log"))
        assert "s3cret-pw" not in shown
