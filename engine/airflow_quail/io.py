"""Operator inputs and outputs, written atomically.

- A path ending in .parquet or .csv (outputs are Parquet): a temporary file in the same folder,
  then a rename.
- `sql://CONN_ID/TABLE` or `sql://CONN_ID?query=SELECT ...`: a table or query through an Airflow
  connection's SQLAlchemy engine. An output table is built under a temporary name and swapped in
  within one transaction (SQLite and PostgreSQL have transactional DDL), so readers see the old
  table or the new one, never a partial one.
"""

import uuid
from dataclasses import dataclass

import pyarrow as pa
import sqlalchemy as sa

from quail.errors import QuailError
from quail.pipeline.tables import read_table, write_table


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


def _engine(conn_id: str) -> sa.Engine:
    from airflow.sdk import BaseHook

    hook = BaseHook.get_connection(conn_id).get_hook()
    return hook.get_sqlalchemy_engine()


def read_source(source: str) -> pa.Table:
    where = parse_sql(source)
    if where is None:
        if not source.lower().endswith((".parquet", ".csv")):
            raise QuailError(f"source {source!r}: give a .parquet or .csv path, or sql://CONN_ID/TABLE")
        return read_table(source)
    engine = _engine(where.conn_id)
    if where.table is not None:
        if not sa.inspect(engine).has_table(where.table):
            raise QuailError(f"source {source!r}: connection {where.conn_id!r} has no table {where.table!r}")
        query = sa.select(sa.Table(where.table, sa.MetaData(), autoload_with=engine))
    else:
        query = sa.text(where.query)
    try:
        with engine.connect() as c:
            result = c.execute(query)
            names, rows = list(result.keys()), result.fetchall()
    except sa.exc.SQLAlchemyError as e:
        raise QuailError(f"source {source!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    return pa.table({n: pa.array([r[i] for r in rows]) for i, n in enumerate(names)}) if names else pa.table({})


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


def write_target(table: pa.Table, target: str) -> None:
    where = parse_sql(target)
    if where is None:
        write_table(table, target)
        return
    if where.table is None:
        raise QuailError(f"target {target!r}: a target is a table, sql://CONN_ID/TABLE")
    engine = _engine(where.conn_id)
    temp = f"{where.table}__quail_{uuid.uuid4().hex[:8]}"
    staging = sa.Table(temp, sa.MetaData(), *[sa.Column(f.name, _sql_type(f.type)) for f in table.schema])
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as c:  # one transaction: the swap is all or nothing
        staging.create(c)
        if table.num_rows:
            c.execute(staging.insert(), table.to_pylist())
        if sa.inspect(c).has_table(where.table):
            c.execute(sa.text(f"DROP TABLE {quote(where.table)}"))
        c.execute(sa.text(f"ALTER TABLE {quote(temp)} RENAME TO {quote(where.table)}"))
