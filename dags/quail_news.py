"""Sport news: a two-predicate filter, a classify of the survivors, and two joins with the same
anchor, so the worker reuses the filter's document KV in three later tasks (KV retention)."""

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator, LLMJoinOperator
from airflow_quail.planning import plan_quail_dag

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OUT = Path(os.environ.get("QUAIL_DAG_OUTPUT", Path(__file__).resolve().parents[1] / "out" / "dags"))
REUSE = os.environ.get("QUAIL_DAG_REUSE", "1") == "1"  # 0: every prompt from scratch, for checks
DEFERRABLE = os.environ.get("QUAIL_DAG_DEFERRABLE", "0") == "1"  # 1: wait for jobs in the triggerer

with DAG(
    "quail_news",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"reuse": REUSE, "deferrable": DEFERRABLE},
    params={
        "topic": Param("Is this article about sport?", type="string"),
        "detail": Param("Does the article report an event or a result?", type="string"),
        "threshold": Param(0.5, type="number"),
    },
) as dag:
    sport = LLMFilterOperator(
        task_id="sport",
        source=str(EXAMPLES / "news.csv"),
        text_column="text",
        predicates=["{{ params.topic }}", "{{ params.detail }}"],
        threshold=float(os.environ.get("QUAIL_DAG_THRESHOLD", 0.5)),
        target=str(OUT / "sport.parquet"),
    )
    kind = LLMClassifyOperator(
        task_id="kind",
        source=sport.target,
        text_column="text",
        labels=["match report", "injury", "record", "management"],
        question="What kind of sports story is this?",
        target=str(OUT / "kind.parquet"),
    )
    by_sport = LLMJoinOperator(
        task_id="by_sport",
        left=sport.target,
        right=str(EXAMPLES / "sports.csv"),
        left_column="text",
        right_column="description",
        condition="The article is about this sport.",
        target=str(OUT / "by_sport.parquet"),
    )
    by_venue = LLMJoinOperator(
        task_id="by_venue",
        left=sport.target,
        right=str(EXAMPLES / "venues.csv"),
        left_column="text",
        right_column="description",
        condition="The event in the article could take place at this venue.",
        target=str(OUT / "by_venue.parquet"),
    )
    @task
    def report(ti=None) -> str:
        """A per-task table of rows and tokens, from the operators' XCom manifests."""
        lines = [f"{'task':<10}{'rows in':>8}{'rows out':>9}{'computed':>10}{'naive':>9}{'rewind':>8}{'prefix':>8}"
                 f"{'retention':>10}"]
        for name in ("sport", "kind", "by_sport", "by_venue"):
            m = ti.xcom_pull(task_ids=name)
            s, r = m["stats"], m["stats"]["tokens_reused"]
            lines.append(f"{name:<10}{m['rows_in']:>8}{m['rows_out']:>9}{s['tokens_computed']:>10,}"
                         f"{s['tokens_naive']:>9,}{r['rewind']:>8,}{r['prefix']:>8,}{r['retention']:>10,}")
        text = "\n".join(lines)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "report.txt").write_text(text + "\n")
        return text

    sport >> kind >> by_sport >> by_venue >> report()

plan_quail_dag(dag)
