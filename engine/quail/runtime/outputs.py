"""Answer columns placed beside the input rows they answer (the kinds' output shapes)."""

import pyarrow as pa
import pyarrow.compute as pc

from quail.errors import QuailError


def clashes(added: list[str], columns: list[str]) -> list[str]:
    """The columns an output adds that the input has, by name without case, as SQL tells them apart."""
    have = {c.casefold() for c in columns}
    return sorted(c for c in added if c.casefold() in have)


def _add_columns(table: pa.Table, columns: dict, source: str) -> pa.Table:
    if clash := clashes(list(columns), table.column_names):
        raise QuailError(f"{source}: already has the column(s) {clash}, which the output adds")
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


def scatter(results: pa.Table, n: int, names: list[str], source: str, table: pa.Table) -> pa.Table:
    """The answer columns placed at their rows; rows without an answer get nulls."""
    index = pa.array(range(n), pa.int64())
    position = pc.index_in(index, value_set=results.column("row"))
    return _add_columns(table, {c: pc.take(results.column(c), position) for c in names}, source)

