"""A filter, then a classify of the rows it kept: the DAG of the several-worker tests. Its source
and output folder come from the environment; each task has a Celery queue of its own."""

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator

OUT = os.environ.get("QUAIL_TEST_OUTPUT", "/tmp/quail_routed")

with DAG("quail_routed", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    kept = LLMFilterOperator(
        task_id="kept",
        source=os.environ.get("QUAIL_TEST_SOURCE", str(Path(__file__).parents[4] / "examples" / "news.csv")),
        text_column="text",
        predicates=["Is this article about sport?"],
        threshold=0.0,  # every row goes on, so that the classify always has KV to reuse
        target=f"{OUT}/{{{{ run_id }}}}/kept.parquet",
        queue="quail_filter",  # Celery queues, one Celery worker each in the CeleryExecutor test
    )
    topic = LLMClassifyOperator(
        task_id="topic",
        source=kept.target,
        text_column="text",
        labels=["sport", "business", "politics"],
        target=f"{OUT}/{{{{ run_id }}}}/topic.parquet",
        queue="quail_classify",
    )
    kept >> topic
