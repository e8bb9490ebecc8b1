"""Reading input tables (Parquet, CSV) with checks that name the file, column or row at fault, and
writing outputs atomically: a temporary file in the target's folder, then a rename."""

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from quail.errors import QuailError


def read_table(path: str) -> pa.Table:
    p = Path(path)
    if not p.is_file():
        raise QuailError(f"input {path}: no such file")
    return parse_table(p, path)


def parse_table(source, name: str) -> pa.Table:
    """A CSV or Parquet table from a path or an open binary file, by `name`'s suffix."""
    csv = name.lower().endswith(".csv")
    try:
        return pacsv.read_csv(source) if csv else pq.read_table(source)
    except (pa.ArrowInvalid, OSError) as e:
        raise QuailError(f"input {name}: not a readable {'CSV' if csv else 'Parquet'} file: {e}")


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


def write_table(table: pa.Table, path: str) -> None:
    target = Path(path)
    if target.suffix.lower() == ".csv":
        raise QuailError(f"--output {path}: outputs are Parquet files")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
