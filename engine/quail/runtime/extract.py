"""An extract at run time: each field's value per row, typed, and whether the row was truncated."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from quail.kinds.extract import Extract
from quail.runtime.base import Inputs, KindRuntime
from quail.runtime.outputs import scatter
from quail.specs import FieldSpec, OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session

ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "date": pa.date32(),
         "enum": pa.string(), "list[str]": pa.list_(pa.string())}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def column(f: FieldSpec, values: list[Any]) -> pa.Array:
    """A field's values as its typed column; an integer past int64 is null (no column holds it)."""
    if f.type == "int":
        values = [v if v is None or _INT64[0] <= v <= _INT64[1] else None for v in values]
    return pa.array(values, ARROW[f.type])


class ExtractRuntime(KindRuntime):
    kind = Extract()

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
        return pa.table(columns), stats

    def shape(self, spec: OperatorSpec, answers: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        return scatter(answers, table.num_rows, self.kind.columns_added(spec), source, table)
