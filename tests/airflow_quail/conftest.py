import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from quail.errors import QuailError
from quail.worker.local import stop_local_workers
from quail.worker.tokens import read_token

ROOT = Path(__file__).parents[2]


@pytest.fixture
def airflow_env(tmp_path, request):
    """A real Airflow home (SQLite metadata database) with the example DAGs (or, marked test_dags,
    the tests' DAGs) serialized; the embedded smollm2 in fp32 behind quail_default, and the local
    worker stopped afterwards."""
    dags = Path(__file__).parent / "system" / "dags" if request.node.get_closest_marker("test_dags") else ROOT / "dags"
    env = dict(os.environ,
               AIRFLOW_HOME=str(tmp_path / "airflow"), QUAIL_HOME=str(tmp_path / "quail"),
               AIRFLOW__CORE__DAGS_FOLDER=str(dags), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps({"conn_type": "quail",
                                                      "extra": {"model": "smollm2-135m", "dtype": "float32"}}),
               AIRFLOW_CONN_QUAIL_DEMO_DB=json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "demo.db")}),
               QUAIL_DAG_THRESHOLD="0.1")  # smollm2 gives every row a low P(yes)
    airflow = str(Path(sys.executable).parent / "airflow")
    for cmd in (["db", "migrate"], ["dags", "reserialize"]):
        subprocess.run([airflow, *cmd], env=env, check=True, capture_output=True)
    yield env, airflow
    stop_local_workers(tmp_path / "quail" / "worker")


JOKES = 24  # of the jokes DAG's 180 rows: enough for survivors, small enough for smollm2 in fp32


def dags_test(env: dict, airflow: str, dag_id: str, conf: dict | None = None, **extra_env) -> str:
    """Runs the DAG with `airflow dags test`; returns its log."""
    extra = ["-c", json.dumps(conf)] if conf else []
    done = subprocess.run([airflow, "dags", "test", dag_id, *extra], env=dict(env, **extra_env), capture_output=True,
                          text=True)
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "state=success" in log, done.stderr[-3000:]
    return log


def same_rows(a: list[dict], b: list[dict]) -> None:
    """Equal rows, floats within 1e-4 (fp32)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert abs(x[k] - y[k]) < 1e-4 if isinstance(x[k], float) else x[k] == y[k]


def worker_jobs(tmp_path: Path) -> list[dict]:
    """Jobs on the local worker, first run first."""
    from quail.worker.client import WorkerClient

    [sock] = (tmp_path / "quail" / "worker").glob("*.sock")
    return sorted(WorkerClient(f"grpc+unix://{sock}", read_token(f"grpc+unix://{sock}")).status(),
                  key=lambda j: j["origin"]["run_id"])


@pytest.fixture
def local_default(tmp_path, monkeypatch):
    """quail_default on a local worker started on demand under this test's QUAIL_HOME; stopped after."""
    monkeypatch.setenv("QUAIL_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_DEFAULT", json.dumps(
        {"conn_type": "quail", "extra": {"model": "smollm2-135m", "dtype": "float32", "arena_pages": 1024}}))
    yield tmp_path / "worker"
    stop_local_workers(tmp_path / "worker")


@contextmanager
def serving(tmp_path: Path, *args: str, homes: bool = False):
    """Two `quail worker serve` processes (smollm2, fp32) on loopback ports with one token, given
    `args` too, each with a QUAIL_HOME of its own if `homes` (as two hosts' are): {location:
    process}, the token file. Each is killed afterwards."""
    from quail.worker.client import WorkerClient

    token_file = tmp_path / "worker.token"
    token_file.write_text("two-workers-token")
    token_file.chmod(0o600)
    procs = {}
    try:
        for i in range(2):
            port = free_port()
            log = open(tmp_path / f"quail-worker-{i}.log", "w")
            env = dict(os.environ, QUAIL_ANSWER_STORE_KEY="the key the pool's workers share")
            if homes:
                env["QUAIL_HOME"] = str(tmp_path / f"quail-home-{i}")
            procs[f"grpc://127.0.0.1:{port}"] = subprocess.Popen(
                [sys.executable, "-m", "quail.cli", "worker", "serve", "--model", "smollm2-135m", "--dtype", "float32",
                 "--port", str(port), "--token-file", str(token_file), "--arena-pages", "1024", "--threads", "1",
                 *args], stdout=log, stderr=log, start_new_session=True, env=env)
        for location, proc in procs.items():
            deadline = time.time() + 180
            while True:
                try:
                    WorkerClient(location, "two-workers-token", timeout=5).info()
                    break
                except QuailError:
                    assert proc.poll() is None and time.time() < deadline, f"the worker at {location} did not start"
                    time.sleep(0.5)
        yield procs, token_file
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture
def pool(smollm2, tmp_path, monkeypatch):
    """Two in-process workers (smollm2, fp32) behind the connection quail_pool, and the first alone
    behind quail_one: their locations and servers, shut down afterwards."""
    from quail.executor.engine import PhysicalSettings
    from quail.session import Session
    from quail.worker.server import Worker

    locations = [f"grpc+unix://{tmp_path}/w{i}.sock" for i in range(2)]
    servers = [Worker(Session(smollm2, PhysicalSettings(256, 512)), loc, token="tok") for loc in locations]
    for conn, workers in (("QUAIL_POOL", locations), ("QUAIL_ONE", locations[:1])):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn}", json.dumps({"conn_type": "quail", "password": "tok",
                                                               "extra": {"workers": workers}}))
    yield locations, servers
    for server in servers:
        server.shutdown()


@pytest.fixture
def two_workers(tmp_path):
    with serving(tmp_path) as served:
        yield served


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
