"""Text columns, with checks that name the source, column or row at fault."""

import pyarrow as pa

from quail.errors import QuailError


def text_column(table: pa.Table, column: str, source: str, on_null: str,
                first_row: int = 0) -> tuple[list[str], list[int]]:
    """The column's texts and the row numbers they came from (rows skipped under --on-null skip);
    `table` may be a window whose first row is row `first_row` of the source."""
    if column not in table.column_names:
        raise QuailError(f"{source}: no column {column!r}; it has {', '.join(table.column_names)}")
    col = table.column(column)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise QuailError(f"{source}: column {column!r} is {col.type}, not text")
    texts, rows = [], []
    for i, value in enumerate(col.to_pylist(), first_row):
        if value is None or not value.strip():
            if on_null == "skip":
                continue
            what = "NULL" if value is None else "empty"
            raise QuailError(f"{source}: row {i} of column {column!r} is {what}; use --on-null skip to skip such rows")
        texts.append(value)
        rows.append(i)
    return texts, rows

