"""Two chains of a filter, then a classify of the rows it kept, in windows of 10 rows with one
retry each: the DAG of the chaos test, which kills the worker under it. Its source and output
folder come from the environment."""

import os

import pendulum
from airflow.sdk import DAG

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator

OUT = os.environ.get("QUAIL_TEST_OUTPUT", "/tmp/quail_chaos")
SOURCE = os.environ.get("QUAIL_TEST_SOURCE", "/tmp/quail_chaos/source.parquet")

with DAG("quail_chaos", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
         default_args={"retries": 1, "retry_delay": pendulum.duration(seconds=5)}) as dag:
    for chain, question in (("sport", "Is this article about sport?"), ("money", "Is this article about money?")):
        kept = LLMFilterOperator(task_id=f"{chain}_kept", source=SOURCE, text_column="text", predicates=[question],
                                 threshold=0.0,  # every row goes on: the classify has every window to do
                                 window_rows=10, target=f"{OUT}/{{{{ run_id }}}}/{chain}_kept.parquet")
        topic = LLMClassifyOperator(task_id=f"{chain}_topic", source=kept.target, text_column="text",
                                    labels=["sport", "business", "politics"], window_rows=10,
                                    target=f"{OUT}/{{{{ run_id }}}}/{chain}_topic.parquet")
        kept >> topic
