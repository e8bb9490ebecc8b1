"""Text columns, with checks that name the source, column or row at fault."""

import pyarrow as pa

from quail.errors import QuailError


def unique_columns(names: list[str], source: str) -> None:
    """Refuses a table with two columns of one name: which of them is the text, or the output's?"""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise QuailError(f"{source}: more than one column is named {', '.join(map(repr, twice))}; give each column "
                         f"a name of its own")


def text_column(table: pa.Table, column: str, source: str, on_null: str,
                first_row: int = 0) -> tuple[list[str], list[int]]:
    """The column's texts and the row numbers they came from (rows skipped under --on-null skip);
    `table` may be a window whose first row is row `first_row` of the source."""
    if column not in table.column_names:
        raise QuailError(f"{source}: no column {column!r}; it has {', '.join(table.column_names)}")
    col = _as_text(table.column(column), column, source, first_row)
    texts, rows = [], []
    for i, value in enumerate(col.to_pylist(), first_row):
        if value is None or not value.strip():
            if on_null == "skip":
                continue
            what = "NULL" if value is None else "empty"
            raise QuailError(f"{source}: row {i} of column {column!r} is {what}; set on_null to 'skip' to skip such "
                             f"rows", parameter="on_null")
        texts.append(value)
        rows.append(i)
    return texts, rows


def _as_text(col: pa.ChunkedArray, column: str, source: str, first_row: int) -> pa.ChunkedArray:
    """The column as strings: dictionary-encoded text decoded, an all-NULL column (a CSV file with
    only its header) as NULL strings, and bytes (a CSV reader's guess for invalid UTF-8) decoded,
    naming the first row that is not UTF-8."""
    t = col.type
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return col.cast(t.value_type)
    if pa.types.is_null(t):
        return col.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            text = col if pa.types.is_string(t) or pa.types.is_large_string(t) else col.cast(pa.large_string())
            text.validate(full=True)  # UTF-8 checked in C++; the rows are searched only on an error
            return text
        except pa.ArrowInvalid:
            _name_invalid_row(col, column, source, first_row)
    raise QuailError(f"{source}: column {column!r} is {t}, not text")


def _name_invalid_row(col: pa.ChunkedArray, column: str, source: str, first_row: int) -> None:
    for i, value in enumerate(col.cast(pa.large_binary()).to_pylist(), first_row):
        try:
            value is None or value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise QuailError(f"{source}: row {i} of column {column!r} is not valid UTF-8 "
                             f"(byte {e.start}: {value[e.start:e.start + 1]!r})") from None
    raise QuailError(f"{source}: column {column!r} is not valid text")
