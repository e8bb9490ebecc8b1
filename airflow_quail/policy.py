"""The provider's cluster policy, registered through the `airflow.policy` entry point: every DAG
Airflow parses (in the dag-processor and in each task process) gets its Quail operators planned
together, so retention needs no line in the DAG file."""

from typing import TYPE_CHECKING

from airflow.policies import hookimpl

if TYPE_CHECKING:
    from airflow.sdk import DAG


@hookimpl
def dag_policy(dag: "DAG") -> None:
    from airflow_quail.planning import plan_quail_dag

    plan_quail_dag(dag)
