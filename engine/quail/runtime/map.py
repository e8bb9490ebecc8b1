"""A map at run time: the text written for each row, and whether it was truncated."""

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from quail.kinds import kind_of
from quail.kinds.map import asked as map_asked
from quail.kinds.map import render
from quail.kinds.writes import most_written
from quail.runtime.base import Inputs
from quail.runtime.writes import WritesRuntime
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session


class MapRuntime(WritesRuntime):
    kind = kind_of("map")

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        [(texts, rows)] = inputs
        r, stats = session.map(texts, spec.questions[0], spec.max_new_tokens, reuse, retain, truncate, progress, rows)
        written, truncated = self.kind.columns_added(spec)
        return pa.table({"row": pa.array(rows, pa.int64()), written: pa.array(r.texts, pa.string()),
                         truncated: pa.array(r.truncated, pa.bool_())}), stats

    def written_observed(self, spec: OperatorSpec, results: pa.Table,
                         encode: Callable[[list[str]], list[list[int]]]) -> dict[str, tuple[int, int]]:
        written, truncated = self.kind.columns_added(spec)
        texts = [t for t, cut in zip(results.column(written).to_pylist(), results.column(truncated).to_pylist())
                 if not cut]
        return {self.kind.field_keys(spec)[0]: (len(texts), sum(map(len, encode(texts))))} if texts else {}

    def asked(self, session: "Session", spec: OperatorSpec) -> tuple[str, int]:
        q = render(session.layout, spec.questions[0])
        return map_asked(q, most_written(spec.max_new_tokens)), len(q)
