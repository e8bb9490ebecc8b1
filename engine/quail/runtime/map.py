"""A map at run time: the text written for each row, and whether it was truncated."""

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from quail.kinds.extract import DEFAULT_MAX_NEW_TOKENS
from quail.kinds.map import Map, render
from quail.runtime.base import Inputs, KindRuntime
from quail.runtime.extract import written_hits
from quail.runtime.outputs import scatter
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.answer_stores import Store
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session


class MapRuntime(KindRuntime):
    kind = Map()

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        [(texts, rows)] = inputs
        r, stats = session.map(texts, spec.questions[0], spec.max_new_tokens, reuse, retain, truncate, progress, rows)
        written, truncated = self.kind.columns_added(spec)
        return pa.table({"row": pa.array(rows, pa.int64()), written: pa.array(r.texts, pa.string()),
                         truncated: pa.array(r.truncated, pa.bool_())}), stats

    def shape(self, spec: OperatorSpec, answers: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        return scatter(answers, table.num_rows, self.kind.columns_added(spec), source, table)

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        q = render(session.layout, spec.questions[0])
        asked = session.map_asked(q, spec.max_new_tokens or DEFAULT_MAX_NEW_TOKENS)
        return written_hits(cast("Store", session.store), session.written_keys(asked, docs), docs, len(q))
