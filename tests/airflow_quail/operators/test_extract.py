"""LLMExtractOperator and LLMMapOperator: fields given as a mapping, a JSON Schema or a pydantic
class become one mapping the DAG serializes; bad fields are refused when the DAG is parsed; a task
runs on the worker and writes typed columns beside the input's."""

import datetime
from types import SimpleNamespace
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.exceptions import AirflowException
from pydantic import BaseModel, Field

from airflow_quail.operators import LLMExtractOperator, LLMMapOperator

TEXTS = ["Acme Corp paid $1,250.00 on 2024-03-01 for 40 widgets. Great service!",
         "Invoice from Globex, total 99.5 dollars, dated 12 January 2023. Terrible delays."]


class Invoice(BaseModel):
    company: str | None = Field(description="the company named")
    amount: float | None = Field(description="the total in dollars")
    date: datetime.date | None
    sentiment: Literal["positive", "negative"] | None
    items: int | None
    tags: list[str] | None
    paid: bool | None


MAPPING = {"company": {"type": "str", "description": "the company named", "values": []},
           "amount": {"type": "float", "description": "the total in dollars", "values": []},
           "date": {"type": "date", "description": "", "values": []},
           "sentiment": {"type": "enum", "description": "", "values": ["positive", "negative"]},
           "items": {"type": "int", "description": "", "values": []},
           "tags": {"type": "list[str]", "description": "", "values": []},
           "paid": {"type": "bool", "description": "", "values": []}}


def _extract(fields, **kw) -> LLMExtractOperator:
    return LLMExtractOperator(task_id="fields", source="in.parquet", text_column="text", target="out.parquet",
                              fields=fields, **kw)


def test_fields_given_every_way_become_one_mapping():
    assert _extract(Invoice).fields == MAPPING
    assert _extract(Invoice.model_json_schema()).fields == MAPPING
    assert _extract({"company": {"type": "str", "description": "the company named"},
                     "amount": {"type": "float", "description": "the total in dollars"}, "date": "date",
                     "sentiment": ["positive", "negative"], "items": "int", "tags": "list[str]",
                     "paid": "bool"}).fields == MAPPING
    assert {"fields", "instruction"} <= set(LLMExtractOperator.template_fields)
    assert "instruction" in LLMMapOperator.template_fields


@pytest.mark.parametrize("fields, kw, says", [
    ({"amount": "money"}, {}, "task 'fields': field 'amount': type 'money' is not one of"),
    ({"a": {"type": "str", "colour": "red"}}, {}, "field 'a': give its type, description and values"),
    ({"type": "object", "properties": {"a": {"type": "object"}}}, {}, "field 'a': JSON Schema"),
    ({"a": "str"}, {"cascade": {"model": "m", "band": [0.1, 0.9]}}, "an extract takes no cascade"),
])
def test_bad_fields_are_refused_when_the_dag_is_parsed(fields, kw, says):
    with pytest.raises(AirflowException, match=says):
        _extract(fields, **kw)


def _context() -> dict:
    return {"ti": SimpleNamespace(dag_id="invoices", task_id="fields", run_id="r1", map_index=-1, try_number=1)}


def test_an_extract_and_a_map_run_on_the_worker(local_default, tmp_path):
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": TEXTS}), source)
    out = tmp_path / "fields.parquet"
    LLMExtractOperator(task_id="fields", source=str(source), text_column="text", target=str(out), fields=Invoice,
                       max_new_tokens=100).execute(_context())
    table = pq.read_table(out)
    assert table.column_names == ["id", "text", *MAPPING, "truncated", "invalid"]
    assert table.schema.field("date").type == pa.date32() and table.schema.field("tags").type == pa.list_(pa.string())
    summaries = tmp_path / "summaries.parquet"
    LLMMapOperator(task_id="summary", source=str(source), text_column="text", target=str(summaries),
                   instruction="Summarize it in five words.", output_column="summary",
                   max_new_tokens=20).execute(_context())
    rows = pq.read_table(summaries).to_pylist()
    assert [r["id"] for r in rows] == [1, 2] and all(isinstance(r["summary"], str) for r in rows)
