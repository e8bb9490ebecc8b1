"""An operator's output table from its input tables and its answers (pipeline/compute.py)."""

import pyarrow as pa
import pyarrow.compute as pc

from quail.errors import QuailError
from quail.planner.specs import OperatorSpec


def _add_columns(table: pa.Table, columns: dict, source: str) -> pa.Table:
    for name, values in columns.items():
        if name in table.column_names:
            raise QuailError(f"{source}: already has a column {name!r}, which the output adds")
        table = table.append_column(name, values)
    return table


def _scatter(answers: pa.Table, n: int, names: list[str], source: str, table: pa.Table) -> pa.Table:
    """The answer columns placed at their rows; rows without an answer get nulls."""
    index = pa.array(range(n), pa.int64())
    position = pc.index_in(index, value_set=answers.column("row"))
    return _add_columns(table, {c: pc.take(answers.column(c), position) for c in names}, source)


def shape(spec: OperatorSpec, answers: pa.Table, inputs: list[pa.Table], source: str) -> tuple[pa.Table, int | None]:
    """The output table, and for a filter the number of rows that passed."""
    if spec.kind == "filter":
        [table] = inputs
        passed = pc.filter(answers.column("row"), answers.column("passed")).to_pylist()[: spec.limit]
        n_passed = int(pc.sum(answers.column("passed")).as_py() or 0)
        if not spec.keep_all:
            return table.take(pa.array(passed, pa.int64())), n_passed
        names = ["passed"] + [f"p_yes_{k + 1}" for k in range(len(spec.questions))]
        out = _scatter(answers, table.num_rows, names, source, table)
        if spec.limit is not None and len(passed) == spec.limit:
            out = out.slice(0, passed[-1] + 1)  # the rows up to the N-th passing one
        return out, n_passed
    if spec.kind == "classify":
        [table] = inputs
        names = ["label"] + [f"p_{label}" for label in spec.labels]
        return _scatter(answers, table.num_rows, names, source, table), None
    left, right = inputs
    lt, rt = left.take(answers.column("left_row")), right.take(answers.column("right_row"))
    columns = {f"left_{n}": lt.column(n) for n in lt.column_names}
    columns |= {f"right_{n}": rt.column(n) for n in rt.column_names}
    columns["p_yes"] = answers.column("p_yes")
    return pa.table(columns), None
