"""Operator inputs and outputs: Parquet files, written atomically (a temporary file, then a rename)."""

from quail.errors import QuailError
from quail.pipeline.tables import read_table, write_table


def read_source(source: str):
    if not source.lower().endswith((".parquet", ".csv")):
        raise QuailError(f"source {source!r}: give a .parquet or .csv path")
    return read_table(source)


def write_target(table, target: str) -> None:
    write_table(table, target)
