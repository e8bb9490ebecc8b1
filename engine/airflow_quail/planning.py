"""Plans a DAG's Quail operators together, at parse time: call `plan_quail_dag(dag)` at the end of
the DAG file. An operator whose source (or left) is an upstream Quail operator's target reads that
operator's documents; that link and the DAG's order are what retention is planned over. Pure and
deterministic: the dag-processor and every task process compute the same plan hash."""

from airflow_quail.operators.llm import _LLMOperator, plan_document
from quail.planner.plan import Plan, plan


def plan_quail_dag(dag) -> Plan:
    ops = [t for t in dag.topological_sort() if isinstance(t, _LLMOperator)]
    producer = {op.target: op.task_id for op in ops}
    specs = []
    for op in ops:
        spec = op.spec()
        linked = tuple(producer.get(i, i) if producer.get(i) != op.task_id else i for i in spec.inputs)
        specs.append(spec.__class__(**{**spec.to_dict(), "inputs": linked}))
    result = plan(specs)
    for op in ops:
        op.quail_plan = plan_document(result.hash, result[op.task_id])
    return result
