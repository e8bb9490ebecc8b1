"""A classify whose unsure rows a person reviews. The worker's model labels the news items; those
whose top label's probability is at most the band's edge go to a larger model (a cascade) and to
a review table. Airflow's human-in-the-loop operator shows that table and asks for a decision:
accept the reviewed rows, with corrections ("3=business, 7=politics"), or reject them. The last
task applies it and writes the final table.

Run the worker on a smaller model than the cascade's, for example the connection extra
{"model": "qwen2.5-coder-0.5b"} with QUAIL_REVIEW_CASCADE=qwen2.5-coder-1.5b (the default). The
decision comes from the Required Actions page, or the REST API:
PATCH /api/v2/dags/quail_review/dagRuns/RUN/taskInstances/review/-1/hitlDetails
{"chosen_options": ["Accept"], "params_input": {"corrections": "3=business"}}."""

import os
from pathlib import Path

import pendulum
import pyarrow as pa
from airflow.exceptions import AirflowException
from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import DAG, Param, task

from airflow_quail.io import read_source, write_target
from airflow_quail.operators import LLMClassifyOperator

NEWS = Path(__file__).resolve().parents[1] / "examples" / "news.csv"
OUT = Path(os.environ.get("QUAIL_DAG_OUTPUT", Path(__file__).resolve().parents[1] / "out" / "dags"))
LABELS = ["sport", "business", "politics", "science", "weather", "culture"]
ACCEPT, REJECT = "Accept", "Reject"


def corrections(text: str, reviewed: set[int]) -> dict[int, str]:
    """`3=business, 7=politics`: new labels for reviewed rows, by id."""
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, eq, label = (x.strip() for x in part.partition("="))
        if not eq or not key.lstrip("-").isdigit() or label not in LABELS:
            raise AirflowException(f"correction {part!r}: write ID=LABEL, with a label among {LABELS}")
        if int(key) not in reviewed:
            raise AirflowException(f"correction {part!r}: row {key} was not sent for review")
        out[int(key)] = label
    return out


with DAG("quail_review", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    topic = LLMClassifyOperator(
        task_id="topic",
        source=str(NEWS),
        text_column="text",
        labels=LABELS,
        question="What is the news item about?",
        cascade={"model": os.environ.get("QUAIL_REVIEW_CASCADE", "qwen2.5-coder-1.5b"),
                 "band": [0.0, float(os.environ.get("QUAIL_REVIEW_BAND", "0.6"))]},
        review_output=str(OUT / "topic_review.parquet"),
        target=str(OUT / "topic.parquet"),
    )

    @task
    def describe() -> str:
        """The review table as Markdown: what the reviewer sees."""
        rows = read_source(str(OUT / "topic_review.parquet")).to_pylist()
        lines = [f"{len(rows)} of the news items were unsure; the larger model labelled them.", "",
                 "| id | text | label | probability |", "| ---: | --- | --- | ---: |"]
        for r in rows:
            text = " ".join(r["text"].split())[:120]
            lines.append(f"| {r['id']} | {text} | {r['label']} | {r['p_' + r['label']]:.2f} |")
        return "\n".join(lines)

    review = HITLOperator(
        task_id="review",
        subject="Review the news items the model was unsure of",
        body="{{ ti.xcom_pull(task_ids='describe') }}",
        options=[ACCEPT, REJECT],
        params={"corrections": Param("", type="string",
                                     description="on Accept: new labels for reviewed rows, ID=LABEL, comma-separated")},
    )

    @task
    def apply(decision: dict) -> dict:
        """The final table: Accept keeps the reviewed rows with their corrections; Reject drops them."""
        table = read_source(str(OUT / "topic.parquet")).to_pylist()
        reviewed = {r["id"] for r in table if r["escalated"]}
        [choice] = decision["chosen_options"]
        fixed = corrections(decision["params_input"].get("corrections", ""), reviewed) if choice == ACCEPT else {}
        rows = [{"id": r["id"], "text": r["text"], "label": fixed.get(r["id"], r["label"]),
                 "reviewed": r["id"] in reviewed, "corrected": r["id"] in fixed}
                for r in table if choice == ACCEPT or r["id"] not in reviewed]
        write_target(pa.Table.from_pylist(rows), str(OUT / "topic_final.parquet"))
        return {"decision": choice, "reviewed": len(reviewed), "corrected": len(fixed), "rows": len(rows)}

    topic >> describe() >> review
    apply(review.output)
