"""An extract at run time: each field's value per row, typed, and whether the row was truncated."""

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from quail.kinds.extract import DEFAULT_MAX_NEW_TOKENS, Extract, render
from quail.runtime.base import Inputs, KindRuntime
from quail.runtime.outputs import scatter
from quail.specs import FieldSpec, OperatorSpec
from quail.store import WRITTEN

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session
    from quail.store import Store

ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "date": pa.date32(),
         "enum": pa.string(), "list[str]": pa.list_(pa.string())}


def column(f: FieldSpec, values: list[Any]) -> pa.Array:
    """A field's values (kinds/extract.py `typed`: each one its column can hold) as its typed column."""
    return pa.array(values, ARROW[f.type])


class WritesRuntime(KindRuntime):
    """What an extract and a map share at run time: their columns placed beside the input's rows,
    and the prediction's view of the outputs the answer store holds."""

    def asked(self, session: "Session", spec: OperatorSpec) -> tuple[str, int]:
        """What the store's keys name besides the document (Session.extract_asked, map_asked), and the
        tokens of the prompt after the document."""
        raise NotImplementedError

    def shape(self, spec: OperatorSpec, answers: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        return scatter(answers, table.num_rows, self.kind.columns_added(spec), source, table)

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        asked, question = self.asked(session, spec)
        keys = session.written_keys(asked, docs)
        found = cast("Store", session.store).get(keys, WRITTEN, touch=False)
        return {i: len(d) + question for i, (d, k) in enumerate(zip(docs, keys)) if k in found}


class ExtractRuntime(WritesRuntime):
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
        columns["invalid"] = pa.array(r.invalid, pa.list_(pa.string()))
        return pa.table(columns), stats

    def written_observed(self, spec: OperatorSpec, answers: pa.Table,
                         encode: Callable[[list[str]], list[list[int]]]) -> dict[str, tuple[int, int]]:
        """Each field's `"name": value` as the grammar writes it (ops/grammar.py JSON_SEPARATORS),
        tokenized again: the written tokens split by field."""
        whole = [i for i, cut in enumerate(answers.column("truncated").to_pylist()) if not cut]
        if not whole:
            return {}
        out = {}
        for f, part in zip(spec.fields, self.kind.written_parts(spec)):
            values = answers.column(f.name).to_pylist()
            texts = [f"{json.dumps(f.name)}: {json.dumps(values[i], ensure_ascii=False, default=str)}" for i in whole]
            out[part] = (len(whole), sum(map(len, encode(texts))))
        return out

    def asked(self, session: "Session", spec: OperatorSpec) -> tuple[str, int]:
        q = render(session.layout, spec.questions[0], spec.fields)
        return session.extract_asked(q, spec.fields, spec.max_new_tokens or DEFAULT_MAX_NEW_TOKENS), len(q)
