"""What every operator kind does at run time, above the session: compute a window's results, and
shape them into output rows. Results are keyed by input row number (`row`, or a join's
`left_row`/`right_row`), which is what the worker sends back; shaping needs the input tables and
happens where they are."""

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import pyarrow as pa
import pyarrow.compute as pc

from quail.kinds.base import OperatorKind
from quail.ops.stored import Stored
from quail.planner.plan import OperatorPlan
from quail.planner.predict import Prediction
from quail.specs import OperatorSpec

if TYPE_CHECKING:
    from quail.executor.stats import Stats
    from quail.reuse import Retain, Reuse
    from quail.session import Session
    from quail.store import Store

Inputs = list[tuple[list[str], list[int]]]  # per input: its texts and their row numbers


def stored(session: "Session") -> Stored:
    """The session's answer store as its model uses it, for prediction's view (`store_hits`), which
    is asked only where the session has one."""
    return Stored(cast("Store", session.store), session.loaded.identity)


class KindRuntime:
    kind: OperatorKind  # the traits it runs

    def compute(self, session: "Session", spec: OperatorSpec, inputs: Inputs, reuse: "Reuse",
                retain: "Retain | None", truncate: bool,
                progress: Callable[[int, int], None] | None) -> tuple[pa.Table, "Stats"]:
        """The results, one row per answered input row (keyed by `row`, or `left_row`/`right_row`)."""
        raise NotImplementedError

    def shape(self, spec: OperatorSpec, results: pa.Table, tables: list[pa.Table], source: str) -> pa.Table:
        """The output table from the input tables and the results."""
        raise NotImplementedError

    def in_window(self, results: pa.Table, offset: int) -> pa.Table:
        """Results keyed by row number within the window that starts at row `offset` of the table."""
        anchor = self.kind.anchor
        i = results.schema.get_field_index(anchor)
        return results.set_column(i, anchor, pc.subtract(results.column(i), pa.scalar(offset, pa.int64())))

    def output_rows(self, spec: OperatorSpec, results: pa.Table) -> list[int]:
        """The input rows that the output holds (by row number), for a consumer of its output."""
        return results.column(self.kind.anchor).to_pylist()

    def counted_rows(self, results: pa.Table) -> int:
        """The rows of these results that count toward a row limit."""
        return results.num_rows

    def store_hits(self, session: "Session", spec: OperatorSpec, docs: list[list[int]], partners: list[str],
               probes: bool) -> dict[int, int]:
        """Prediction's view of the answer store: the documents (a calibration's content-free ones,
        with `probes`) that the run will answer from it, with the tokens of the prompts each stands for."""
        return {}

    def reads(self, session: "Session", op: OperatorPlan, spec: OperatorSpec, docs: list[list[int]],
              partners: list[str], truncate: bool, use_store: bool) -> Prediction:
        """What the kind reads of its rows besides its prompts, predicted (a blocked join's vectors)."""
        return Prediction()

    def store_hits_all(self, session: "Session", spec: OperatorSpec, docs: list[list[int]],
                   partners: list[str]) -> dict[int, int]:
        """Every document answered from the store, each prompt asked (as a classify's or a join's
        stored answer stands for; a calibration's content-free documents once an earlier window of
        the run has stored them), with the tokens of those prompts."""
        t = self.kind.tokens(session.layout, spec, docs, partners)
        room = self.kind.document_room(t, session.context)  # a join's right rows, cut as the run cuts them
        prompts, _ = self.kind.prompts(replace(t, partners=[min(p, room) for p in t.partners]), 1.0)
        return {i: sum(len(d) + extra for _, extra in prompts) for i, d in enumerate(docs)}

    def observed(self, spec: OperatorSpec, results: pa.Table) -> tuple[int, int] | None:
        """(rows asked, rows passed) for the selectivity counts, from a kind that narrows its rows."""
        return None

    def written_observed(self, spec: OperatorSpec, results: pa.Table,
                         encode: Callable[[list[str]], list[list[int]]]) -> dict[str, tuple[int, int]]:
        """(rows, tokens written) by part (OperatorKind.field_keys) for the written-token counts,
        from the rows written whole; none for a kind that writes nothing."""
        return {}
