"""Programmer jokes (pyjokes 0.8.3 from PyPI; examples/README.md has the source and licence),
loaded into SQLite: a two-predicate filter, a classify of the survivors, and two joins with the
same anchor, so the worker reuses the filter's document KV in three later tasks (KV retention).

Needs a SQLite connection `quail_demo_db`, for example
AIRFLOW_CONN_QUAIL_DEMO_DB='{"conn_type": "sqlite", "host": "/tmp/quail_demo.db"}'.
Trigger it from the UI with other predicates or fewer rows: they are the DAG's params."""

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_quail.io import read_source, write_target
from airflow_quail.operators import LLMClassifyOperator, LLMFilterOperator, LLMJoinOperator
from airflow_quail.planning import plan_quail_dag

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DB = "sql://quail_demo_db"
OUT = Path(os.environ.get("QUAIL_DAG_OUTPUT", Path(__file__).resolve().parents[1] / "out" / "dags"))
REUSE = os.environ.get("QUAIL_DAG_REUSE", "1") == "1"  # 0: every prompt from scratch, for checks
DEFERRABLE = os.environ.get("QUAIL_DAG_DEFERRABLE", "0") == "1"  # 1: wait for jobs in the triggerer
TASKS = ("tech", "theme", "by_technology", "audience")

with DAG(
    "quail_jokes",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"reuse": REUSE, "deferrable": DEFERRABLE},
    params={
        "rows": Param(180, type="integer", minimum=1, maximum=180, description="how many jokes to load"),
        "topic": Param("Is this joke about programming or computers?", type="string"),
        "detail": Param("Does the joke name a programming language, operating system or tool?", type="string"),
    },
) as dag:

    @task
    def load_jokes(params=None) -> int:
        table = read_source(str(EXAMPLES / "jokes.csv")).slice(0, params["rows"])
        write_target(table, f"{DB}/jokes")
        return table.num_rows

    tech = LLMFilterOperator(
        task_id="tech",
        source=f"{DB}/jokes",
        text_column="joke",
        predicates=["{{ params.topic }}", "{{ params.detail }}"],
        threshold=float(os.environ.get("QUAIL_DAG_THRESHOLD", 0.5)),
        target=f"{DB}/tech_jokes",
    )
    theme = LLMClassifyOperator(
        task_id="theme",
        source=tech.target,
        text_column="joke",
        labels=["programming language", "operating system", "database", "editor", "hardware"],
        question="What is the joke about?",
        target=f"{DB}/joke_themes",
    )
    by_technology = LLMJoinOperator(
        task_id="by_technology",
        left=tech.target,
        right=str(EXAMPLES / "technologies.csv"),
        left_column="joke",
        right_column="description",
        right_name="technology",
        condition="The joke is about the technology.",
        target=str(OUT / "by_technology.parquet"),
    )
    audience = LLMJoinOperator(
        task_id="audience",
        left=tech.target,
        right=str(EXAMPLES / "roles.csv"),
        left_column="joke",
        right_column="description",
        right_name="role",
        condition="Someone in the role would get the joke.",
        target=str(OUT / "audience.parquet"),
    )

    def answers(rows: list[dict], show: list[tuple[str, str]], n: int = 3) -> list[str]:
        """A few rows of an output: (column, format) pairs, text cut to 60 characters."""
        def cell(value, fmt):
            if not isinstance(value, str):
                return format(value, fmt)
            value = " ".join(value.split())
            return value if len(value) <= 60 else value[:57] + "..."

        return ["  " + "  |  ".join(cell(r[c], f) for c, f in show) for r in rows[:n]] or ["  (no rows)"]

    @task
    def report(ti=None) -> str:
        """A per-task table of rows and tokens, from the operators' XCom manifests, then a few of the
        answers each task wrote."""
        lines = [f"{'task':<14}{'rows in':>8}{'rows out':>9}{'computed':>10}{'naive':>9}{'rewind':>8}{'sharing':>8}"
                 f"{'retention':>10}"]
        computed = naive = 0
        for name in TASKS:
            m = ti.xcom_pull(task_ids=name)
            s, r = m["stats"], m["stats"]["tokens_reused"]
            lines.append(f"{name:<14}{m['rows_in']:>8}{m['rows_out']:>9}{s['tokens_computed']:>10,}"
                         f"{s['tokens_naive']:>9,}{r['rewind']:>8,}{r['sharing']:>8,}{r['retention']:>10,}")
            computed, naive = computed + s["tokens_computed"], naive + s["tokens_naive"]
        if naive:
            lines.append(f"reuse saved {1 - computed / naive:.0%} of the tokens: {computed:,} computed where "
                         f"calling the model per row would compute {naive:,}")
        outputs = {name: read_source(ti.xcom_pull(task_ids=name)["target"]).to_pylist() for name in TASKS}
        best = {name: sorted(outputs[name], key=lambda r: -r["p_yes"]) for name in ("by_technology", "audience")}
        lines += ["", "tech (kept jokes):"] + answers(outputs["tech"], [("joke", "")])
        lines += ["theme:"] + answers(outputs["theme"], [("joke", ""), ("label", "")])
        lines += ["by_technology (most likely pairs):"] + answers(
            best["by_technology"], [("left_joke", ""), ("right_technology", ""), ("p_yes", ".2f")])
        lines += ["audience (most likely pairs):"] + answers(
            best["audience"], [("left_joke", ""), ("right_role", ""), ("p_yes", ".2f")])
        text = "\n".join(lines)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "report.txt").write_text(text + "\n")
        return text

    load_jokes() >> tech >> theme >> by_technology >> audience >> report()

plan_quail_dag(dag)
