"""Support tickets: keep the unhappy ones, then fill in what a support team triages by (the
product, the problem, whether the customer wants their money back, and how urgent it is) as typed
columns. The extract reads the tickets the filter kept, and reuses their KV rather than reading
them again. examples/tickets.csv is hand-written.

Needs a SQLite connection `quail_demo_db`, as quail_traces does."""

import os
from pathlib import Path
from typing import Literal

import pendulum
from airflow.sdk import DAG, task
from pydantic import BaseModel, Field

from airflow_quail.io import read_source, write_target
from airflow_quail.operators import LLMExtractOperator, LLMFilterOperator

TICKETS = Path(__file__).resolve().parents[1] / "examples" / "tickets.csv"
OUT = Path(os.environ.get("QUAIL_DAG_OUTPUT", Path(__file__).resolve().parents[1] / "out" / "dags"))
DB = "sql://quail_demo_db"
REUSE = os.environ.get("QUAIL_DAG_REUSE", "1") == "1"  # 0: every prompt from scratch, for checks


class Triage(BaseModel):
    product: str | None = Field(description="the product the ticket is about")
    problem: str | None = Field(description="what went wrong, in a few words")
    wants_refund: bool | None = Field(description="whether the customer asks for their money back")
    urgency: Literal["low", "medium", "high"] | None


with DAG("quail_support", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
         default_args={"reuse": REUSE}) as dag:

    @task
    def load_tickets() -> int:
        table = read_source(str(TICKETS))
        write_target(table, f"{DB}/tickets")
        return table.num_rows

    unhappy = LLMFilterOperator(
        task_id="unhappy",
        source=f"{DB}/tickets",
        text_column="text",
        predicates=["Is the customer unhappy?"],
        threshold=float(os.environ.get("QUAIL_DAG_THRESHOLD", 0.5)),
        target=f"{DB}/unhappy_tickets",
    )
    triage = LLMExtractOperator(
        task_id="triage",
        source=unhappy.target,
        text_column="text",
        fields=Triage,
        max_new_tokens=80,
        target=str(OUT / "triage.parquet"),
    )
    load_tickets() >> unhappy >> triage
