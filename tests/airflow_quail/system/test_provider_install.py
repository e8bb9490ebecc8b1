"""`pip install airflow-quail` is the provider alone: no torch on Airflow's nodes. The wheel is built
and installed into a fresh venv without the `worker` extra; there torch is absent, the provider
imports, the example DAGs parse, the compute commands say to install the extra, and a DAG runs
against a worker from the full environment."""

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.airflow_quail.conftest import ROOT

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # `airflow dags test`; two workers load smollm2

ENGINE = ("torch", "tokenizers", "gguf", "safetensors", "triton")


def _run(*argv, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    """In `cwd`, away from the repository: there `python -c` would import its sources, and pip would
    take its editable install's metadata for an installed airflow-quail."""
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, **kwargs)


def site_packages_bytes(venv: Path) -> int:
    return sum(f.stat().st_size for f in venv.glob("lib/python*/site-packages/**/*") if f.is_file())


@pytest.mark.heavy
@pytest.mark.test_dags
def test_the_provider_installs_without_torch_and_runs_a_dag_on_a_full_worker(tmp_path, two_workers):
    run = partial(_run, cwd=tmp_path)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", ROOT)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("airflow_quail-*.whl")
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    python, airflow = venv / "bin" / "python", venv / "bin" / "airflow"
    # nothing of this environment's: a PYTHONPATH naming the repository would make pip take it for
    # an installed airflow-quail (its build leaves egg-info there) and skip the wheel
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the SQLite provider: the example DAGs' tables live in SQLite (sql://quail_demo_db/...), as a user's
    # DAGs need their own database's provider
    installed = run(python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", "apache-airflow==3.3.2",
                    "apache-airflow-providers-sqlite", wheel, env=clean)
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "QUAIL_HOME": str(tmp_path / "quail"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_CONN_QUAIL_DEMO_DB": json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "demo.db")})}

    check = run(python, "-c", "import importlib.util, json, sys; "
                 f"print(json.dumps([m for m in {ENGINE!r} if importlib.util.find_spec(m)]))", env=env)
    assert json.loads(check.stdout) == [], check.stderr  # no engine on an Airflow node
    parsed = run(python, "-c", "import airflow_quail.operators, airflow_quail.plugins, airflow_quail.triggers.quail; "
                  "from airflow.dag_processing.dagbag import DagBag; "
                  f"b = DagBag({str(ROOT / 'dags')!r}); "
                  "print(len(b.dags), b.import_errors)", env=env)
    dags, errors = parsed.stdout.splitlines()[-1].split(maxsplit=1) if parsed.returncode == 0 else (0, "")
    assert errors == "{}" and int(dags) >= 3, parsed.stdout + parsed.stderr[-3000:]

    news = ROOT / "examples" / "news.csv"
    for argv in (["filter", news, "--text-column", "text", "--predicate", "Sport?", "--output", tmp_path / "o.parquet"],
                 ["worker", "serve", "--socket", tmp_path / "w.sock"]):
        refused = run(venv / "bin" / "quail", *argv, env=env)
        assert refused.returncode == 2 and "install airflow-quail[worker]" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    local = run(python, "-c", "from quail.worker.local import ensure_local_worker; ensure_local_worker('smollm2-135m')",
                 env=env)
    assert "install airflow-quail[worker]" in local.stderr, local.stderr[-2000:]

    procs, token_file = two_workers
    host, port = next(iter(procs)).removeprefix("grpc://").split(":")
    dag_env = dict(env, AIRFLOW__CORE__DAGS_FOLDER=str(Path(__file__).parent / "dags"),
                   QUAIL_TEST_OUTPUT=str(tmp_path / "out"), AIRFLOW_CONN_QUAIL_DEFAULT=json.dumps(
                       {"conn_type": "quail", "host": host, "port": int(port), "password": token_file.read_text()}))
    assert run(airflow, "db", "migrate", env=dag_env).returncode == 0
    ran = run(airflow, "dags", "test", "quail_routed", env=dag_env)
    assert ran.returncode == 0 and "state=success" in ran.stdout + ran.stderr, ran.stderr[-3000:]
    assert len(list((tmp_path / "out").rglob("topic.parquet"))) == 1
    full, light = site_packages_bytes(Path(sys.prefix)), site_packages_bytes(venv)
    print(f"site-packages: provider only {light / 2**20:,.0f} MiB, with the engine and tests {full / 2**20:,.0f} MiB")
    assert light < full / 2
