"""Parse-time planning: one plan hash in every parse, and no call needed in the DAG file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).parents[2] / "dags"


def _plan_hashes() -> dict:
    code = ("import sys, json; sys.path.insert(0, %r); import quail_jokes; "
            "print(json.dumps({t.task_id: json.loads(t.quail_plan) for t in quail_jokes.dag.tasks if hasattr(t, 'quail_plan')}))" % str(DAGS))
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.splitlines()[-1])


@pytest.mark.services  # two Python processes that import Airflow
def test_every_parse_gives_the_same_plan():
    """The dag-processor and each task process parse the file anew: one plan hash everywhere."""
    first, second = _plan_hashes(), _plan_hashes()
    assert first == second
    assert len({p["plan_hash"] for p in first.values()}) == 1
    assert first["tech"]["operator"]["retain"]["consumers"] == ["theme", "by_technology", "audience"]
    assert first["audience"]["operator"]["retain"] is None


@pytest.mark.services  # a Python process that imports Airflow and parses a DAG
def test_a_dag_without_a_planning_call_is_planned_by_the_policy(tmp_path):
    """dags/quail_traces.py never calls plan_quail_dag: parsing it (as the dag-processor and every
    task process do) plans its operators through the provider's cluster policy, with the hash an
    explicit call gives, and the classify is planned to reuse the filter's KV."""
    code = ("import json, sys; from airflow.dag_processing.dagbag import DagBag; "
            "from airflow_quail.planning import plan_of_dag; "
            "dag = DagBag(dag_folder=sys.argv[1]).dags['quail_traces']; "
            "print(json.dumps({'parsed': {t.task_id: json.loads(t.quail_plan) for t in dag.tasks "
            "if hasattr(t, 'quail_plan')}, 'explicit': plan_of_dag(dag).hash}))")
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    out = subprocess.run([sys.executable, "-c", code, str(DAGS / "quail_traces.py")], capture_output=True, text=True,
                         check=True, env=env).stdout.splitlines()[-1]
    doc = json.loads(out)
    assert "plan_quail_dag" not in (DAGS / "quail_traces.py").read_text().split("# No plan_quail_dag")[0]
    assert {p["plan_hash"] for p in doc["parsed"].values()} == {doc["explicit"]}
    assert doc["parsed"]["failing_runs"]["operator"]["retain"]["consumers"] == ["next_step"]


def test_mapped_operators_are_planned_and_retention_reaches_each_index():
    """A filter mapped over partitions and a classify mapped over its manifests' targets plan as
    two operators: the filter retains its documents for the classify. The plan is stored, indented,
    in the mapped operators' partial arguments, which every index gets."""
    from airflow.sdk import DAG

    from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator
    from airflow_quail.planning import plan_of_dag, plan_quail_dag

    with DAG("mapped") as dag:
        kept = LLMFilterOperator.partial(task_id="kept", text_column="text", predicates=["Sport?"],
                                         target="/out/kept-{{ ti.map_index }}.parquet").expand(
            source=["/in/part-0.parquet", "/in/part-1.parquet"])
        LLMClassifyOperator.partial(task_id="topic", text_column="text", labels=["a", "b"],
                                    target="/out/topic-{{ ti.map_index }}.parquet").expand(
            source=kept.output.map(lambda m: m["target"]))
    planned = plan_of_dag(dag)
    assert [s.name for s in planned.specs] == ["kept", "topic"]
    assert planned["kept"].retain.consumers == ("topic",)
    plan_quail_dag(dag)
    document = dag.get_task("kept").partial_kwargs["quail_plan"]
    assert document.startswith("{\n  ") and json.loads(document)["plan_hash"] == planned.hash


def test_a_consumer_that_might_not_run_is_not_computed_ahead(tmp_path):
    """A classify below a branch, or with a trigger rule other than all_success, is marked uncertain
    in the plan, and the worker computes nothing ahead for it, unless the DAG says `ahead=True`."""
    import pendulum
    from airflow.providers.standard.operators.python import BranchPythonOperator
    from airflow.sdk import DAG

    from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator
    from airflow_quail.planning import plan_of_dag
    from quail.worker.ahead import consumers_ahead

    def build(**classify):
        with DAG("d", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
            kept = LLMFilterOperator(task_id="kept", source=str(tmp_path / "in.parquet"), text_column="text",
                                     predicates=["Sport?"], target=str(tmp_path / "kept.parquet"))
            topic = LLMClassifyOperator(task_id="topic", source=kept.target, text_column="text", labels=["a", "b"],
                                        target=str(tmp_path / "topic.parquet"), **{k: v for k, v in classify.items()
                                                                                  if k != "branch"})
            kept >> topic
            if classify.get("branch"):
                BranchPythonOperator(task_id="which", python_callable=lambda: "topic") >> topic
        p = plan_of_dag(dag)
        return p["topic"].certain, [c.name for c in consumers_ahead(p, p.specs[0])]

    assert build() == (True, ["topic"])
    assert build(trigger_rule="all_done") == (False, [])
    assert build(branch=True) == (False, [])
    assert build(branch=True, ahead=True) == (True, ["topic"])


def test_a_dag_whose_operators_cascade_is_planned_with_their_cascades():
    """A cascade (a nested setting) stays one when the planning links a DAG's operators."""
    import pendulum
    from airflow.sdk import DAG

    from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator
    from airflow_quail.planning import plan_of_dag
    from quail.specs import Cascade

    with DAG("cascades", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        kept = LLMFilterOperator(task_id="kept", source="/tmp/in.parquet", text_column="text", predicates=["Q?"],
                                 target="/tmp/kept.parquet", cascade={"model": "big", "band": [0.2, 0.8]})
        LLMClassifyOperator(task_id="topic", source=kept.target, text_column="text", labels=["a", "b"],
                            target="/tmp/topic.parquet", cascade={"model": "big", "target": {"accuracy": 0.9}})
    specs = {s.name: s for s in plan_of_dag(dag).specs}
    assert specs["kept"].cascade == Cascade("big", 0.2, 0.8)
    assert specs["topic"].cascade == Cascade("big", metric="accuracy", target=0.9) and specs["topic"].inputs == ("kept",)
