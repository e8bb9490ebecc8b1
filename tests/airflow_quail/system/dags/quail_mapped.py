"""A filter mapped over the Parquet partitions of a table, and a classify mapped over the filter's
outputs: the dynamic-task-mapping test's DAG. Partitions and outputs come from the environment."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator

PARTS = os.environ.get("QUAIL_TEST_PARTITIONS", "/tmp/quail_partitions")
OUT = os.environ.get("QUAIL_TEST_OUTPUT", "/tmp/quail_mapped")
LABELS = ["sport", "business", "politics"]

with DAG("quail_mapped", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    kept = LLMFilterOperator.partial(
        task_id="kept",
        text_column="text",
        predicates=["Is this article about sport?"],
        threshold=0.1,
        target=f"{OUT}/kept-{{{{ ti.map_index }}}}.parquet",
    ).expand(source=[f"{PARTS}/part-{i}.parquet" for i in range(3)])
    LLMClassifyOperator.partial(
        task_id="topic",
        text_column="text",
        labels=LABELS,
        target=f"{OUT}/topic-{{{{ ti.map_index }}}}.parquet",
    ).expand(source=kept.output.map(lambda manifest: manifest["target"]))
