"""The provider's cluster policy, registered through the `airflow.policy` entry point: every DAG
Airflow parses (in the dag-processor and in each task process) gets its Quail operators planned
together, so retention needs no line in the DAG file."""

from airflow.policies import hookimpl


@hookimpl
def dag_policy(dag) -> None:
    from airflow_quail.planning import plan_quail_dag

    plan_quail_dag(dag)
