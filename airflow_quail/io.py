"""Operator inputs and outputs, written atomically.

- A path ending in .parquet or .csv (outputs are Parquet), or a `file:` or `local:` URI
  (`file:///x`, `file:/x`, `local://x`): a temporary file in the same folder, then a rename
  (quail/atomic.py: the replaced file's mode is kept).
- A URI such as `s3://aws_default@bucket/x.parquet`: Airflow's
  ObjectStoragePath, with the filesystems that installed providers register. An output is written
  under a temporary name beside the target and then moved onto it; object stores publish the
  moved object whole.
- `sql://CONN_ID/TABLE` or `sql://CONN_ID?query=SELECT ...`: a table or query through an Airflow
  connection's SQLAlchemy engine. An output table is built under a temporary name and swapped in
  within one transaction (SQLite and PostgreSQL have transactional DDL; on SQLite the transaction is
  begun explicitly, as pysqlite would leave DDL outside it), so readers see the old table or the new
  one, never a partial one, and a failure leaves the old table and no staging table. A source
  query runs read-only.
"""

import re
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from quail.atomic import INPUT, check_output
from quail.errors import QuailError
from quail.pipeline.stream import DEFAULT_WINDOW_ROWS, OutputSink, TableSource
from quail.pipeline.tables import unique_columns

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath


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
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook

    try:
        hook = BaseHook.get_connection(conn_id).get_hook()
    except AirflowNotFoundException:
        raise QuailError(f"the connection {conn_id!r} is not defined") from None
    return hook.get_sqlalchemy_engine()


@contextmanager
def _read_only(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection on which a source query can change nothing: a read-only transaction on
    PostgreSQL, `PRAGMA query_only` on SQLite (reset before the connection goes back to the pool)."""
    with engine.connect() as c:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            c.exec_driver_sql("PRAGMA query_only = ON")
        elif engine.dialect.name == "postgresql":
            c.exec_driver_sql("SET TRANSACTION READ ONLY")
        try:
            yield c
        finally:
            c.rollback()
            if sqlite:
                c.exec_driver_sql("PRAGMA query_only = OFF")


@contextmanager
def _one_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One transaction around DDL and DML alike. pysqlite opens a transaction only before DML, so
    on SQLite a swap with no rows to insert would run CREATE, DROP and RENAME each committed on its
    own; there the transaction is begun explicitly, with the driver's own handling off."""
    with engine.connect() as c:
        raw = c.connection.driver_connection if engine.dialect.name == "sqlite" else None
        level = raw.isolation_level if raw is not None else None
        if raw is not None:
            raw.isolation_level = None  # the driver issues no BEGIN or COMMIT of its own
            c.exec_driver_sql("BEGIN")
        try:
            yield c
            c.commit()
        except BaseException:
            c.rollback()
            raise
        finally:
            if raw is not None:
                raw.isolation_level = level


def object_path(uri: str, readable: bool = True) -> "ObjectStoragePath | None":
    """An ObjectStoragePath for a URI with a scheme other than sql://; None for a local path.
    readable: a filesystem for its scheme must be registered (lineage only names it)."""
    scheme, sep, _ = uri.partition("://")
    if not sep or scheme == "sql":
        return None
    from airflow.sdk import ObjectStoragePath

    try:
        path = ObjectStoragePath(uri)
        if readable:
            _ = path.fs  # raises ValueError when no filesystem is registered for the scheme
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
        if (local := local_file(source)) is not None:
            yield from TableSource(local, source).windows(rows)
            return
        path = object_path(source)
        assert path is not None  # a URI with a scheme: local_file gave None, parse_sql too
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
        local = local_file(source)
        return TableSource(local, source).num_rows() if local is not None else None
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
    first = 0
    try:  # a locked or damaged database fails already when its table is looked up
        if where.table is not None:
            if not sa.inspect(engine).has_table(where.table):
                raise QuailError(f"source {source!r}: connection {where.conn_id!r} has no table {where.table!r}")
            query: sa.Executable = sa.select(sa.Table(where.table, sa.MetaData(), autoload_with=engine))
        else:
            assert where.query is not None  # parse_sql gives a table or a query
            query = sa.text(where.query)
        with _read_only(engine) as c:
            result = c.execution_options(stream_results=True, yield_per=rows).execute(query)
            names = list(result.keys())
            unique_columns(names, f"source {source!r}")
            for batch in result.partitions(rows):
                yield first, pa.table({n: pa.array([r[i] for r in batch]) for i, n in enumerate(names)})
                first += len(batch)
    except sa.exc.SQLAlchemyError as e:
        raise QuailError(f"source {source!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    if first == 0:
        yield 0, pa.table({n: pa.array([], pa.null()) for n in names}) if names else pa.table({})


def _sql_type(t: pa.DataType) -> sa.types.TypeEngine:
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


def _write_object(tables: Iterable[pa.Table], path: "ObjectStoragePath") -> None:
    temp = path.parent / f".{path.name}.quail-{uuid.uuid4().hex[:8]}.tmp"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with temp.open("wb") as f:
            _write_parquet(tables, f)
        temp.replace(path)
    except BaseException as e:
        if temp.exists():
            temp.unlink()
        if isinstance(e, OSError):
            raise QuailError(f"target {str(path)!r}: the old output was left as it was: {e.strerror or e}") from None
        raise


def _write_parquet(tables: Iterable[pa.Table], sink: BinaryIO) -> None:
    writer = None
    for table in tables:
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema)
        writer.write_table(table.cast(writer.schema))
    if writer is None:
        raise QuailError("an output needs at least one table, even an empty one")
    writer.close()


def target_location(target: str) -> "SqlLocation | Path | ObjectStoragePath | None":
    """Where an output goes (a SqlLocation, an ObjectStoragePath or a local path), checked before
    any work is done for it."""
    where = parse_sql(target)
    if where is not None:
        if where.table is None:
            raise QuailError(f"target {target!r}: a target is a table, sql://CONN_ID/TABLE")
        return where
    if not target.lower().endswith(".parquet"):
        raise QuailError(f"target {target!r}: outputs are .parquet paths or URIs, or sql://CONN_ID/TABLE")
    local = local_file(target)
    return local if local is not None else object_path(target)


def local_file(location: str) -> Path | None:
    """The file on this machine that a plain path or a `file:` or `local:` URI names (`file:///x`,
    `file:/x`, `local://x`); None for any other URI."""
    scheme, colon, _ = location.partition(":")
    if colon and scheme.lower() in LOCAL_SCHEMES:
        url = urlsplit(location)
        if url.netloc not in ("", "localhost"):  # file://io/x.parquet would be /x.parquet on a host "io"
            raise QuailError(f"{location!r} names the host {url.netloc!r}, and a {scheme}: URI names files on "
                             f"this machine: write {scheme}:///ABSOLUTE/PATH, or a plain path "
                             f"({url.netloc}{url.path}) for one relative to the working folder")
        return Path(unquote(url.path))
    return None if "://" in location else Path(location)


LOCAL_SCHEMES = ("file", "local")


def check_target(target: str, sources: Iterable[str] = ()) -> "SqlLocation | Path | ObjectStoragePath | None":
    """Refuses, before any work is sent, a target that could not be written: a location of the
    wrong kind, an unknown connection or one that does not answer, a path that cannot be created
    (under a regular file, in a read-only folder, in /proc), or one of the operator's own inputs,
    however it is spelt (a path, a `file://` URI, a link). Returns its location."""
    where = target_location(target)
    local, inputs = local_file(target), [p for p in map(local_file, sources) if p is not None]
    if target in sources or (isinstance(where, SqlLocation) and any(_reads_table(where, s) for s in sources)):
        raise QuailError(f"target {target!r} is {INPUT}")
    if isinstance(where, SqlLocation):
        _check_writable(where, target)
    elif local is not None:
        check_output(local, "target", dict.fromkeys(inputs, INPUT))
    return where


def _check_writable(where: SqlLocation, target: str) -> None:
    """The connection answers and may create and drop a table beside the target, as writing it
    does (a staging table renamed over it): a read-only database or user is refused before any
    computing, not after it. The probe table is gone whatever happens."""
    assert where.table is not None  # target_location refuses a target that is not a table
    engine = sql_engine(where.conn_id)
    probe = sa.Table(f"{where.table}__quail_probe_{uuid.uuid4().hex[:8]}", sa.MetaData(), sa.Column("x", sa.Integer))
    try:
        with _one_transaction(engine) as c:
            probe.create(c)
            probe.drop(c)
    except sa.exc.SQLAlchemyError as e:
        why = str(getattr(e, "orig", e)).splitlines()[0]
        raise QuailError(f"target {target!r} cannot be written: {e.__class__.__name__}: {why}") from None


def _database(conn_id: str) -> tuple:
    """Which database a connection reaches, however it is named: a SQLite file by its inode, a
    server by its backend, host, port and database."""
    url = sql_engine(conn_id).url
    if url.get_backend_name() == "sqlite":
        name = url.database or ""
        try:
            st = Path(name).stat()
            return "sqlite", st.st_dev, st.st_ino
        except OSError:
            return "sqlite", str(Path(name).resolve()) if name and name != ":memory:" else conn_id
    return url.get_backend_name(), url.host, url.port, url.database


def _reads_table(target: SqlLocation, source: str) -> bool:
    """Whether a SQL source reads the target's table, however either is spelt: the same database
    through any connection, the table's name in any case (SQLite ignores it; PostgreSQL folds
    unquoted names), or a query that names it."""
    where = parse_sql(source)
    if where is None:
        return False
    assert target.table is not None  # target_location refuses a target that is not a table
    name = target.table.rsplit(".", 1)[-1].strip('"`[]').lower()
    if where.table is not None:
        reads = where.table.rsplit(".", 1)[-1].strip('"`[]').lower() == name
    else:
        reads = re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", where.query or "", re.IGNORECASE) is not None
    return reads and (where.conn_id == target.conn_id or _database(where.conn_id) == _database(target.conn_id))


def write_target(tables: Iterable[pa.Table] | pa.Table, target: str) -> None:
    """Writes the tables, one after another (windows of one output), atomically to the target."""
    if isinstance(tables, pa.Table):
        tables = [tables]
    where, local = target_location(target), local_file(target)
    if local is not None:  # a path or a file:// URI: the replaced file's mode kept, a full disk named
        with OutputSink(str(local)) as sink:
            for table in tables:
                sink.write(table)
        return
    if not isinstance(where, SqlLocation):
        assert where is not None and not isinstance(where, Path)  # local_file gave None: an object store URI
        _write_object(tables, where)
        return
    assert where.table is not None  # target_location refuses a target that is not a table
    engine, name = sql_engine(where.conn_id), where.table
    temp = f"{name}__quail_{uuid.uuid4().hex[:8]}"
    quote = engine.dialect.identifier_preparer.quote
    try:
        with _one_transaction(engine) as c:  # all or nothing: the staging table goes with a rollback
            staging = None
            for table in tables:
                if staging is None:
                    columns = [sa.Column(f.name, _sql_type(f.type)) for f in table.schema]
                    staging = sa.Table(temp, sa.MetaData(), *columns)
                    staging.create(c)
                _check_range(table, target)
                if table.num_rows:
                    c.execute(staging.insert(), table.to_pylist())
            if staging is None:
                raise QuailError("an output needs at least one table, even an empty one")
            if sa.inspect(c).has_table(name):
                c.execute(sa.text(f"DROP TABLE {quote(name)}"))
            c.execute(sa.text(f"ALTER TABLE {quote(temp)} RENAME TO {quote(name)}"))
    except sa.exc.SQLAlchemyError as e:
        why = str(getattr(e, "orig", e)).splitlines()[0]
        views = "view" in why.lower() or "depend" in why.lower()
        hint = "; drop or change the views that depend on it first" if views else ""
        raise QuailError(f"target {target!r}: the table was left as it was: {why}{hint}") from None


def _check_range(table: pa.Table, target: str) -> None:
    """SQL integers are signed 64-bit: an unsigned value above that range is refused by name."""
    for f, column in zip(table.schema, table.columns):
        if pa.types.is_uint64(f.type) and table.num_rows:
            top = pc.max(column).as_py()
            if top is not None and top > 2**63 - 1:
                raise QuailError(f"target {target!r}: column {f.name!r} holds {top}, beyond a SQL BIGINT")
