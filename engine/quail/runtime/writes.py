"""What an extract and a map share at run time: their columns placed beside the input's rows, and
prediction's view of the outputs the answer store holds."""

from typing import TYPE_CHECKING

import pyarrow as pa

from quail.kinds.writes import keys
from quail.runtime.base import KindRuntime, stored
from quail.runtime.outputs import scatter
from quail.specs import OperatorSpec
from quail.store import WRITTEN

if TYPE_CHECKING:
    from quail.session import Session


class WritesRuntime(KindRuntime):
    """An extract's or a map's run-time class: its own says what its outputs are keyed by (`asked`)."""

    def asked(self, session: "Session", spec: OperatorSpec) -> tuple[str, int]:
        """What the store's keys name besides the model and the document (kinds/extract.py,
        kinds/map.py `asked`), and the tokens of the prompt after the document."""
        raise NotImplementedError

    def shape(self, spec: OperatorSpec, results: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        [table] = tables
        return scatter(results, table.num_rows, self.kind.columns_added(spec), source, table)

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
                   probes: bool) -> dict[int, int]:
        asked, question = self.asked(session, spec)
        store = stored(session)
        row_keys = [k for [k] in keys(store.key, asked, docs)]
        found = store.store.get(row_keys, WRITTEN, touch=False)
        return {i: len(d) + question for i, (d, k) in enumerate(zip(docs, row_keys)) if k in found}
