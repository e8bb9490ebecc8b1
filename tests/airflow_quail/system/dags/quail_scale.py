"""A filter over a table far larger than the worker's arena, then a classify of its output on the
same column: the computed-ahead test's DAG. Its table and outputs come from the environment."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator

SOURCE = os.environ.get("QUAIL_TEST_SOURCE", "/tmp/quail_scale.parquet")
OUT = os.environ.get("QUAIL_TEST_OUTPUT", "/tmp/quail_scale")

with DAG("quail_scale", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    kept = LLMFilterOperator(
        task_id="kept",
        source=SOURCE,
        text_column="text",
        predicates=["Is this about sport?"],
        threshold=0.382,  # about half the rows pass, on the tests' tiny random Llama
        target=f"{OUT}/kept.parquet",
    )
    topic = LLMClassifyOperator(
        task_id="topic",
        source=kept.target,
        text_column="text",
        labels=["sport", "money", "weather"],
        target=f"{OUT}/topic.parquet",
    )
    kept >> topic
