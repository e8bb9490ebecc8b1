"""An extract at run time: each field's value per row, typed, and whether the row was truncated."""

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quail.kinds import kind_of
from quail.kinds.extract import asked as extract_asked
from quail.kinds.extract import render
from quail.kinds.writes import most_written
from quail.runtime.base import Inputs
from quail.runtime.writes import WritesRuntime
from quail.specs import FieldSpec, OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session

ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "date": pa.date32(),
         "enum": pa.string(), "list[str]": pa.list_(pa.string())}


def column(f: FieldSpec, values: list[Any]) -> pa.Array:
    """A field's values (kinds/extract.py `typed`: each one its column can hold) as its typed column."""
    return pa.array(values, ARROW[f.type])


class ExtractRuntime(WritesRuntime):
    kind = kind_of("extract")

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        [(texts, rows)] = inputs
        r, stats = session.extract(texts, spec.fields, spec.questions[0], spec.max_new_tokens, reuse, retain,
                                   truncate, progress, rows)
        columns = {"row": pa.array(rows, pa.int64())}
        for f in spec.fields:
            columns[f.name] = column(f, [None if v is None else v[f.name] for v in r.values])
        columns["truncated"] = pa.array(r.truncated, pa.bool_())
        columns["invalid"] = pa.array(r.invalid, pa.list_(pa.string()))
        return pa.table(columns), stats

    def written_observed(self, spec: OperatorSpec, results: pa.Table,
                         encode: Callable[[list[str]], list[list[int]]]) -> dict[str, tuple[int, int]]:
        """Each field's `"name": value` as the grammar writes it (kinds/extract.py JSON_SEPARATORS),
        tokenized again: the written tokens split by field."""
        whole = [i for i, cut in enumerate(results.column("truncated").to_pylist()) if not cut]
        if not whole:
            return {}
        out = {}
        for f, key in zip(spec.fields, self.kind.field_keys(spec)):
            values = results.column(f.name).to_pylist()
            texts = [f"{json.dumps(f.name)}: {json.dumps(values[i], ensure_ascii=False, default=str)}" for i in whole]
            out[key] = (len(whole), sum(map(len, encode(texts))))
        return out

    def asked(self, session: "Session", spec: OperatorSpec) -> tuple[str, int]:
        q = render(session.layout, spec.questions[0], spec.fields)
        return extract_asked(q, spec.fields, most_written(spec.max_new_tokens)), len(q)
