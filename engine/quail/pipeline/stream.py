"""Tables read and written a window of rows at a time, so that memory follows the window, not the
table: Parquet by row groups, CSV by blocks, and an output written to a temporary Parquet file in
the target's folder that replaces the target only when every window is in."""

from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from quail.atomic import Publication, replaced_atomically, writing
from quail.errors import QuailError
from quail.pipeline.tables import unique_columns

DEFAULT_WINDOW_ROWS = 8192
CSV_BLOCK_BYTES = 64 << 20  # a CSV row (a document) must fit one block; types are inferred from the first

T = TypeVar("T")


class TableSource:
    """A Parquet or CSV file (a path, or an open binary file), read in windows; `name` is what errors
    call it, and its suffix says which format."""

    def __init__(self, source: str | Path | pa.NativeFile, name: str | None = None):
        self.source = str(source) if isinstance(source, Path) else source
        self.name = name or str(source)
        self.csv = self.name.lower().endswith(".csv")
        self._schema: pa.Schema | None = None
        if isinstance(self.source, str) and not Path(self.source).is_file():
            raise QuailError(f"input {self.name}: no such file")

    def _batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        if self.csv:
            reader = self._open_csv()
            self._schema = self._checked(reader.schema)
            yield from reader
        else:
            file = pq.ParquetFile(self.source)
            self._schema = self._checked(file.schema_arrow)
            yield from file.iter_batches(batch_size=max(rows, DEFAULT_WINDOW_ROWS))  # windows slice them

    def _checked(self, schema: pa.Schema) -> pa.Schema:
        unique_columns(schema.names, f"input {self.name}")
        return schema

    def _open_csv(self) -> pacsv.CSVStreamingReader:
        return pacsv.open_csv(self.source, read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES))

    def num_rows(self) -> int | None:
        """Known up front for Parquet; a CSV file's only once read."""
        return None if self.csv else self._readable(lambda: pq.ParquetFile(self.source).metadata.num_rows)

    def schema(self) -> pa.Schema:
        schema = self._readable(lambda: self._open_csv().schema if self.csv else pq.read_schema(self.source))
        return self._checked(schema)

    def _readable(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except (pa.ArrowInvalid, OSError) as e:
            form = "CSV" if self.csv else "Parquet"
            raise QuailError(f"input {self.name}: not a readable {form} file: {e}") from None

    def windows(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        """(first row number, table) for consecutive windows of `rows` rows; at least one, maybe empty."""
        first, pending, held = 0, [], 0
        try:
            for batch in self._batches(rows):
                pending.append(batch)
                held += batch.num_rows
                while held >= rows:
                    table = pa.Table.from_batches(pending)
                    yield first, table.slice(0, rows)
                    first += rows
                    rest = table.slice(rows)
                    pending, held = rest.to_batches(), rest.num_rows
            if held or first == 0:
                yield first, pa.Table.from_batches(pending, schema=None if pending else self._schema)
        except (pa.ArrowInvalid, OSError) as e:
            raise QuailError(f"input {self.name}: not a readable {'CSV' if self.csv else 'Parquet'} file "
                             f"(near row {first}): {e}") from None

    def read_all(self) -> pa.Table:
        return pa.concat_tables([t for _, t in self.windows(DEFAULT_WINDOW_ROWS)])


class OutputSink:
    """Windows of an output table into a temporary Parquet file beside `path`, which replaces `path`
    on a clean exit and is removed on any error: a failed run leaves the old output whole."""

    def __init__(self, path: str, publication: Publication | None = None):
        """publication: the output replaces `path` when that is published, and until then lies,
        complete, at `written`."""
        self.path = Path(path)
        if self.path.suffix.lower() == ".csv":
            raise QuailError(f"output {path}: outputs are Parquet files", parameter="output")
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._publication = publication

    def __enter__(self) -> "OutputSink":
        self._replacing = replaced_atomically(self.path, self._publication)
        self._tmp = self._replacing.__enter__()
        return self

    @property
    def written(self) -> Path:
        """Where the complete output lies once the sink is closed."""
        return self._tmp if self._publication is not None else self.path

    def write(self, table: pa.Table) -> pa.Table:
        """Appends the table, cast to the output's schema (its first table's); returns it as written."""
        with writing(self.path):
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._tmp, table.schema)
            elif not table.schema.equals(self._writer.schema):
                table = table.cast(self._writer.schema)
            self._writer.write_table(table)
        self.rows += table.num_rows
        return table

    @property
    def schema(self) -> pa.Schema | None:
        return self._writer.schema if self._writer is not None else None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        try:
            with writing(self.path):
                if self._writer is not None:
                    self._writer.close()  # after an error too: it lets the file go
                elif kind is None:  # windows always give at least one table, even an empty one
                    raise RuntimeError(f"no table was written to {self.path}")
        except BaseException as e:
            self._replacing.__exit__(type(e), e, e.__traceback__)  # the temporary file goes
            if kind is None:
                raise
            return False  # the block's own error is the one to report
        return self._replacing.__exit__(kind, error, tb)
