"""Plans a DAG's Quail operators together. An operator whose source (or left) is an upstream Quail
operator's target reads that operator's documents; that link and the DAG's order are what
retention is planned over. Pure and deterministic: the dag-processor and every task process
compute the same plan hash.

No call is needed in the DAG file: the provider's cluster policy (airflow_quail.policy) plans every
parsed DAG that holds Quail operators, and an operator outside any parse (a test, `dag.test()` on a
DAG object) plans from its DAG when it runs. `plan_quail_dag(dag)` at the end of a DAG file does
the same explicitly."""

import json
from dataclasses import asdict

from airflow_quail.operators.llm import _LLMOperator
from quail.planner.plan import OperatorPlan, Plan, plan


def dag_plan(dag) -> Plan | None:
    """The plan of the DAG's Quail operators, or None if it has none."""
    ops = [t for t in dag.topological_sort() if isinstance(t, _LLMOperator)]
    if not ops:
        return None
    producer = {op.target: op.task_id for op in ops}
    specs = []
    for op in ops:
        spec = op.spec()
        linked = tuple(producer.get(i, i) if producer.get(i) != op.task_id else i for i in spec.inputs)
        specs.append(spec.__class__(**{**spec.to_dict(), "inputs": linked}))
    return plan(specs)


def plan_quail_dag(dag) -> Plan | None:
    """Plans the DAG and stores each operator's entry, with the plan hash, in its `quail_plan`
    template field, which the UI's Rendered Templates view shows."""
    result = dag_plan(dag)
    if result is not None:
        for t in dag.tasks:
            if isinstance(t, _LLMOperator):
                t.quail_plan = plan_document(result.hash, result[t.task_id])
    return result


def plan_document(plan_hash: str, entry: OperatorPlan) -> str:
    return json.dumps({"plan_hash": plan_hash, "operator": asdict(entry)}, sort_keys=True)
