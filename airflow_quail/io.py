"""Operator inputs and outputs, written atomically.

- A path ending in .parquet or .csv (outputs are Parquet): a temporary file in the same folder,
  then a rename.
- A URI such as `file:///data/x.parquet` or `s3://aws_default@bucket/x.parquet`: Airflow's
  ObjectStoragePath, with the filesystems that installed providers register. An output is written
  under a temporary name beside the target and then moved onto it; object stores publish the
  moved object whole.
- `sql://CONN_ID/TABLE` or `sql://CONN_ID?query=SELECT ...`: a table or query through an Airflow
  connection's SQLAlchemy engine. An output table is built under a temporary name and swapped in
  within one transaction (SQLite and PostgreSQL have transactional DDL), so readers see the old
  table or the new one, never a partial one.
"""

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from quail.errors import QuailError
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS, OutputSink, TableSource


@dataclass(frozen=True)
class SqlLocation:
    conn_id: str
    table: str | None
    query: str | None


def parse_sql(uri: str) -> SqlLocation | None:
    if not uri.startswith("sql://"):
        return None
    rest = uri[len("sql://"):]
    if "?query=" in rest:
        conn_id, query = rest.split("?query=", 1)
        return SqlLocation(conn_id, None, query)
    conn_id, _, table = rest.partition("/")
    if not conn_id or not table:
        raise QuailError(f"{uri!r}: write sql://CONN_ID/TABLE or sql://CONN_ID?query=SELECT ...")
    return SqlLocation(conn_id, table, None)


def sql_engine(conn_id: str) -> sa.Engine:
    from airflow.sdk import BaseHook

    hook = BaseHook.get_connection(conn_id).get_hook()
    return hook.get_sqlalchemy_engine()


def object_path(uri: str, readable: bool = True):
    """An ObjectStoragePath for a URI with a scheme other than sql://; None for a local path.
    readable: a filesystem for its scheme must be registered (lineage only names it)."""
    scheme, sep, _ = uri.partition("://")
    if not sep or scheme == "sql":
        return None
    from airflow.sdk import ObjectStoragePath

    try:
        path = ObjectStoragePath(uri)
        if readable:
            path.fs
    except ValueError as e:
        raise QuailError(f"{uri!r}: {e}; install the Airflow provider for {scheme}://") from None
    return path


def read_source(source: str) -> pa.Table:
    return pa.concat_tables([t for _, t in iter_source(source, DEFAULT_WINDOW_ROWS)])


def iter_source(source: str, rows: int) -> Iterator[tuple[int, pa.Table]]:
    """(first row number, table) for consecutive windows of at most `rows` rows; at least one."""
    where = parse_sql(source)
    if where is None:
        if not source.lower().endswith((".parquet", ".csv")):
            raise QuailError(f"source {source!r}: give a .parquet or .csv path or URI, or sql://CONN_ID/TABLE")
        path = object_path(source)
        if path is None:
            yield from TableSource(source).windows(rows)
            return
        if not path.is_file():
            raise QuailError(f"source {source!r}: no such object")
        with path.open("rb") as f:
            yield from TableSource(pa.PythonFile(f, mode="r"), source).windows(rows)
        return
    yield from _sql_windows(source, where, rows)


def source_rows(source: str) -> int | None:
    """The source's row count when it is cheap to know: a local Parquet file or a SQL table."""
    where = parse_sql(source)
    if where is None:
        return TableSource(source).num_rows() if object_path(source) is None else None
    if where.table is None:
        return None
    try:
        with sql_engine(where.conn_id).connect() as c:
            table = sa.Table(where.table, sa.MetaData(), autoload_with=c)
            return c.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
    except sa.exc.SQLAlchemyError:
        return None  # reading it says what is wrong


def _sql_windows(source: str, where: SqlLocation, rows: int) -> Iterator[tuple[int, pa.Table]]:
    """A server-side cursor where the dialect has one, fetched `rows` at a time."""
    engine = sql_engine(where.conn_id)
    if where.table is not None:
        if not sa.inspect(engine).has_table(where.table):
            raise QuailError(f"source {source!r}: connection {where.conn_id!r} has no table {where.table!r}")
        query = sa.select(sa.Table(where.table, sa.MetaData(), autoload_with=engine))
    else:
        query = sa.text(where.query)
    first = 0
    try:
        with engine.connect() as c:
            result = c.execution_options(stream_results=True, yield_per=rows).execute(query)
            names = list(result.keys())
            for part in result.partitions(rows):
                yield first, pa.table({n: pa.array([r[i] for r in part]) for i, n in enumerate(names)})
                first += len(part)
    except sa.exc.SQLAlchemyError as e:
        raise QuailError(f"source {source!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    if first == 0:
        yield 0, pa.table({n: pa.array([], pa.null()) for n in names}) if names else pa.table({})


def _sql_type(t: pa.DataType):
    if pa.types.is_boolean(t):
        return sa.Boolean()
    if pa.types.is_integer(t):
        return sa.BigInteger()
    if pa.types.is_floating(t):
        return sa.Float(precision=53)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return sa.Text()
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None)
    if pa.types.is_date(t):
        return sa.Date()
    raise QuailError(f"a column of type {t} cannot be written to SQL")


def _write_object(tables: Iterable[pa.Table], path) -> None:
    temp = path.parent / f".{path.name}.quail-{uuid.uuid4().hex[:8]}.tmp"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with temp.open("wb") as f:
            _write_parquet(tables, f)
        temp.replace(path)
    except BaseException:
        if temp.exists():
            temp.unlink()
        raise


def _write_parquet(tables: Iterable[pa.Table], sink) -> None:
    writer = None
    for table in tables:
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema)
        writer.write_table(table.cast(writer.schema))
    if writer is None:
        raise QuailError("an output needs at least one table, even an empty one")
    writer.close()


def target_location(target: str):
    """Where an output goes (a SqlLocation, an ObjectStoragePath or a local path), checked before
    any work is done for it."""
    where = parse_sql(target)
    if where is not None:
        if where.table is None:
            raise QuailError(f"target {target!r}: a target is a table, sql://CONN_ID/TABLE")
        return where
    if not target.lower().endswith(".parquet"):
        raise QuailError(f"target {target!r}: outputs are .parquet paths or URIs, or sql://CONN_ID/TABLE")
    return object_path(target) or Path(target)


def write_target(tables: Iterable[pa.Table] | pa.Table, target: str) -> None:
    """Writes the tables, one after another (windows of one output), atomically to the target."""
    if isinstance(tables, pa.Table):
        tables = [tables]
    where = target_location(target)
    if isinstance(where, Path):
        with OutputSink(target) as sink:
            for table in tables:
                sink.write(table)
        return
    if not isinstance(where, SqlLocation):
        _write_object(tables, where)
        return
    engine = sql_engine(where.conn_id)
    temp = f"{where.table}__quail_{uuid.uuid4().hex[:8]}"
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as c:  # one transaction: the swap is all or nothing
        staging = None
        for table in tables:
            if staging is None:
                columns = [sa.Column(f.name, _sql_type(f.type)) for f in table.schema]
                staging = sa.Table(temp, sa.MetaData(), *columns)
                staging.create(c)
            if table.num_rows:
                c.execute(staging.insert(), table.to_pylist())
        if staging is None:
            raise QuailError("an output needs at least one table, even an empty one")
        if sa.inspect(c).has_table(where.table):
            c.execute(sa.text(f"DROP TABLE {quote(where.table)}"))
        c.execute(sa.text(f"ALTER TABLE {quote(temp)} RENAME TO {quote(where.table)}"))
