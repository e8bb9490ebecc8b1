"""The example DAGs through a real Airflow (`airflow dags test`): every task is its own process,
the hook starts a local worker on demand, later tasks reuse KV that earlier ones computed, and a
run with reuse switched off gives the same outputs. The jokes DAG's run with reuse defers its
tasks to the triggerer, which changes nothing of what they reuse or write."""

import json

import pyarrow.parquet as pq
import pytest

from tests.airflow_quail.conftest import JOKES, dags_test, same_rows, worker_jobs

pytestmark = [pytest.mark.deployment, pytest.mark.model]  # `airflow dags test`; the local worker loads smollm2

JOKES_TASKS = ["tech", "theme", "by_technology", "audience"]
IN_SQLITE = {"tech": "tech_jokes", "theme": "joke_themes"}  # the rest are Parquet files


def _first_run(jobs: list[dict]) -> dict:
    first = jobs[0]["origin"]["run_id"]
    return {j["operator"]: j["stats"] for j in jobs if j["origin"]["run_id"] == first}


def _jokes_outputs(out, db) -> dict:
    import sqlalchemy as sa

    with sa.create_engine(f"sqlite:///{db}").connect() as c:
        tables = {t: [dict(r._mapping) for r in c.execute(sa.text(f"SELECT * FROM {name} ORDER BY id"))]
                  for t, name in IN_SQLITE.items()}
    return tables | {t: pq.read_table(out / f"{t}.parquet").to_pylist() for t in JOKES_TASKS if t not in IN_SQLITE}


def test_jokes_dag_reuses_kv_across_task_processes_deferred_to_the_triggerer(airflow_env, tmp_path):
    env, airflow = airflow_env
    outputs, logs = {}, {}
    for reuse in ("1", "0"):
        out = tmp_path / f"out{reuse}"
        logs[reuse] = dags_test(env, airflow, "quail_jokes", {"rows": JOKES}, QUAIL_DAG_OUTPUT=str(out),
                                QUAIL_DAG_REUSE=reuse, QUAIL_DAG_DEFERRABLE=reuse)
        outputs[reuse] = _jokes_outputs(out, tmp_path / "demo.db")
    assert "QuailJobTrigger" in logs["1"] and "deferred" in logs["1"].lower()
    assert "QuailJobTrigger" not in logs["0"]
    assert 0 < len(outputs["1"]["tech"]) < JOKES
    for task in JOKES_TASKS:
        same_rows(outputs["1"][task], outputs["0"][task])
    stats = _first_run(worker_jobs(tmp_path))
    assert set(stats) == set(JOKES_TASKS)
    # the theme classify reads tech's output: the worker computed its answers ahead, in tech's jobs, while
    # the KV was hot, and its own jobs found them in the answer store; the joins reused tech's KV
    assert stats["theme"]["tokens_reused"]["store"] > 0 and "computed the answers of theme ahead" in logs["1"]
    for task in JOKES_TASKS[2:]:
        assert stats[task]["tokens_reused"]["retention"] > 0, task  # KV the tech task computed
    for s in stats.values():
        assert s["tokens_computed"] + sum(s["tokens_reused"].values()) == s["tokens_naive"]
    report = (tmp_path / "out1" / "report.txt").read_text().splitlines()
    assert report[1].split()[:3] == ["tech", str(JOKES), str(len(outputs["1"]["tech"]))]
    computed, naive = (sum(s[k] for s in stats.values()) for k in ("tokens_computed", "tokens_naive"))
    assert report[1 + len(JOKES_TASKS)] == (f"reuse saved {1 - computed / naive:.0%} of the tokens: {computed:,} "
                                            f"computed where calling the model per row would compute {naive:,}")
    run_id = worker_jobs(tmp_path)[0]["origin"]["run_id"]
    page = _quail_page(env, f"/quail/api/runs/quail_jokes/{run_id}")
    assert set(page["tasks"]) == set(JOKES_TASKS)  # the Quail page reads the tasks' XCom manifests
    for task in JOKES_TASKS:
        assert page["tasks"][task]["stats"] == stats[task]
        assert page["tasks"][task]["predicted"]["tokens_naive"] > 0  # the plan's figures beside the actual
    assert all(page["tasks"][t]["predicted"]["tokens_reused"]["retention"] > 0 for t in JOKES_TASKS[2:])
    assert page["tasks"]["theme"]["predicted"]["tokens_reused"]["store"] > 0  # found before its jobs ran
    assert page["tasks"]["tech"]["plan"]["operator"]["retain"]["consumers"] == JOKES_TASKS[1:]
    _the_task_log_tells(logs["1"], page["tasks"])


def _the_task_log_tells(log: str, manifests: dict) -> None:
    """Each task's log closes with the CLI's summary, in the manifest's figures; the first task's
    log shows the local worker's start-up phases, the later ones that it was already running."""
    for task, m in manifests.items():
        s, r = m["stats"], m["stats"]["tokens_reused"]
        saved = 1 - s["tokens_computed"] / s["tokens_naive"]
        assert f"{task}: rows out {m['rows_out']:,} of {m['rows_in']:,} in, written to {m['target']}" in log
        assert (f"actual:    {s['tokens_computed']:,} computed of {s['tokens_naive']:,} without reuse ({saved:.0%} "
                f"saved); reused: rewind {r['rewind']:,}, sharing {r['sharing']:,}, retention {r['retention']:,}") in log
        assert f"forward passes {s['forward_passes']}, peak pages {s['pages_peak']} of {s['pages_total']}" in log
    for phase in ("starting a local Quail worker for smollm2-135m", "loading smollm2-135m (float32, device auto)",
                  "cost model calibrated in", "answers after"):
        assert phase in log, phase
    assert "loaded smollm2-135m in" in log or "opened smollm2-135m in" in log  # its weights read then, or later
    assert log.count("the local Quail worker for smollm2-135m is already running") >= len(manifests) - 1


def _quail_page(env: dict, route: str) -> dict:
    """A Quail page's JSON from the api-server app in-process, as an Airflow user."""
    import subprocess
    import sys

    code = ("import json, sys; from fastapi.testclient import TestClient; "
            "from airflow.api_fastapi.app import create_app, get_auth_manager; "
            "from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser; "
            "client = TestClient(create_app()); "  # the app sets up the auth manager
            "token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username='admin', role='admin')); "
            "print(json.dumps(client.get(sys.argv[1], headers={'Authorization': 'Bearer ' + token}).json()))")
    out = subprocess.run([sys.executable, "-c", code, route], env=dict(env, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_traces_dag_shares_prefixes_in_sqlite(airflow_env, tmp_path):
    import sqlalchemy as sa

    env, airflow = airflow_env
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'demo.db'}")
    tables = {}
    events = tmp_path / "openlineage"
    lineage = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events),
                                                              "append": True})}
    for reuse in ("1", "0"):
        dags_test(env, airflow, "quail_traces", QUAIL_DAG_REUSE=reuse, **lineage)
        with engine.connect() as c:
            tables[reuse] = {t: [dict(r._mapping) for r in c.execute(sa.text(f"SELECT * FROM {t} ORDER BY id"))]
                             for t in ("failing_runs", "next_step")}
    assert len(tables["1"]["failing_runs"]) > 0
    for t in ("failing_runs", "next_step"):
        same_rows(tables["1"][t], tables["0"][t])
    stats = _first_run(worker_jobs(tmp_path))
    assert stats["failing_runs"]["tokens_reused"]["sharing"] > 0  # each trace extends the previous row
    assert stats["next_step"]["tokens_reused"]["store"] > 0  # computed ahead in failing_runs' jobs
    assert json.dumps(stats)  # plain JSON: what XCom's manifest carries
    db = f"sqlite://{tmp_path / 'demo.db'}"
    done = [e for e in map(json.loads, events.read_text().splitlines())
            if e["eventType"] == "COMPLETE" and e["job"]["name"] == "quail_traces.next_step"]
    assert [(d["namespace"], d["name"]) for d in done[0]["inputs"]] == [(db, "failing_runs")]
    [out] = done[0]["outputs"]
    assert (out["namespace"], out["name"]) == (db, "next_step")
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == len(tables["1"]["next_step"])


def test_support_dag_extracts_from_the_tickets_the_filter_kept_reusing_their_kv(airflow_env, tmp_path):
    import sqlalchemy as sa

    env, airflow = airflow_env
    out = {}
    for reuse in ("1", "0"):
        dags_test(env, airflow, "quail_support", QUAIL_DAG_REUSE=reuse, QUAIL_DAG_OUTPUT=str(tmp_path / reuse))
        out[reuse] = pq.read_table(tmp_path / reuse / "triage.parquet")
    with sa.create_engine(f"sqlite:///{tmp_path / 'demo.db'}").connect() as c:
        kept = c.execute(sa.text("SELECT COUNT(*) FROM unhappy_tickets")).scalar()
    assert out["1"].num_rows == kept > 0
    assert out["1"].column_names == ["id", "text", "product", "problem", "wants_refund", "urgency", "truncated",
                                     "invalid"]
    assert out["1"].to_pylist() == out["0"].to_pylist()  # greedy, fp32: reuse changes no token
    assert {r["urgency"] for r in out["1"].to_pylist()} <= {"low", "medium", "high", None}
    jobs = worker_jobs(tmp_path)
    stats = _first_run(jobs)
    # the worker wrote the triage ahead, in the filter's job, on the tickets' KV the filter had just
    # computed; the triage task then found every output in the answer store
    [ahead] = [j["ahead"]["triage"] for j in jobs if j["operator"] == "unhappy" and j["ahead"]]
    assert ahead["rows"] == kept and ahead["retention"] > 0 and ahead["document_tokens_computed"] == 0
    assert ahead["tokens_generated"] > 0
    assert stats["triage"]["tokens_computed"] == stats["triage"]["tokens_generated"] == 0
    assert stats["triage"]["tokens_reused"]["store"] == stats["triage"]["tokens_naive"]
