"""Runs whenever the jokes DAG's filter rewrites its output: the `tech` task's target is an Airflow
Asset (every Quail operator's target is an outlet, its sources inlets), and this DAG is scheduled
on it. It counts the kept jokes and lists the shortest, without a model.

Needs the same SQLite connection `quail_demo_db` as quail_jokes, when the DAG is parsed (the Asset
is named from the database's path)."""

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_quail.io import read_source
from airflow_quail.lineage import quail_asset

OUT = Path(os.environ.get("QUAIL_DAG_OUTPUT", Path(__file__).resolve().parents[1] / "out" / "dags"))
KEPT = "sql://quail_demo_db/tech_jokes"  # the target of quail_jokes' `tech` filter

with DAG(
    "quail_jokes_digest",
    schedule=[quail_asset(KEPT)],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):

    @task
    def digest(triggering_asset_events=None) -> str:
        [events] = triggering_asset_events.values()
        kept = read_source(KEPT).column("joke").to_pylist()
        lines = [f"{len(kept)} jokes kept by {events[-1].source_dag_id}.{events[-1].source_task_id} "
                 f"(run {events[-1].source_run_id}); the shortest:"]
        lines += [f"  {joke}" for joke in sorted(kept, key=len)[:3]]
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "digest.txt").write_text("\n".join(lines) + "\n")
        return "\n".join(lines)

    digest()
