"""Agent traces in SQLite, where each row extends the previous turn: the filter's documents share
their leading pages (prefix sharing), and the classify reuses the filter's KV (retention).
examples/traces.csv is synthetic, written by bench/common/workloads.py's traces().

Needs a SQLite connection `quail_demo_db`, for example
AIRFLOW_CONN_QUAIL_DEMO_DB='{"conn_type": "sqlite", "host": "/tmp/quail_demo.db"}'."""

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_quail.io import read_source, write_target
from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces.csv"
DB = "sql://quail_demo_db"
REUSE = os.environ.get("QUAIL_DAG_REUSE", "1") == "1"  # 0: every prompt from scratch, for checks

with DAG("quail_traces", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
         default_args={"reuse": REUSE}) as dag:

    @task
    def load_traces() -> int:
        table = read_source(str(TRACES))
        write_target(table, f"{DB}/traces")
        return table.num_rows

    failing = LLMFilterOperator(
        task_id="failing_runs",
        source=f"{DB}/traces",
        text_column="trace",
        predicates=["Did a tool report an error?", "Did the agent run the tests?"],
        threshold=float(os.environ.get("QUAIL_DAG_THRESHOLD", 0.5)),
        target=f"{DB}/failing_runs",
    )
    next_step = LLMClassifyOperator(
        task_id="next_step",
        source=failing.target,
        text_column="trace",
        labels=["search_docs", "run_tests", "read_file", "edit_file"],
        question="Which tool should the agent use next?",
        target=f"{DB}/next_step",
    )
    load_traces() >> failing >> next_step
# No plan_quail_dag(dag) here: the provider's cluster policy plans every parsed DAG.
