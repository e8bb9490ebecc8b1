"""Provider registration, the hook's choice of worker, and parse-time planning."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_quail import get_provider_info
from airflow_quail.hooks.quail import QuailHook
from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator, LLMJoinOperator

DAGS = Path(__file__).parents[2] / "dags"


def test_provider_info_declares_the_connection_type():
    info = get_provider_info()
    [conn] = info["connection-types"]
    assert conn["connection-type"] == "quail" and conn["hook-class-name"] == "airflow_quail.hooks.quail.QuailHook"
    assert set(conn["conn-fields"]) == {"model", "dtype", "arena_pages"}
    assert conn["ui-field-behaviour"]["relabeling"]["password"] == "Token"
    from importlib.metadata import entry_points

    [ep] = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_quail")]
    assert ep.load()() == info


def test_a_connection_with_a_host_names_a_remote_worker(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_QUAIL_GPU", json.dumps({"conn_type": "quail", "host": "10.0.0.5", "port": 9000,
                                                             "password": "tok"}))
    client = QuailHook("quail_gpu").get_conn()
    assert client.location == "grpc://10.0.0.5:9000"


def test_an_unknown_connection_is_an_error():
    from airflow.exceptions import AirflowNotFoundException

    with pytest.raises(AirflowNotFoundException):
        QuailHook("no_such_connection").get_conn()


def test_operators_template_their_questions_and_paths():
    assert {"source", "target", "predicates", "quail_plan"} <= set(LLMFilterOperator.template_fields)
    assert {"labels", "question"} <= set(LLMClassifyOperator.template_fields)
    assert {"left", "right", "condition"} <= set(LLMJoinOperator.template_fields)


def _plan_hashes() -> dict:
    code = ("import sys, json; sys.path.insert(0, %r); import quail_jokes; "
            "print(json.dumps({t.task_id: json.loads(t.quail_plan) for t in quail_jokes.dag.tasks if hasattr(t, 'quail_plan')}))" % str(DAGS))
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.splitlines()[-1])


def test_every_parse_gives_the_same_plan():
    """The dag-processor and each task process parse the file anew: one plan hash everywhere."""
    first, second = _plan_hashes(), _plan_hashes()
    assert first == second
    assert len({p["plan_hash"] for p in first.values()}) == 1
    assert first["tech"]["operator"]["retain"]["consumers"] == ["theme", "by_technology", "audience"]
    assert first["audience"]["operator"]["retain"] is None


def test_the_trigger_serializes_to_itself():
    import importlib

    from airflow_quail.triggers.quail import QuailJobTrigger

    path, kwargs = QuailJobTrigger("job-1", "quail_gpu", 1.5).serialize()
    module, name = path.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs) and kwargs["job_id"] == "job-1"


def test_parsing_a_dag_imports_no_torch():
    """The dag-processor and every task process import the provider: the operators, hook, trigger
    and planning name the engine's types without loading the engine."""
    code = ("import sys, airflow_quail.operators, airflow_quail.hooks.quail, airflow_quail.triggers.quail, "
            "airflow_quail.planning; print(sorted(m for m in ('torch', 'quail.executor.engine', 'quail.kv') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_dag_without_a_planning_call_is_planned_by_the_policy(tmp_path):
    """dags/quail_traces.py never calls plan_quail_dag: parsing it (as the dag-processor and every
    task process do) plans its operators through the provider's cluster policy, with the hash an
    explicit call gives, and the classify is planned to reuse the filter's KV."""
    code = ("import json, sys; from airflow.dag_processing.dagbag import DagBag; "
            "from airflow_quail.planning import dag_plan; "
            "dag = DagBag(dag_folder=sys.argv[1]).dags['quail_traces']; "
            "print(json.dumps({'parsed': {t.task_id: json.loads(t.quail_plan) for t in dag.tasks "
            "if hasattr(t, 'quail_plan')}, 'explicit': dag_plan(dag).hash}))")
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = subprocess.run([sys.executable, "-c", code, str(DAGS / "quail_traces.py")], capture_output=True, text=True,
                         check=True, env=env).stdout.splitlines()[-1]
    doc = json.loads(out)
    assert "plan_quail_dag" not in (DAGS / "quail_traces.py").read_text().split("# No plan_quail_dag")[0]
    assert {p["plan_hash"] for p in doc["parsed"].values()} == {doc["explicit"]}
    assert doc["parsed"]["failing_runs"]["operator"]["retain"]["consumers"] == ["next_step"]
